"""THE mask convention of tinyformer, and the only place masks are built.

A mask is a boolean tensor broadcastable to (B, H, T, S) where **True means
"may attend"** - the polarity of `F.scaled_dot_product_attention`. Other
conventions are converted here, at the boundary, by one named function each:

- Hugging Face `attention_mask` (B, S) of 1 = real token, 0 = padding
  -> `from_hf_attention_mask`
- `key_padding_mask` (B, S) with True = padding, "ignore this key"
  -> `from_key_padding_mask`

Masked scores are filled with `torch.finfo(dtype).min` (see `fill_value`),
never a magic -1e9 that overflows in half precision.
"""

from __future__ import annotations

import torch


def causal(T: int, S: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """(T, S) mask letting query i see keys j <= i + (S - T).

    With S > T the queries are the *last* T positions of the S keys, which is
    what a decoder with a key/value cache of S - T earlier tokens needs.
    """
    S = T if S is None else S
    q = torch.arange(T, device=device)[:, None] + (S - T)  # (T, 1)
    k = torch.arange(S, device=device)[None, :]  # (1, S)
    return k <= q  # (T, S)


def from_key_valid(valid: torch.Tensor) -> torch.Tensor:
    """(B, S) bool, True = real key -> (B, 1, 1, S) mask."""
    return valid.bool()[:, None, None, :]


def from_hf_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Hugging Face 1/0 `attention_mask` (B, S) -> (B, 1, 1, S), True = may attend."""
    return from_key_valid(attention_mask != 0)


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """`key_padding_mask` (B, S), True = padding to ignore -> (B, 1, 1, S)."""
    return from_key_valid(~key_padding_mask.bool())


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of the given masks (None = no restriction), broadcast together."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


def fill_value(dtype: torch.dtype) -> float:
    """The score given to masked positions before softmax."""
    return torch.finfo(dtype).min


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The same mask as a bias added to the scores: 0 where it may attend, `fill_value` where not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, fill_value(dtype))
