"""Transformer blocks: where the LayerNorm sits around the two residual sub-layers.

Pre-LayerNorm (Xiong et al., 2020; GPT-2): the residual stream is never
normalised, each sub-layer reads a normalised copy of it:

    x = x + Dropout(Attention(LayerNorm(x)))
    x = x + FeedForward(LayerNorm(x))

Post-LayerNorm (Vaswani et al., 2017; BERT, Devlin et al., 2019): the sum of
the residual and the sub-layer is normalised, so the stream itself is:

    x = LayerNorm(x + Dropout(Attention(x)))
    x = LayerNorm(x + FeedForward(x))

`TransformerBlock` does either (`norm_first`), with the same parts under the same
names (ln1, attn, drop, ln2, mlp); only the order differs. Every block takes one `BlockSpec`
(`tinyformer.attention.spec`): `n_kv_head` and `attention` ("softmax" | "linear") pick the attention variant
(see `tinyformer.attention.multihead`), `ffn="swiglu"` swaps the GELU feed-forward for SwiGLU (see
`tinyformer.layers.feedforward`), `norm="rmsnorm"` the LayerNorms for RMSNorm (the Llama family's).

`DecoderBlock` is the encoder-decoder's decoder layer (Vaswani et al., 2017):
masked self-attention, cross-attention over the encoder memory, feed-forward,
three residual sub-layers with either norm placement (`norm_first`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinyformer.attention.dropout import Dropout
from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.multihead import MultiHeadAttention
from tinyformer.attention.spec import NORMS, BlockSpec
from tinyformer.layers.feedforward import make_feedforward


def make_norm(spec: BlockSpec) -> nn.Module:
    """The norm `spec.norm` names, `spec.norm_eps` its epsilon: LayerNorm (with a bias unless `spec.bias` is
    False) or RMSNorm (x / sqrt(mean(x^2) + eps), times a gain; no mean subtracted, no bias)."""
    if spec.norm == "rmsnorm":
        return nn.RMSNorm(spec.n_embd, eps=spec.norm_eps)
    if spec.norm == "layernorm":
        return nn.LayerNorm(spec.n_embd, eps=spec.norm_eps, bias=spec.bias)
    raise ValueError(f"norm {spec.norm!r} is not one of {NORMS}")


class TransformerBlock(nn.Module):
    """Self-attention + feed-forward as `spec` describes (`tinyformer.attention.spec.BlockSpec`): Pre- or
    Post-LayerNorm (`norm_first`), LayerNorm or RMSNorm (`norm`), the attention variant and the feed-forward.

    `causal=True` in forward makes it a decoder-only (GPT) block; BERT's spec has `norm_first=False` and
    `norm_eps=1e-12`.
    """

    def __init__(self, spec: BlockSpec) -> None:
        super().__init__()
        self.norm_first = spec.norm_first
        self.ln1 = make_norm(spec)
        self.attn = MultiHeadAttention(spec)
        self.drop = Dropout(spec.dropout)
        self.ln2 = make_norm(spec)
        self.mlp = make_feedforward(spec)

    def forward(self, x: torch.Tensor, **attention: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D) -> (x (B, T, D), attention weights (B, H, T, S) or None). The keywords (mask, causal,
        need_weights, rope, cache, start) go to the self-attention as they are: see `MultiHeadAttention.forward`."""
        if self.norm_first:
            a, weights = self.attn(self.ln1(x), **attention)
            x = x + self.drop(a)
            return x + self.mlp(self.ln2(x)), weights
        a, weights = self.attn(x, **attention)
        x = self.ln1(x + self.drop(a))
        return self.ln2(x + self.mlp(x)), weights


class DecoderBlock(nn.Module):
    """Self-attention over the target, cross-attention over the encoder memory, then the feed-forward.

    Pre-norm (default):  x = x + Drop(SelfAttn(ln1(x)));  x = x + Drop(CrossAttn(ln2(x), memory));
                         x = x + FFN(ln3(x))
    Post-norm:           x = ln1(x + Drop(SelfAttn(x)));  x = ln2(x + Drop(CrossAttn(x, memory)));
                         x = ln3(x + FFN(x))

    The block applies no causal mask of its own: `self_mask` must carry it (causal AND target padding, as
    `Seq2SeqTransformer` builds it with `tinyformer.attention.masks`); `cross_mask` hides source padding.
    For token-by-token decoding, `cache` keeps the self-attention's keys/values (the new tokens sit at
    positions [start, start + T)) and `cross_kv` is the cross-attention's projection of `memory`, made once.
    """

    def __init__(self, spec: BlockSpec) -> None:
        super().__init__()
        self.norm_first = spec.norm_first
        self.ln1 = make_norm(spec)
        self.self_attn = MultiHeadAttention(spec)
        self.ln2 = make_norm(spec)
        self.cross_attn = MultiHeadAttention(spec, cross=True)
        self.ln3 = make_norm(spec)
        self.mlp = make_feedforward(spec)
        self.drop = Dropout(spec.dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        *,
        self_mask: torch.Tensor | None = None,
        cross_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
        cross_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
        start: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """x (B, T, D), memory (B, S, D) -> (x (B, T, D), self weights (B, H, T, T), cross weights (B, H, T, S)).

        The weights are None unless `need_weights`; with a cache, self weights are (B, H, T, start + T).
        """
        own = dict(mask=self_mask, need_weights=need_weights, cache=cache, start=start)
        cross = dict(mask=cross_mask, need_weights=need_weights, context_kv=cross_kv)
        if self.norm_first:
            a, self_w = self.self_attn(self.ln1(x), **own)
            x = x + self.drop(a)
            c, cross_w = self.cross_attn(self.ln2(x), memory, **cross)
            x = x + self.drop(c)
            x = x + self.mlp(self.ln3(x))
        else:
            a, self_w = self.self_attn(x, **own)
            x = self.ln1(x + self.drop(a))
            c, cross_w = self.cross_attn(x, memory, **cross)
            x = self.ln2(x + self.drop(c))
            x = self.ln3(x + self.mlp(x))
        return x, self_w, cross_w
