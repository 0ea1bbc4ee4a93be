"""Transformer blocks: where the LayerNorm sits around the two residual sub-layers.

Pre-LayerNorm (Xiong et al., 2020; GPT-2): the residual stream is never
normalised, each sub-layer reads a normalised copy of it:

    x = x + Dropout(Attention(LayerNorm(x)))
    x = x + FeedForward(LayerNorm(x))

Post-LayerNorm (Vaswani et al., 2017; BERT, Devlin et al., 2019): the sum of
the residual and the sub-layer is normalised, so the stream itself is:

    x = LayerNorm(x + Dropout(Attention(x)))
    x = LayerNorm(x + FeedForward(x))

Both blocks have the same parts under the same names (ln1, attn, drop, ln2, mlp)
and the same forward signature; only the order differs.
"""

from __future__ import annotations

import torch
from torch import nn

from tinyformer.attention.multihead import MultiHeadAttention
from tinyformer.layers.feedforward import FeedForward


class PreNormBlock(nn.Module):
    """A self-attention block; `causal=True` in forward makes it a decoder block."""

    def __init__(
        self,
        d_model: int,
        n_head: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        qkv_bias: bool = True,
        backend: str = "sdpa",
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_head, qkv_bias=qkv_bias, dropout=attn_dropout, backend=backend)
        self.drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, d_ff, dropout)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D) -> (x (B, T, D), attention weights (B, H, T, T) or None)."""
        a, weights = self.attn(self.ln1(x), mask=mask, causal=causal, need_weights=need_weights)
        x = x + self.drop(a)
        x = x + self.mlp(self.ln2(x))
        return x, weights


class PostNormBlock(nn.Module):
    """The original (BERT) block: LayerNorm after each residual sum; `layer_norm_eps` is 1e-12 in BERT."""

    def __init__(
        self,
        d_model: int,
        n_head: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        qkv_bias: bool = True,
        backend: str = "sdpa",
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_head, qkv_bias=qkv_bias, dropout=attn_dropout, backend=backend)
        self.drop = nn.Dropout(dropout)
        self.ln1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.mlp = FeedForward(d_model, d_ff, dropout)
        self.ln2 = nn.LayerNorm(d_model, eps=layer_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D) -> (x (B, T, D), attention weights (B, H, T, T) or None)."""
        a, weights = self.attn(x, mask=mask, causal=causal, need_weights=need_weights)
        x = self.ln1(x + self.drop(a))
        x = self.ln2(x + self.mlp(x))
        return x, weights
