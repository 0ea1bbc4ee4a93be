"""MiniGPT <-> Hugging Face Llama and Qwen2 (Touvron et al., 2023; Qwen2, 2024): one table of names, both ways.

A Llama is a MiniGPT with other switches, not another network (the `gpt_llama` preset): Pre-norm blocks with
RMSNorm (`norm="rmsnorm"`, its eps `norm_eps`), no biases (`bias=False`, `qkv_bias=False`), rotary positions
(`positions="rope"`, `rope_base` its rope_theta, the same "rotate half" layout), a SwiGLU feed-forward and
grouped-query attention (`n_kv_head`), an untied head. Qwen2 is the same with a bias on the query, key and
value projections (`qkv_bias=True`). The rest is bookkeeping:

- Their attention has three projections, q_proj, k_proj and v_proj; ours is one `qkv` whose rows are the
  queries, then the keys, then the values (`MultiHeadAttention.project` splits it so): concatenated on the
  way in, split on the way out.
- gate_proj, up_proj and down_proj are SwiGLU's `gate`, `up` and `proj`: W2(SiLU(W1 x) * W3 x).
- Older checkpoints may carry each layer's rotary frequencies as a buffer (`rotary_emb.inv_freq`): not weights.
- transformers 5 keeps rope_theta in `rope_parameters`; 4.x at the top level. Both are read, both written.

`import_llama` loads a checkpoint's tensors into a MiniGPT built from `config_from_llama`; `llama_config` and
`llama_state_dict` write one. Both directions read `_names`, so a wrong name breaks the round trip's test.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from tinyformer.errors import UserError
from tinyformer.models.gpt2 import load_named
from tinyformer.models.hf_config import check_config, check_shapes, copied, model_type

FAMILIES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}  # model_type -> architecture
BUFFERS = (".rotary_emb.inv_freq",)


def _names(n_layer: int) -> list[tuple[str, str]]:
    """(our name, theirs) for every tensor but the attention's q/k/v and the head."""
    out = [("tok_emb.weight", "model.embed_tokens.weight"), ("ln_f.weight", "model.norm.weight")]
    parts = [
        ("ln1", "input_layernorm"),
        ("attn.proj", "self_attn.o_proj"),
        ("ln2", "post_attention_layernorm"),
        ("mlp.gate", "mlp.gate_proj"),
        ("mlp.up", "mlp.up_proj"),
        ("mlp.proj", "mlp.down_proj"),
    ]
    for i in range(n_layer):
        out += [(f"blocks.{i}.{ours}.weight", f"model.layers.{i}.{theirs}.weight") for ours, theirs in parts]
    return out


def rope_theta(hf: dict) -> float:
    """rope_theta from checked config.json values (`check_config`) of transformers 5 (`rope_parameters`) or 4.x
    (top level); UserError for a scaled RoPE (Llama 3.1's "llama3", YaRN, ...), which MiniGPT does not build."""
    where = "rope_scaling" if hf["rope_scaling"] else "rope_parameters"
    kind = hf[f"{where}.rope_type"] or hf.get(f"{where}.type") or "default"
    if kind != "default":
        raise UserError(f"rope type {kind!r} in config.json: MiniGPT builds the plain rotary embedding only")
    return hf["rope_parameters.rope_theta"] or hf["rope_theta"]


def config_from_llama(hf: dict, where: str = "config.json") -> dict:
    """A Llama or Qwen2 config.json (as a dict; `where` names it) -> the GPTConfig fields of its architecture,
    every key checked first (`tinyformer.models.hf_config`); UserError for what MiniGPT cannot reproduce, naming
    the key."""
    kind = model_type(hf, where)
    if kind not in FAMILIES:
        raise UserError(f"model_type={kind!r} in config.json is not one of {', '.join(FAMILIES)}")
    hf = check_config(hf, where)
    D, H = hf["hidden_size"], hf["num_attention_heads"]
    for key, ok in (
        ("hidden_act", hf["hidden_act"] == "silu"),
        ("head_dim", hf["head_dim"] in (None, D // H)),
        ("attention_bias", not hf.get("attention_bias", False)),  # Llama's puts a bias on o_proj too
        ("mlp_bias", not hf.get("mlp_bias", False)),
        ("use_sliding_window", not hf.get("use_sliding_window", False)),
    ):
        if not ok:
            raise UserError(f"{key}={hf.get(key)!r} in config.json is a {kind} variant MiniGPT does not build")
    return copied(hf) | dict(
        n_kv_head=hf["num_key_value_heads"] or H,
        mlp_ratio=hf["intermediate_size"] / D,
        norm="rmsnorm",
        bias=False,
        qkv_bias=kind == "qwen2",  # Qwen2: q, k and v projections with a bias, o_proj without
        positions="rope",
        rope_base=rope_theta(hf),
        ffn="swiglu",
        causal=True,
    )


def is_llama(c) -> bool:
    """Whether a GPTConfig describes a Llama-family model (what `export hf` writes as Llama or Qwen2)."""
    return c.norm == "rmsnorm" and c.ffn == "swiglu" and c.positions == "rope"


def import_llama(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a Llama / Qwen2 checkpoint's tensors (…ForCausalLM names, or the bare model's without `model.`)
    into `model`, a MiniGPT built from `config_from_llama`; UserError naming the first tensor that is missing,
    extra or of the wrong shape (each of q, k and v before they are joined)."""
    c = model.config
    theirs = {(k if k.startswith(("model.", "lm_head.")) else "model." + k): v for k, v in state.items()}
    theirs = {k: v for k, v in theirs.items() if not k.endswith(BUFFERS)}
    check_shapes(theirs, _shapes(model), getattr(state, "where", "the checkpoint"))

    def take(name: str) -> torch.Tensor:
        if name not in theirs:
            raise UserError(f"the checkpoint has no tensor {name!r}: it is not a model of this config.json")
        return theirs.pop(name)

    ours = {mine: take(name) for mine, name in _names(c.n_layer)}
    for i in range(c.n_layer):
        attn = f"model.layers.{i}.self_attn"
        ours[f"blocks.{i}.attn.qkv.weight"] = torch.cat([take(f"{attn}.{p}_proj.weight") for p in "qkv"])
        if c.qkv_bias:
            ours[f"blocks.{i}.attn.qkv.bias"] = torch.cat([take(f"{attn}.{p}_proj.bias") for p in "qkv"])
    load_named(model, ours, theirs)


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of a checkpoint of `model` (a MiniGPT of the Llama family), by its name."""
    c, mine = model.config, model.state_dict()
    D, Dkv = c.n_embd, c.kv_heads * (c.n_embd // c.n_head)
    out = {name: tuple(mine[ours].shape) for ours, name in _names(c.n_layer)} | {"lm_head.weight": (c.vocab_size, D)}
    for i, (p, rows) in itertools.product(range(c.n_layer), zip("qkv", (D, Dkv, Dkv), strict=True)):
        out[f"model.layers.{i}.self_attn.{p}_proj.weight"] = (rows, D)
        out[f"model.layers.{i}.self_attn.{p}_proj.bias"] = (rows,)
    return out


def check_exportable(c) -> None:
    """UserError unless a Llama-family GPTConfig is one that Llama or Qwen2 express exactly."""
    for key, ok in (
        ("bias", not c.bias),
        ("n_embd / n_head", c.n_embd % c.n_head == 0),
        ("attention", c.attention == "softmax"),
        ("causal", c.causal),
        ("qk_norm", not c.qk_norm),
        ("logit_softcap", not c.logit_softcap),
    ):
        if not ok:
            raise UserError(f"model.{key}={getattr(c, key, '?')!r}: Llama and Qwen2 have no such switch; not exported")


def llama_config(model: nn.Module, eos_token_id: int | None = None) -> dict:
    """The config.json of a Llama (no q/k/v bias) or a Qwen2 (with one) that is `model`."""
    c = model.config
    check_exportable(c)
    kind = "qwen2" if c.qkv_bias else "llama"
    out = {
        "model_type": kind,
        "architectures": [FAMILIES[kind]],
        "vocab_size": c.vocab_size,
        "hidden_size": c.n_embd,
        "intermediate_size": c.d_ff,
        "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head,
        "num_key_value_heads": c.kv_heads,
        "head_dim": c.n_embd // c.n_head,
        "hidden_act": "silu",
        "max_position_embeddings": c.block_size,
        "rms_norm_eps": c.norm_eps,
        "rope_theta": c.rope_base,  # transformers 4.x reads this ...
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_base},  # ... 5 this
        "attention_dropout": 0.0,
        "tie_word_embeddings": c.tie_weights,
        "bos_token_id": eos_token_id,  # a character vocabulary has no special tokens: generation never stops
        "eos_token_id": eos_token_id,
        "pad_token_id": None,
        "torch_dtype": "float32",
    }
    return out | ({"use_sliding_window": False} if kind == "qwen2" else {"attention_bias": False, "mlp_bias": False})


def llama_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our weights under Llama's (or Qwen2's) names: the fused qkv split into q_proj, k_proj and v_proj."""
    c, mine = model.config, model.state_dict()
    sd = {theirs: mine[ours] for ours, theirs in _names(c.n_layer)}
    D, Dkv = c.n_embd, c.kv_heads * (c.n_embd // c.n_head)
    for i in range(c.n_layer):
        for kind in ("weight", "bias") if c.qkv_bias else ("weight",):
            q, k, v = mine[f"blocks.{i}.attn.qkv.{kind}"].split([D, Dkv, Dkv])
            for p, t in zip("qkv", (q, k, v), strict=True):
                sd[f"model.layers.{i}.self_attn.{p}_proj.{kind}"] = t
    if not c.tie_weights:
        sd["lm_head.weight"] = mine["head.weight"]
    return {k: v.detach().float().cpu().contiguous() for k, v in sd.items()}
