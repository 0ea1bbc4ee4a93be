"""Linear attention (Katharopoulos et al., 2020, "Transformers are RNNs").

Softmax attention weighs value j for query i by exp(q_i . k_j / sqrt(Dh)), so every query meets every key:
O(T^2) time, and a generating model keeps every key and value (a KV cache that grows by one row per token).
Linear attention replaces the exponential by a product of feature maps, sim(q, k) = phi(q) . phi(k) with
phi(x) = elu(x) + 1 (positive, so the weights stay positive). Then the sums regroup:

    out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j)
          = phi(q_i) S / phi(q_i) . z,     S = sum_j phi(k_j) v_j^T (Dh, Dh),   z = sum_j phi(k_j) (Dh,)

- Non-causal (the encoder): S and z sum over every real key, once: O(T Dh^2).
- Causal (the decoder), "parallel form": query i needs S and z over keys j <= i, i.e. prefix sums. Here the
  sequence is cut into chunks of C positions: within a chunk, the masked C x C products phi(Q) phi(K)^T;
  across chunks, the running S and z of everything before the chunk. O(T C Dh + T Dh^2), never T x T.
- Causal, "recurrent form" (generation): a `LinearState` holds S and z after the tokens seen so far; a new
  token adds phi(k) v^T to S and phi(k) to z and reads phi(q) S / phi(q) . z. Its size is fixed, (Dh, Dh) + Dh
  per head and layer, whatever the length: the KV cache's O(T) memory becomes O(1).

Both forms run in float32 (the prefix sums add up many positive terms). There are no attention weights to
return or to drop out. Shapes: B batch, H heads, T queries, S keys, Dh head width, C chunk, N chunks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

CHUNK = 64  # positions per chunk of the causal parallel form
EPS = 1e-6  # keeps the normaliser off zero (phi > 0, so it is only ever tiny, never negative)


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1: positive, and close to 1 + x near zero."""
    return F.elu(x) + 1


def _exclusive_cumsum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum of the entries strictly before each one along `dim` (the first gets zeros)."""
    return x.cumsum(dim) - x


def causal_linear(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Feature-mapped q, k (B, H, T, Dh), v (B, H, T, Dh); `state` = (S (B, H, Dh, Dh), z (B, H, Dh)) of the
    positions before these (None = none) -> (out (B, H, T, Dh), the state after them)."""
    B, H, T, Dh = q.shape
    C = min(chunk, T)
    pad = -T % C
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))  # zero keys add nothing to S or z
    N = (T + pad) // C
    qc, kc, vc = (t.view(B, H, N, C, Dh) for t in (q, k, v))  # (B, H, N, C, Dh)
    kv = kc.transpose(-2, -1) @ vc  # (B, H, N, Dh, Dh): each chunk's sum of phi(k) v^T
    ksum = kc.sum(dim=3)  # (B, H, N, Dh): each chunk's sum of phi(k)
    s_before, z_before = _exclusive_cumsum(kv, 2), _exclusive_cumsum(ksum, 2)  # everything in earlier chunks
    if state is not None:
        s_before = s_before + state[0][:, :, None]  # (B, H, N, Dh, Dh)
        z_before = z_before + state[1][:, :, None]  # (B, H, N, Dh)
    tril = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()  # (C, C): key j <= query i
    within = (qc @ kc.transpose(-2, -1)).masked_fill(~tril, 0.0)  # (B, H, N, C, C)
    num = qc @ s_before + within @ vc  # (B, H, N, C, Dh)
    den = (qc * z_before[:, :, :, None]).sum(-1) + within.sum(-1)  # (B, H, N, C)
    out = (num / (den[..., None] + EPS)).view(B, H, N * C, Dh)[:, :, :T]  # (B, H, T, Dh)
    S0 = state[0] if state is not None else 0
    z0 = state[1] if state is not None else 0
    return out, (S0 + kv.sum(2), z0 + ksum.sum(2))


def full_linear(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Non-causal: feature-mapped q (B, H, T, Dh), k (B, H, S, Dh), v (B, H, S, Dh); key_valid broadcastable to
    (B, H, 1, S), True = a real key -> out (B, H, T, Dh). Every query sees every real key."""
    if key_valid is not None:
        k = k * key_valid.transpose(-2, -1).to(k.dtype)  # (B, H, S, Dh): padding keys become zeros
    S = k.transpose(-2, -1) @ v  # (B, H, Dh, Dh)
    z = k.sum(dim=2)  # (B, H, Dh)
    den = (q * z[:, :, None]).sum(-1)  # (B, H, T)
    return (q @ S) / (den[..., None] + EPS)  # (B, H, T, Dh)


def linear_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    mask: torch.Tensor | None = None,
    state: LinearState | None = None,
    start: int = 0,
) -> torch.Tensor:
    """Raw q (B, H, T, Dh), k/v (B, H, S, Dh) -> out (B, H, T, Dh), in q's dtype.

    Causal: S = T, and with `state` the queries also see the positions before `start`. Non-causal: `mask` may
    only hide keys (bool, broadcastable to (B, 1, 1, S), True = may attend): a key-padding mask.
    """
    dtype = q.dtype
    q, k, v = feature_map(q.float()), feature_map(k.float()), v.float()
    if causal:
        if mask is not None:
            raise ValueError("causal linear attention takes no extra mask (its prefix sums cannot skip keys)")
        if state is None:
            return causal_linear(q, k, v)[0].to(dtype)
        return state.update(q, k, v, start).to(dtype)
    if state is not None:
        raise ValueError("a LinearState only serves causal attention")
    if mask is not None and mask.size(-2) != 1:
        raise ValueError(f"linear attention can only hide keys: mask {tuple(mask.shape)} must be (B, 1, 1, S)")
    return full_linear(q, k, v, mask).to(dtype)


class LinearState(nn.Module):
    """The recurrent form's memory for one layer: S (B, H, Dh, Dh) and z (B, H, Dh), non-persistent buffers.

    `update(q, k, v, start)` takes feature-mapped queries/keys and values (B, H, T, Dh) for positions
    [start, start + T), returns their outputs and folds them into S and z. A sum cannot be taken apart, so
    `start` is either `length` (go on) or 0 (start again: S and z are reset).
    """

    def __init__(
        self,
        batch_size: int,
        n_head: int,
        head_dim: int,
        *,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        B, H, Dh = batch_size, n_head, head_dim
        self.register_buffer("s", torch.zeros(B, H, Dh, Dh, device=device), persistent=False)  # float32
        self.register_buffer("z", torch.zeros(B, H, Dh, device=device), persistent=False)
        self.length = 0

    def nbytes(self) -> int:
        """Bytes this state holds, whatever the number of tokens it has seen."""
        return self.s.numel() * self.s.element_size() + self.z.numel() * self.z.element_size()

    def update(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
        if q.shape[:2] != self.z.shape[:2] or q.size(-1) != self.z.size(-1):
            raise ValueError(f"LinearState holds z {tuple(self.z.shape)}; got queries {tuple(q.shape)}")
        if start not in (0, self.length):
            raise ValueError(f"start={start} must be 0 (reset) or length={self.length}: a sum cannot be rewound")
        state = (self.s, self.z) if start else None
        out, (s, z) = causal_linear(q, k, v, state)
        self.s.copy_(s)
        self.z.copy_(z)
        self.length = start + q.size(2)
        return out
