"""`BlockSpec`: what a Transformer block and its attention read, declared once.

Every model config (`GPTConfig`, `BertConfig`, `Seq2SeqConfig`) hands its blocks one `BlockSpec`, made by
`BlockSpec.of(config)`: each field below takes the config's value of the same name where the config has one,
and the default here where it does not (BERT has no `qk_norm`, so its blocks get none). The blocks
(`tinyformer.layers.blocks`), the attention (`tinyformer.attention.multihead`), the feed-forward and the norms
(`tinyformer.layers`) read the fields they use from it, as nanoGPT's and litgpt's layers read their config.

A new switch is therefore: a field here with the value that changes nothing, the same name in the config
that offers it (validated and documented there), and the line that reads it where it acts.

The defaults are the blocks' own (the original Transformer's choices: biases everywhere, LayerNorm with
eps 1e-5, GELU feed-forward, softmax multi-head attention, Pre-LayerNorm as GPT-2 and the course's labs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

NORMS = ("layernorm", "rmsnorm")  # model.norm


@dataclass(frozen=True)
class BlockSpec:
    n_embd: int  # model width D
    n_head: int  # query heads
    d_ff: int = 0  # feed-forward width (0: 4 D)
    n_kv_head: int = 0  # key/value heads (0: n_head; 1: multi-query; between: grouped-query)
    dropout: float = 0.0  # on each residual branch
    attn_dropout: float = 0.0  # on the attention weights
    qkv_bias: bool = True  # bias on the query/key/value projection
    bias: bool = True  # on the attention's output, a GELU/ReLU feed-forward (SwiGLU has none), LayerNorms
    backend: str = "sdpa"  # softmax attention's backend ("auto", "sdpa", "manual")
    attention: str = "softmax"  # "softmax" or "linear"
    qk_norm: bool = False  # RMS-normalise each head's queries and keys
    ffn: str = "gelu"  # the feed-forward's kind (`tinyformer.layers.feedforward.FFN_KINDS`)
    norm: str = "layernorm"  # "layernorm" or "rmsnorm" (no mean subtracted, no bias: Zhang & Sennrich, 2019)
    norm_first: bool = True  # Pre-LayerNorm (GPT-2) or Post-LayerNorm (the 2017 paper, BERT)
    norm_eps: float = 1e-5  # every norm's epsilon

    @classmethod
    def of(cls, config: Any, **overrides: Any) -> BlockSpec:
        """The spec a model config describes: each field from the config's attribute of that name, if it has
        one (a field or a property), else the default above; `overrides` last."""
        return cls(**(picked(cls, config) | overrides))

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def width(self) -> int:
        """The feed-forward's hidden width (d_ff, or 4 D when it is 0)."""
        return self.d_ff or 4 * self.n_embd


def picked(cls: type, source: Any) -> dict[str, Any]:
    """{name: source.name} for every field of dataclass `cls` that `source` has: how one config is read as
    another (a spec from a model config, BERT's config from a classifier's) without retyping its fields."""
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(cls) if hasattr(source, f.name)}
