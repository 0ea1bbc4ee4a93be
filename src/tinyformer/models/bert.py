"""A BERT-style bidirectional encoder (Devlin et al., 2019) from tinyformer's own layers.

Token + learned position + segment embeddings, summed and LayerNorm-ed, then
`n_layer` Post-LayerNorm self-attention blocks with no causal mask. With
`positions="rope"` (RoFormer, Su et al., 2021) there is no position table:
queries and keys are rotated by their position instead, so attention scores see
relative offsets from the first step. Trained from scratch on a small corpus, the
learned table stays unused for thousands of steps (the model predicts from a bag
of words); with RoPE the masked-LM loss falls from the start. There is no
pooler: `BertEncoder` returns one vector per token (`EncoderOutput`), and heads
wrap it. `BertForMaskedLM` is the pretraining model: the encoder plus BERT's
masked-LM head (dense, GELU, LayerNorm, then a decoder to the vocabulary whose
weight is the input embedding itself, tied, with its own bias). Given labels, it
runs the head on the chosen positions only, as the original BERT code does
(`gather_indexes`): the loss needs ~15% of the rows, and the V-wide decoder and
its softmax are the costliest part of a small model's step.

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

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention import masks
from tinyformer.attention.multihead import BACKENDS
from tinyformer.attention.positions import Rotary
from tinyformer.config import check_fields
from tinyformer.data.tokenizers import IGNORE
from tinyformer.errors import UserError
from tinyformer.hub import hf_config, hf_weights, pretrained_folder
from tinyformer.layers.blocks import TransformerBlock
from tinyformer.layers.dropout import Dropout
from tinyformer.layers.init import normal_init
from tinyformer.models.outputs import AttentionPart, EncoderOutput, ModelOutput

BERT_POSITIONS = ("learned", "rope")


@dataclass
class BertConfig:
    vocab_size: int = 30522  # tokens in the WordPiece vocabulary; 0 = take it from the tokenizer
    block_size: int = 512  # longest input (rows of the learned position table)
    type_vocab_size: int = 2  # segments (sentence A / sentence B)
    n_layer: int = 12  # Transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # model width D
    d_ff: int = 3072  # feed-forward width
    dropout: float = 0.1  # on embeddings and on each residual branch
    attn_dropout: float = 0.1  # on attention weights
    layer_norm_eps: float = 1e-12  # epsilon of every LayerNorm (BERT uses 1e-12)
    backend: str = "sdpa"  # attention backend: "sdpa" or "manual"
    positions: str = "learned"  # "learned" (BERT's table) or "rope" (rotary, RoFormer)

    def __post_init__(self) -> None:
        if self.vocab_size < 0:
            raise UserError(f"model.vocab_size={self.vocab_size} must be >= 0")
        check_fields(
            self,
            "model",
            positive=(
                "block_size",
                "type_vocab_size",
                "n_layer",
                "n_head",
                "n_embd",
                "d_ff",
                "layer_norm_eps",
            ),
            fractions=("dropout", "attn_dropout"),
            choices={"backend": BACKENDS, "positions": BERT_POSITIONS},
            divisible=("n_embd", "n_head"),
        )
        if self.positions == "rope" and (self.n_embd // self.n_head) % 2:
            raise UserError(
                f"model.positions=rope needs an even head width; n_embd/n_head = {self.n_embd // self.n_head}"
            )


class BertEncoder(nn.Module):
    attention_names = ("self",)  # what `attention_parts` returns, for the views

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        if config.vocab_size <= 0:
            raise ValueError("BertConfig.vocab_size must be set (> 0) before building the model")
        c = self.config = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        if c.positions == "learned":
            self.pos_emb = nn.Embedding(c.block_size, c.n_embd)
        self.rope = Rotary(c.n_embd // c.n_head) if c.positions == "rope" else None
        self.seg_emb = nn.Embedding(c.type_vocab_size, c.n_embd)
        self.ln_emb = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)
        self.drop = Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                c.n_embd,
                c.n_head,
                c.d_ff,
                dropout=c.dropout,
                attn_dropout=c.attn_dropout,
                backend=c.backend,
                norm_first=False,  # BERT is Post-LayerNorm
                layer_norm_eps=c.layer_norm_eps,
            )
            for _ in range(c.n_layer)
        )
        self.apply(normal_init)  # GPT-2 / BERT: N(0, 0.02) weights, zero biases

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, T), token_type_ids (B, T) or None (= all segment 0) -> (B, T, D)."""
        B, T = input_ids.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.config.block_size}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # (B, T)
        x = self.tok_emb(input_ids) + self.seg_emb(token_type_ids)  # (B, T, D)
        if self.rope is None:
            x = x + self.pos_emb(torch.arange(T, device=input_ids.device))  # (B, T, D) + (T, D)
        return self.drop(self.ln_emb(x))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> EncoderOutput:
        """input_ids (B, T); attention_mask (B, T) Hugging Face style, 1 = real token, 0 = padding.

        Padding keys get attention weight 0, so a sentence's outputs do not depend
        on how much padding follows it. Outputs at padding positions are meaningless.
        """
        mask = None if attention_mask is None else masks.from_hf_attention_mask(attention_mask)  # (B, 1, 1, T)
        x = self.embed(input_ids, token_type_ids)  # (B, T, D)
        attentions = []
        for block in self.blocks:
            x, w = block(x, mask=mask, need_weights=need_weights, rope=self.rope)
            attentions.append(w)
        return EncoderOutput(x, attentions if need_weights else None)

    def attention_parts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[AttentionPart]:
        """input_ids, attention_mask (B, T) -> the bidirectional self-attention of every block, for the views."""
        if input_ids.size(1) > self.config.block_size:
            raise UserError(
                f"the text has {input_ids.size(1)} tokens, more than the model's maximum {self.config.block_size}"
            )
        out = self(input_ids, attention_mask, need_weights=True)
        return [AttentionPart("self", "self", out.attentions, input_ids, input_ids)]


@dataclass
class MaskedLMOutput:
    """What `BertForMaskedLM` returns given labels: the N chosen positions only (labels != IGNORE), row-major."""

    loss: torch.Tensor  # mean cross-entropy over the N chosen positions (0 when N = 0)
    chosen_logits: torch.Tensor  # (N, V)
    chosen_labels: torch.Tensor  # (N,)
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, T) when asked for


class BertForMaskedLM(nn.Module):
    """`BertEncoder` + the masked-LM head; the loss counts only positions whose label is not `IGNORE`."""

    attention_names = ("self",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertEncoder(config)
        self.dense = nn.Linear(config.n_embd, config.n_embd)
        self.ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # the decoder's bias; its weight is tok_emb's
        normal_init(self.dense)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> ModelOutput | MaskedLMOutput:
        """input_ids (B, T); attention_mask (B, T) 1 = real, 0 = padding; labels (B, T), IGNORE where unchosen.

        Without labels: logits (B, T, V) at every position. With labels: a `MaskedLMOutput`, the loss and the
        logits of the chosen positions only.
        """
        enc = self.bert(input_ids, attention_mask, need_weights=need_weights)
        if labels is None:
            return ModelOutput(self.head(enc.last_hidden_state), None, enc.attentions)  # (B, T, V)
        chosen = labels != IGNORE  # (B, T)
        logits = self.head(enc.last_hidden_state[chosen])  # (N, D) -> (N, V)
        target = labels[chosen]  # (N,)
        loss = F.cross_entropy(logits, target, reduction="sum") / chosen.sum().clamp(min=1)  # nothing chosen: 0
        return MaskedLMOutput(loss, logits, target, enc.attentions)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) -> logits (..., V): dense, GELU, LayerNorm, decoder tied to the input embedding."""
        h = self.ln(F.gelu(self.dense(hidden)))  # (..., D)
        return F.linear(h, self.bert.tok_emb.weight, self.bias)  # (..., V)

    def attention_parts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[AttentionPart]:
        return self.bert.attention_parts(input_ids, attention_mask)


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


_HF_DEFAULTS = dict(  # what transformers' BertConfig assumes for a key a config.json leaves out
    vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, num_hidden_layers=12, num_attention_heads=12,
    hidden_size=768, intermediate_size=3072, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    layer_norm_eps=1e-12,
)  # fmt: skip


def config_from_hf(hf: dict, *, backend: str = "sdpa") -> BertConfig:
    """A Hugging Face BERT config.json (as a dict) -> BertConfig; UserError for what we cannot reproduce."""
    if hf.get("model_type") != "bert":
        raise UserError(f"model_type={hf.get('model_type')!r} in config.json is not a BERT; expected 'bert'")
    if hf.get("hidden_act", "gelu") != "gelu":
        raise UserError(f"hidden_act={hf['hidden_act']!r} is not supported; only 'gelu' (exact GELU)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"position_embedding_type={hf['position_embedding_type']!r} is not supported; only 'absolute'")
    h = _HF_DEFAULTS | {k: hf[k] for k in _HF_DEFAULTS if k in hf}
    return BertConfig(
        vocab_size=h["vocab_size"],
        block_size=h["max_position_embeddings"],
        type_vocab_size=h["type_vocab_size"],
        n_layer=h["num_hidden_layers"],
        n_head=h["num_attention_heads"],
        n_embd=h["hidden_size"],
        d_ff=h["intermediate_size"],
        dropout=h["hidden_dropout_prob"],
        attn_dropout=h["attention_probs_dropout_prob"],
        layer_norm_eps=h["layer_norm_eps"],
        backend=backend,
        positions="learned",
    )


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


def _encoder_state(state: dict[str, torch.Tensor], n_layer: int, where: str) -> dict[str, torch.Tensor]:
    try:
        return hf_to_ours(_strip_hf_names(state), n_layer)
    except KeyError as e:
        raise UserError(f"{where} is not a BERT checkpoint: no tensor {e.args[0]!r}") from None


def load_hf_bert(path: str | Path, *, backend: str = "sdpa") -> BertEncoder:
    """Build a `BertEncoder` from a Hugging Face BERT folder holding config.json and model.safetensors (eval mode)."""
    folder = Path(path)
    for name in ("config.json", "model.safetensors"):
        if not (folder / name).is_file():
            raise UserError(f"{folder} is not a Hugging Face BERT folder: {name} is missing")
    model = BertEncoder(
        config_from_hf(json.loads((folder / "config.json").read_text(encoding="utf-8")), backend=backend)
    )
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
        encoder.load_state_dict(_encoder_state(state, encoder.config.n_layer, str(folder)))
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
