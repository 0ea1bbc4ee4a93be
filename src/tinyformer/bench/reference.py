"""A plain reference GPT for the training benchmark: what a first from-scratch
implementation typically looks like, kept deliberately unoptimised.

Same architecture and parameter count as MiniGPT's seed recipe, but attention is
written out over the full block (scores for every key, the future masked with
-inf afterwards), dropout is applied to the attention weights, and the optimizer
is AdamW's per-parameter loop (no fused or foreach kernel).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RefAttention(nn.Module):
    def __init__(self, d: int, h: int, block: int, p: float) -> None:
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.attn_drop, self.resid_drop = nn.Dropout(p), nn.Dropout(p)
        self.register_buffer("tril", torch.tril(torch.ones(block, block)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in self.qkv(x).split(D, 2))
        att = (q @ k.transpose(-2, -1)) * (D // self.h) ** -0.5  # (B, H, T, T), all of it
        att = att.masked_fill(self.tril[:T, :T] == 0, float("-inf")).softmax(-1)
        y = self.attn_drop(att) @ v  # (B, H, T, Dh)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, T, D)))


class RefBlock(nn.Module):
    def __init__(self, d: int, h: int, block: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = RefAttention(d, h, block, p)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(p))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class RefGPT(nn.Module):
    def __init__(self, vocab: int, block: int = 128, d: int = 128, h: int = 4, layers: int = 4, p: float = 0.1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.drop = nn.Dropout(p)
        self.blocks = nn.Sequential(*[RefBlock(d, h, block, p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = idx.size(1)
        x = self.drop(self.tok(idx) + self.pos(torch.arange(T, device=idx.device)))
        logits = self.head(self.ln_f(self.blocks(x)))  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def reference_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, foreach=False, fused=False)
