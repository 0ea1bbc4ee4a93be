"""A key/value cache for autoregressive decoding (one per attention layer).

Without a cache, generating token t re-runs the model over all t tokens of the
context: O(t) work per layer for the projections and feed-forward and O(t^2)
for attention. With it, the keys and values of earlier tokens are kept, so a
step only computes the new token: O(1) for projections and feed-forward, O(t)
for attention (one query against t keys).

Shapes: B batch, H heads, S capacity (the longest context the cache holds), Dh head width, T new positions.
"""

from __future__ import annotations

import torch
from torch import nn


class KVCache(nn.Module):
    """Preallocated keys and values of one attention layer, written at explicit positions.

    Buffers `k` and `v`: (B, H, S, Dh), non-persistent (never saved with the weights). `length` is how many
    positions [0, length) hold valid entries. `update(k, v, start)` writes new keys/values (B, H, T, Dh) at
    positions [start, start + T) and returns the keys and values of positions [0, start + T), each
    (B, H, start + T, Dh): the whole context the new queries attend to. `start` may rewind (start < length
    overwrites, e.g. to rebuild the cache for a new window) but may not leave a gap (start > length).
    """

    def __init__(
        self,
        batch_size: int,
        n_head: int,
        capacity: int,
        head_dim: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        shape = (batch_size, n_head, capacity, head_dim)  # (B, H, S, Dh)
        self.register_buffer("k", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.size(2)

    def update(self, k: torch.Tensor, v: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v (B, H, T, Dh) for positions [start, start+T) -> all keys, values (B, H, start+T, Dh)."""
        B, H, S, Dh = self.k.shape
        T = k.size(2)
        if k.shape != v.shape or k.dim() != 4 or (k.size(0), k.size(1), k.size(3)) != (B, H, Dh):
            raise ValueError(
                f"KVCache holds (B, H, S, Dh) = {tuple(self.k.shape)}; got keys {tuple(k.shape)} and values "
                f"{tuple(v.shape)}, expected both (B, H, T, Dh) = ({B}, {H}, T, {Dh})"
            )
        if not 0 <= start <= self.length:
            raise ValueError(f"start={start} must be in [0, length={self.length}]: positions must stay contiguous")
        if start + T > S:
            raise ValueError(f"writing positions [{start}, {start + T}) overflows the cache capacity S={S}")
        self.k[:, :, start : start + T] = k
        self.v[:, :, start : start + T] = v
        self.length = start + T
        return self.k[:, :, : self.length], self.v[:, :, : self.length]  # (B, H, start+T, Dh) each
