"""Position-wise feed-forward network: Linear -> GELU -> Linear -> Dropout (Vaswani et al., 2017;
GELU from Hendrycks & Gimpel, 2016)."""

from __future__ import annotations

import torch
from torch import nn


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.proj = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))  # (B, T, D)
