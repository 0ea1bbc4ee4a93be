"""Position-wise feed-forward networks: the two-layer MLP (ReLU or GELU) and the gated SwiGLU variant.

- `FeedForward`: Linear -> activation -> Linear -> Dropout (Vaswani et al., 2017). "relu" is the paper's
  max(0, x); "gelu" is the exact GELU, x·Φ(x) (Hendrycks & Gimpel, 2016), as in BERT; "gelu_tanh" is the
  tanh approximation that GPT-2 was trained with (`gelu_new` in Hugging Face configs). The two GELUs differ
  by up to ~1e-3: a checkpoint needs the one it learned. "relu2" is ReLU squared, relu(x)^2 (So et al., 2021,
  Primer; the GPT-2 speedrun's MLP). All four have the same parameters.
- `SwiGLU`: W2(SiLU(W1 x) * W3 x) -> Dropout (Shazeer, 2020, "GLU Variants Improve Transformer"), without
  biases as in the paper. It has three weight matrices, so at equal `d_ff` it holds 1.5x the parameters.

`make_feedforward(spec)` picks one by the spec's `ffn` ("gelu" | "gelu_tanh" | "relu" | "relu2" | "swiglu"); a
spec with `bias=False` (the Llama family) gives the two-layer MLP no biases either.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention.dropout import Dropout
from tinyformer.attention.spec import BlockSpec

FFN_KINDS = ("gelu", "gelu_tanh", "relu", "relu2", "swiglu")
ACTIVATIONS = {  # FeedForward's `act`: a name -> its module
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu": nn.ReLU,
    "relu2": lambda: ReLUSquared(),
}


class ReLUSquared(nn.Module):
    """relu(x)^2: zero for x <= 0, then a parabola, so its gradient 2x grows from 0 instead of jumping to 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()


class FeedForward(nn.Module):
    """Dropout(proj(act(fc(x)))), `act` one of ACTIVATIONS: "gelu" (exact), "gelu_tanh", "relu" or "relu2"."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, act: str = "gelu", bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff, bias=bias)
        self.act = ACTIVATIONS[act]()
        self.proj = nn.Linear(d_ff, d_model, bias=bias)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))  # (B, T, D)


class SwiGLU(nn.Module):
    """W2(SiLU(W1 x) * W3 x): `gate` is W1, `up` is W3, `proj` is W2 (the name FeedForward uses too)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.proj = nn.Linear(d_ff, d_model, bias=False)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.gate(x)) * self.up(x)  # (B, T, d_ff)
        return self.drop(self.proj(h))  # (B, T, D)


def make_feedforward(spec: BlockSpec) -> nn.Module:
    """The feed-forward `spec.ffn` names ("gelu" / "gelu_tanh" / "relu" / "relu2" -> FeedForward, "swiglu" ->
    SwiGLU), `spec.width` wide; ValueError naming it otherwise."""
    if spec.ffn in ACTIVATIONS:
        return FeedForward(spec.n_embd, spec.width, spec.dropout, act=spec.ffn, bias=spec.bias)
    if spec.ffn == "swiglu":
        return SwiGLU(spec.n_embd, spec.width, spec.dropout)
    raise ValueError(f"feed-forward kind {spec.ffn!r} is not one of {FFN_KINDS}")
