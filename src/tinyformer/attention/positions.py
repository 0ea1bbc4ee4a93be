"""How a Transformer knows where a token is.

- "learned"     a trained vector per position, added to the token embedding (GPT-2). Cannot go past the
                positions it was trained on.
- "sinusoidal"  the fixed table of Vaswani et al. (2017), PE[p, 2i] = sin(p / 10000^(2i/D)),
                PE[p, 2i+1] = cos(...), added to the token embedding; defined for any position.
- "rope"        rotary position embedding (Su et al., 2021, RoFormer): queries and keys of every head are
                rotated by an angle proportional to their position, so the score q_m . k_n depends only on
                m - n. Nothing is added to the embeddings.
- "none"        no position signal at all; a causal decoder can still infer order from its mask.

NTK-aware RoPE scaling (bloc97, 2023; used by Code Llama and YaRN): to run a model at alpha times the
context it was trained on without retraining, raise the base to base * alpha^(Dh / (Dh - 2)). The fastest
rotating pairs (local order) keep their angles, the slowest ones are stretched to cover the longer context.
"""

from __future__ import annotations

import math

import torch
from torch import nn

POSITIONS = ("learned", "sinusoidal", "rope", "none")


def sinusoidal_table(length: int, d_model: int, start: int = 0) -> torch.Tensor:
    """(length, D) rows for positions start .. start+length-1; sin and cos interleaved along D."""
    pos = torch.arange(start, start + length, dtype=torch.float32)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))  # (D/2,)
    angles = pos * inv_freq  # (L, D/2)
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)  # (L, D/2, 2) -> (L, D)


def ntk_base(base: float, alpha: float, head_dim: int) -> float:
    """The RoPE base that stretches a model trained on context N to alpha * N (NTK-aware scaling)."""
    return base * alpha ** (head_dim / (head_dim - 2))


class Rotary(nn.Module):
    """Rotary position embedding for (B, H, T, Dh) queries or keys; Dh must be even.

    Pair i of a head is the two coordinates (i, i + Dh/2) ("rotate half" layout), turned by the angle
    position * base^(-2i/Dh). `alpha` > 1 switches on NTK-aware scaling for contexts alpha times the
    training one; alpha = 1 is the trained model. The angles are computed in float32 for the positions
    asked (Dh/2 x T numbers), so there is no table to outgrow; the last cos/sin pair is kept, because
    every layer, and the queries and the keys, ask for the same positions in one forward pass.
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head width, got Dh={head_dim}")
        self.head_dim, self.base, self.alpha = head_dim, base, 1.0
        self._last: tuple | None = None  # (key, cos, sin) of the last call: see `tables`

    def angles(self, start: int, length: int, device: torch.device) -> torch.Tensor:
        """(length, Dh/2) rotation angles for positions start .. start+length-1."""
        base = ntk_base(self.base, self.alpha, self.head_dim) if self.alpha > 1 else self.base
        i = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=device)  # (Dh/2,)
        inv_freq = base ** (-i / self.head_dim)  # (Dh/2,)
        pos = torch.arange(start, start + length, dtype=torch.float32, device=device)  # (T,)
        return pos[:, None] * inv_freq[None, :]  # (T, Dh/2)

    def tables(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> tuple:
        """(T, Dh) cos and signed sin for `forward`: [cos, cos] and [-sin, sin], in `dtype`. Reused while the
        positions, the scaling and the grad mode stay the same (a table made under inference_mode cannot
        enter a graph that trains)."""
        key = (start, length, device, dtype, self.base, self.alpha, torch.is_inference_mode_enabled())
        if self._last is None or self._last[0] != key:
            theta = self.angles(start, length, device)  # (T, Dh/2), float32
            cos, sin = theta.cos(), theta.sin()
            self._last = (key, torch.cat((cos, cos), -1).to(dtype), torch.cat((-sin, sin), -1).to(dtype))
        return self._last[1], self._last[2]

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x (B, H, T, Dh) whose first row sits at position `start` -> x rotated, same shape and dtype.

        With x1, x2 the two halves of each head: (x1 cos - x2 sin, x1 sin + x2 cos), written as
        x * [cos, cos] + [x2, x1] * [-sin, sin]: the same products and sums, so the same numbers in any
        precision, in 4 elementwise operations instead of 7."""
        cos, sin = self.tables(start, x.size(-2), x.device, x.dtype)  # (T, Dh) each
        return x * cos + x.roll(self.head_dim // 2, dims=-1) * sin
