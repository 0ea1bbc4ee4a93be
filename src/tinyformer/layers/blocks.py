"""Transformer blocks. Pre-LayerNorm (Xiong et al., 2020): the residual stream is
never normalised, each sub-layer reads a normalised copy of it:

    x = x + Dropout(Attention(LayerNorm(x)))
    x = x + FeedForward(LayerNorm(x))
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
