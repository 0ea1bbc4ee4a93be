"""MiniGPT <-> Hugging Face GPT-2 (Radford et al., 2019): one table of names, read both ways.

MiniGPT with learned positions *is* GPT-2's architecture: Pre-LayerNorm blocks, one fused QKV projection,
a GELU MLP, a final LayerNorm. In GPT-2's configuration (`config_from_gpt2`) it also has a QKV bias, the
tanh GELU (`gelu_new`) and a head tied to the token embedding. The rest is bookkeeping:

- GPT-2 stores its linear layers as `Conv1D` with (in, out) weights; nn.Linear's are (out, in): transposed.
- Its checkpoints name tensors `transformer.h.{i}.attn.c_attn.weight` (or, for the hub's original `gpt2`,
  without the `transformer.` prefix), and may carry the causal mask as a buffer (`attn.bias`), not a weight.
- A tied checkpoint may omit `lm_head.weight`; an untied MiniGPT exports it.

`import_gpt2` loads a checkpoint's tensors into a MiniGPT; `gpt2_state_dict` and `gpt2_config` write one.
Both read `_NAMES`, so a name can only be wrong in both directions, which the round-trip test catches.
"""

from __future__ import annotations

import torch
from torch import nn

from tinyformer.errors import UserError
from tinyformer.models.hf_config import check_config, check_shapes, copied, model_type

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}  # theirs -> our ffn
BUFFERS = (".attn.bias", ".attn.masked_bias")  # the causal mask some checkpoints store: not weights


def _names(n_layer: int) -> list[tuple[str, str, bool]]:
    """(our name, GPT-2's name, transposed) for every tensor but the head."""
    out = [
        ("tok_emb.weight", "transformer.wte.weight", False),
        ("pos_emb.weight", "transformer.wpe.weight", False),
        ("ln_f.weight", "transformer.ln_f.weight", False),
        ("ln_f.bias", "transformer.ln_f.bias", False),
    ]
    parts = [  # (ours, theirs, Conv1D weight)
        ("ln1", "ln_1", False),
        ("attn.qkv", "attn.c_attn", True),
        ("attn.proj", "attn.c_proj", True),
        ("ln2", "ln_2", False),
        ("mlp.fc", "mlp.c_fc", True),
        ("mlp.proj", "mlp.c_proj", True),
    ]
    for i in range(n_layer):
        for ours, theirs, conv in parts:
            out.append((f"blocks.{i}.{ours}.weight", f"transformer.h.{i}.{theirs}.weight", conv))
            out.append((f"blocks.{i}.{ours}.bias", f"transformer.h.{i}.{theirs}.bias", False))
    return out


def config_from_gpt2(hf: dict, where: str = "config.json") -> dict:
    """A GPT-2 config.json (as a dict; `where` names it) -> the GPTConfig fields of its architecture, every key
    checked first (`tinyformer.models.hf_config`); UserError for what MiniGPT cannot reproduce, naming the key."""
    if model_type(hf, where) != "gpt2":
        raise UserError(f"model_type={model_type(hf)!r} in config.json is not GPT-2; expected 'gpt2'")
    hf = check_config(hf, where)
    act = hf["activation_function"]
    if act not in ACTIVATIONS:
        raise UserError(f"activation_function={act!r} is not supported; only {', '.join(ACTIVATIONS)}")
    D = hf["n_embd"]
    inner = hf["n_inner"] or 4 * D
    for key, ok in (
        ("scale_attn_weights", hf["scale_attn_weights"]),
        ("scale_attn_by_inverse_layer_idx", not hf["scale_attn_by_inverse_layer_idx"]),
    ):
        if not ok:
            raise UserError(f"{key}={hf[key]!r} in config.json is a GPT-2 variant MiniGPT does not build")
    return copied(hf) | dict(mlp_ratio=inner / D, qkv_bias=True, positions="learned", causal=True, ffn=ACTIVATIONS[act])


def import_gpt2(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a GPT-2 checkpoint's tensors (GPT2LMHeadModel or GPT2Model names) into `model`, a MiniGPT built
    from `config_from_gpt2`; UserError naming the first tensor that is missing, extra or of the wrong shape."""
    theirs = {(k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k): v for k, v in state.items()}
    theirs = {k: v for k, v in theirs.items() if not k.endswith(BUFFERS)}
    mine = model.state_dict()
    names = _names(model.config.n_layer)
    expected = {name: mine[ours].shape[::-1] if conv else mine[ours].shape for ours, name, conv in names}
    expected["lm_head.weight"] = mine["head.weight"].shape
    check_shapes(theirs, expected, getattr(state, "where", "the checkpoint"))  # before any is transposed or copied
    ours = {}
    for mine_name, name, conv in names:
        if name not in theirs:
            raise UserError(f"the checkpoint has no tensor {name!r}: it is not a GPT-2 of this config.json")
        ours[mine_name] = theirs.pop(name).T if conv else theirs.pop(name)
    load_named(model, ours, theirs)


def load_named(model: nn.Module, ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    """The last of an import, any format's: `ours`, the tensors already renamed, gets the head (the checkpoint's
    lm_head.weight, or the token embedding when tied); `theirs`, what is left of the checkpoint, must be empty;
    each shape must be the model's. UserError naming the first tensor that is not."""
    head = theirs.pop("lm_head.weight", None)
    if model.config.tie_weights:
        ours["head.weight"] = ours["tok_emb.weight"]
    elif head is None:
        raise UserError("tie_word_embeddings is false but the checkpoint has no lm_head.weight")
    else:
        ours["head.weight"] = head
    if theirs:
        raise UserError(f"the checkpoint has tensors MiniGPT does not know, e.g. {sorted(theirs)[0]!r}")
    expected = model.state_dict()
    for k, v in ours.items():
        if v.shape != expected[k].shape:
            raise UserError(f"tensor {k!r} has shape {tuple(v.shape)}, config.json says {tuple(expected[k].shape)}")
    model.load_state_dict(ours, strict=True)


def check_exportable(model: nn.Module) -> None:
    from tinyformer.models.gpt import MiniGPT

    if not isinstance(model, MiniGPT):
        raise UserError(f"export hf writes GPT-2, from a MiniGPT run; this run's model is a {type(model).__name__}")
    c = model.config
    if c.positions != "learned":
        raise UserError(
            f"model.positions={c.positions!r}: the GPT-2 format has only learned positions; "
            "export a run trained with positions=learned"
        )
    if not c.causal:
        raise UserError("model.causal=false: GPT-2 is always causal; this ablation model cannot be exported")
    if c.ffn not in ("gelu", "gelu_tanh"):
        raise UserError(f"model.ffn={c.ffn!r}: GPT-2's MLP is a GELU one; this model cannot be exported")
    if c.attention != "softmax" or c.kv_heads != c.n_head:
        raise UserError(
            f"model.attention={c.attention!r}, n_kv_head={c.n_kv_head}: GPT-2 has softmax multi-head attention; "
            "this model cannot be exported"
        )
    if c.norm != "layernorm" or not c.bias:
        raise UserError(
            f"model.norm={c.norm!r}, bias={c.bias}: GPT-2 has LayerNorms and biases; a model with RMSNorm, SwiGLU "
            "and rotary positions is written as Llama, this one cannot be exported"
        )
    if c.qk_norm or c.logit_softcap:
        raise UserError(
            f"model.qk_norm={c.qk_norm}, logit_softcap={c.logit_softcap}: GPT-2 normalises neither queries and keys "
            "nor caps its logits; this model cannot be exported"
        )


def gpt2_config(model: nn.Module, eos_token_id: int | None = None) -> dict:
    c = model.config
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": c.vocab_size,
        "n_positions": c.block_size,
        "n_embd": c.n_embd,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_inner": c.d_ff,
        "activation_function": "gelu_new" if c.ffn == "gelu_tanh" else "gelu",  # tanh or exact erf GELU
        "layer_norm_epsilon": model.ln_f.eps,
        "resid_pdrop": 0.0,  # an exported model is for inference; dropout would only add noise
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "tie_word_embeddings": c.tie_weights,
        "scale_attn_weights": True,
        "bos_token_id": eos_token_id,  # a character vocabulary has no special tokens: generation never stops early
        "eos_token_id": eos_token_id,
        "pad_token_id": None,
    }


def gpt2_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's names; Linear (out, in) -> Conv1D (in, out) by transposing."""
    mine = model.state_dict()
    D = model.config.n_embd
    sd = {} if model.config.tie_weights else {"lm_head.weight": mine["head.weight"]}  # tied: GPT-2 omits it too
    for ours, theirs, conv in _names(model.config.n_layer):
        value = mine.get(ours, torch.zeros(3 * D) if ours.endswith("qkv.bias") else None)  # ours may have no QKV bias
        sd[theirs] = value.T if conv else value
    return {k: v.detach().float().cpu().contiguous() for k, v in sd.items()}
