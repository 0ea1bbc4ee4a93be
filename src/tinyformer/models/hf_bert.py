"""Hugging Face BERT checkpoints -> tinyformer's `BertEncoder` / `BertForMaskedLM` (names, config, weights).

`load_hf_bert` reads a Hugging Face BERT folder (config.json + model.safetensors)
with `safetensors` alone and maps its weights onto `BertEncoder`; the only
non-trivial step is fusing HF's separate query/key/value Linears into our one
`qkv` Linear. `model.init_from` uses the same mapping: `pretrained_bert` turns a
folder, the offline MiniLM (`tinyformer.hub`) or a hub id into the architecture,
before anything is written, and `load_hf_weights` copies the encoder (and a
BertForMaskedLM checkpoint's head) into a model built with it. Tests check the
result against `transformers` to 1e-4.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.hub import MAX_CONFIG_BYTES, folder_json, hf_config, hf_weights, pretrained_folder
from tinyformer.models.bert import BertConfig, BertEncoder, BertForMaskedLM
from tinyformer.models.hf_config import check_config, check_shapes, copied, model_type

# ---- loading a Hugging Face BERT checkpoint ----------------------------------------------------------------------

# (ours, Hugging Face) name pairs copied one to one; "{i}" is the layer index. query/key/value are fused separately.
_EMBEDDING_NAMES = [
    ("tok_emb.weight", "embeddings.word_embeddings.weight"),
    ("pos_emb.weight", "embeddings.position_embeddings.weight"),
    ("seg_emb.weight", "embeddings.token_type_embeddings.weight"),
    ("ln_emb.weight", "embeddings.LayerNorm.weight"),
    ("ln_emb.bias", "embeddings.LayerNorm.bias"),
]
_BLOCK_NAMES = [
    ("attn.proj", "attention.output.dense"),
    ("ln1", "attention.output.LayerNorm"),
    ("mlp.fc", "intermediate.dense"),
    ("mlp.proj", "output.dense"),
    ("ln2", "output.LayerNorm"),
]


def config_from_hf(hf: dict, *, backend: str = "sdpa", where: str = "config.json") -> BertConfig:
    """A Hugging Face BERT config.json (as a dict; `where` names it) -> BertConfig, every key checked first (with
    transformers' defaults for those it leaves out: `tinyformer.models.hf_config`); UserError for what we cannot
    reproduce."""
    if model_type(hf, where) != "bert":
        raise UserError(f"model_type={model_type(hf)!r} in config.json is not a BERT; expected 'bert'")
    h = check_config(hf, where)
    if h["hidden_act"] != "gelu":
        raise UserError(f"hidden_act={h['hidden_act']!r} is not supported; only 'gelu' (exact GELU)")
    if h["position_embedding_type"] != "absolute":
        raise UserError(f"position_embedding_type={h['position_embedding_type']!r} is not supported; only 'absolute'")
    return BertConfig(**copied(h), backend=backend, positions="learned")


def _legacy_name(k: str) -> str:
    """Old TF-converted checkpoints call LayerNorm's weight and bias gamma and beta."""
    for old, new in ((".gamma", ".weight"), (".beta", ".bias")):
        if "LayerNorm" in k and k.endswith(old):
            return k.removesuffix(old) + new
    return k


def _strip_hf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the "bert." prefix of BertFor* checkpoints and rename legacy LayerNorm gamma/beta to weight/bias."""
    prefixed = any(k.startswith("bert.") for k in state)
    # task heads ("cls.", "classifier.") are not part of the encoder
    return {_legacy_name(k.removeprefix("bert.")): v for k, v in state.items() if k.startswith("bert.") or not prefixed}


def hf_to_ours(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """A Hugging Face BERT state dict (prefix stripped) -> a `BertEncoder` state dict; KeyError if one is missing."""
    out = {ours: state[hf] for ours, hf in _EMBEDDING_NAMES}
    for i in range(n_layer):
        hf_layer, ours_layer = f"encoder.layer.{i}.", f"blocks.{i}."
        for ours, hf in _BLOCK_NAMES:
            for p in ("weight", "bias"):
                out[f"{ours_layer}{ours}.{p}"] = state[f"{hf_layer}{hf}.{p}"]
        for p in ("weight", "bias"):  # q, k, v stacked in that order, as `MultiHeadAttention.project` splits them
            qkv = [state[f"{hf_layer}attention.self.{name}.{p}"] for name in ("query", "key", "value")]
            out[f"{ours_layer}attn.qkv.{p}"] = torch.cat(qkv, dim=0)  # (3D, D) weight or (3D,) bias
    return out


def hf_head_to_ours(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """A BertForMaskedLM checkpoint's head (cls.predictions.*) -> `BertForMaskedLM`'s head names; None if it has none.

    The head's decoder weight is tied to the word embeddings in both models, so only its bias is copied.
    """
    state = {_legacy_name(k): v for k, v in state.items() if k.startswith("cls.predictions.")}
    bias = state.get("cls.predictions.bias", state.get("cls.predictions.decoder.bias"))
    if bias is None:
        return None
    out = {"bias": bias}
    for ours, hf in (("dense", "transform.dense"), ("ln", "transform.LayerNorm")):
        for p in ("weight", "bias"):
            out[f"{ours}.{p}"] = state[f"cls.predictions.{hf}.{p}"]
    return out


def hf_shapes(model: BertEncoder) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of a BERT checkpoint (prefix stripped) of `model`'s architecture, by its name."""
    mine, D, V = model.state_dict(), model.config.n_embd, model.config.vocab_size
    out = {hf: tuple(mine[ours].shape) for ours, hf in _EMBEDDING_NAMES}
    for i, (ours, hf), p in itertools.product(range(model.config.n_layer), _BLOCK_NAMES, ("weight", "bias")):
        out[f"encoder.layer.{i}.{hf}.{p}"] = tuple(mine[f"blocks.{i}.{ours}.{p}"].shape)
    for i, name in itertools.product(range(model.config.n_layer), ("query", "key", "value")):
        out |= {
            f"encoder.layer.{i}.attention.self.{name}.weight": (D, D),
            f"encoder.layer.{i}.attention.self.{name}.bias": (D,),
        }
    head = {"transform.dense.weight": (D, D), "transform.dense.bias": (D,), "bias": (V,), "decoder.bias": (V,)}
    head |= {"transform.LayerNorm.weight": (D,), "transform.LayerNorm.bias": (D,)}
    return out | {f"cls.predictions.{k}": v for k, v in head.items()}


def _encoder_state(state: dict[str, torch.Tensor], model: BertEncoder, where: str) -> dict[str, torch.Tensor]:
    state = _strip_hf_names(state) | {_legacy_name(k): v for k, v in state.items() if k.startswith("cls.")}
    check_shapes(state, hf_shapes(model), where)  # before q, k and v are joined
    try:
        return hf_to_ours(state, model.config.n_layer)
    except KeyError as e:
        raise UserError(f"{where} is not a BERT checkpoint: no tensor {e.args[0]!r}") from None


def load_hf_bert(path: str | Path, *, backend: str = "sdpa") -> BertEncoder:
    """Build a `BertEncoder` from a Hugging Face BERT folder holding config.json and model.safetensors (eval mode)."""
    folder = Path(path)
    for name in ("config.json", "model.safetensors"):
        if not (folder / name).is_file():
            raise UserError(f"{folder} is not a Hugging Face BERT folder: {name} is missing")
    hf = folder_json(folder / "config.json", MAX_CONFIG_BYTES)
    model = BertEncoder(config_from_hf(hf, backend=backend, where=str(folder / "config.json")))
    load_hf_weights(model, folder)
    return model.eval()


# ---- model.init_from: a pretrained BERT starts a run ---------------------------------------------------------------
def pretrained_bert(where: str, backend: str = "sdpa") -> tuple[Path, BertConfig]:
    """`model.init_from` naming a Hugging Face BERT (a folder, the offline MiniLM or a hub id) -> (its local folder,
    its architecture), checked before anything is written; one UserError line naming the key otherwise."""
    folder = pretrained_folder(where)
    hf = hf_config(folder)  # its errors name model.init_from already
    try:
        config = config_from_hf(hf, backend=backend)
    except UserError as e:
        raise UserError(f"model.init_from={where!r}: {e}") from None
    if not any(folder.glob("*.safetensors")):
        raise UserError(f"model.init_from={where!r}: {folder} holds no *.safetensors weights")
    return folder, config


def load_hf_weights(model: BertEncoder | BertForMaskedLM, folder: Path) -> str:
    """Copy the weights of the Hugging Face BERT in `folder` into `model` (built with its architecture), and a
    masked-LM model's head too when the checkpoint has one (BertForMaskedLM) -> what was loaded, in words."""
    state = hf_weights(folder)
    encoder = model.bert if isinstance(model, BertForMaskedLM) else model
    try:
        encoder.load_state_dict(_encoder_state(state, encoder, str(folder)))
    except RuntimeError as e:  # a tensor's shape differs from what config.json says
        detail = str(e).strip().splitlines()[-1].strip()[:200]
        raise UserError(f"{folder}: the weights do not match its config.json: {detail}") from None
    if encoder is model:
        return "the encoder"
    head = hf_head_to_ours(state)
    if head is None:
        return "the encoder; the checkpoint has no masked-LM head, so the head starts from a random init"
    missing, unexpected = model.load_state_dict(head, strict=False)
    assert not unexpected and all(k.startswith("bert.") for k in missing), (missing, unexpected)
    return "the encoder and the masked-LM head"
