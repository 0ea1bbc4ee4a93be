"""Dropout with a random mask that is cheap to draw on a CPU.

PyTorch's CPU dropout decides each element with `bernoulli_`: one random number per element, drawn
serially, about 10 ns each on a 2-core AMD EPYC (AVX2). That was 9-20% of a small Transformer's training
step there (the seed MiniGPT, the encoder-decoder, the masked LM). Here the mask comes from 64 random
bits per 4 elements (`random_` on int64 words, well under 1 ns per element): element i is kept when its
15-bit slice of a word is >= round(p * 2^15). That is the same rule, keep with probability 1 - p (to
within 2^-15), scaled by 1 / (1 - p), from the same global generator, so seeding, resume and the
DDP note in `tinyformer.train.distributed` hold as before; only the particular masks differ from
`F.dropout`'s. On CUDA and MPS `F.dropout` is already one fused kernel and runs as is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LEVELS = 2**15  # each element's random slice is 15 bits: 0 .. 32767


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Zero each element of `x` with probability `p` and scale the rest by 1 / (1 - p) (training only)."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # bits 0..62 random
    slices = words.view(torch.int16)[:n] & (LEVELS - 1)  # 4 independent 15-bit numbers per word
    keep = slices >= round(p * LEVELS)  # bool
    # bool -> uint8 is a free view, and uint8 -> x's dtype a fast cast (bool -> bf16 directly, or torch.where,
    # takes 3-9x longer on a CPU); the mask is 0 or exactly the dtype's rounding of 1 / (1 - p), as before
    mask = keep.view(torch.uint8).to(x.dtype).mul_(1.0 / (1.0 - p))
    return x * mask.view(x.shape)


class Dropout(nn.Dropout):
    """`nn.Dropout` (same argument, same state dict: none) with the cheap CPU mask of `dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
