"""Multi-head scaled dot-product attention (Vaswani et al., 2017), one implementation.

`MultiHeadAttention` projects queries from `x` and keys/values from `x` (self)
or from `context` (cross), splits heads, calls `attend`, merges heads and
projects out. `attend` has two backends that compute the same function:

- "sdpa"   `F.scaled_dot_product_attention`: fused kernels; with a plain causal
           mask the kernel skips the masked upper triangle altogether. On a CPU,
           attention dropout takes the manual path instead: SDPA would fall back
           to its unfused math path there, with PyTorch's slow per-element mask
           (`tinyformer.attention.dropout` says why that one is cheaper).
- "manual" softmax(Q K^T / sqrt(Dh)) V written out, and the only path that can
           return the attention weights. Asking for weights picks it for that call.
           A mask shared by every sequence and head (the causal one) is added to the
           scores inside the same batched GEMM (`baddbmm`), so no pass over the
           (B, H, T, S) scores is spent on scaling or masking.
- "auto"   decided per run by measuring both (`tinyformer.device.choose_backend`;
           `set_backend` applies the choice); until then it computes as "sdpa".
           Which one is faster depends on the machine and dtype: on a CPU that
           multiplies bf16 natively, the fused CPU kernel is slower in bf16 than
           the plain GEMMs at small head widths, while in fp32 it is often faster.

Self-attention can also take a rotary position embedding (`rope`, applied to
queries and keys) and a `KVCache` (`cache`): the new keys and values are written
at positions [start, start + T) and the queries attend to every cached position.
Cross-attention can take its keys and values already projected (`context_kv`,
from `project_context`): a decoder generating token by token projects the
encoder memory once per source instead of once per generated token.

Two variants (the variants lab):
- `n_kv_head` < `n_head`: grouped-query attention (Ainslie et al., 2023; n_kv_head = 1 is multi-query
  attention, Shazeer, 2019). Keys and values get only `n_kv_head` heads, each shared by n_head / n_kv_head
  query heads: a smaller projection, and a KV cache that stores only the KV heads. n_kv_head = n_head is
  ordinary multi-head attention, with the very same parameters.
- `kind="linear"`: linear attention (`tinyformer.attention.linear`), whose `cache` is a `LinearState` of
  fixed size instead of a `KVCache`. It has no attention weights to return.

Shapes: B batch, T queries, S keys, D model width, H heads, Dh = D / H.
Masks follow `tinyformer.attention.masks`: bool, True = may attend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention import masks
from tinyformer.attention.dropout import dropout
from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.linear import LinearState, linear_attend
from tinyformer.attention.positions import Rotary
from tinyformer.attention.spec import BlockSpec
from tinyformer.errors import UserError

BACKENDS = ("auto", "sdpa", "manual")  # model.backend
KINDS = ("softmax", "linear")  # model.attention


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    backend: str = "sdpa",
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """q (B, H, T, Dh), k/v (B, Hkv, S, Dh) -> (out (B, H, T, Dh), weights (B, H, T, S) or None).

    Hkv divides H: each key/value head serves H / Hkv query heads (Hkv = H: one each)."""
    T, S = q.size(-2), k.size(-2)
    causal = causal and T > 1  # one query is the last position: it may see every key
    gqa = k.size(1) != q.size(1)
    if backend != "manual" and not need_weights and (dropout_p == 0 or q.device.type != "cpu"):
        if causal and mask is None and T == S:  # the fast kernel that skips masked blocks
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, enable_gqa=gqa), None
        full = masks.combine(masks.causal(T, S, q.device) if causal else None, mask)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=full, dropout_p=dropout_p, enable_gqa=gqa), None
    if gqa:  # each KV head repeated for its group of query heads
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, H, S, Dh) each
    full = masks.combine(masks.causal(T, S, q.device) if causal else None, mask)
    weights = scaled_scores(q, k, full).softmax(dim=-1)  # (B, H, T, S)
    dropped = dropout(weights, dropout_p)  # (a no-op for p = 0)
    return dropped @ v, weights  # (B, H, T, Dh)


def scaled_scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q (B, H, T, Dh), k (B, H, S, Dh) -> Q K^T / sqrt(Dh) (B, H, T, S), masked scores at `masks.fill_value`.

    A (T, S) mask (the causal one) goes into one batched GEMM as an additive bias (`baddbmm`: bias + alpha *
    Q K^T), so no pass over the scores is spent on scaling or masking; any other mask, e.g. (B, 1, 1, S)
    padding, is filled in afterwards, and keys that broadcast over the batch take the same general path."""
    B, H, T, Dh = q.shape
    S = k.size(-2)
    if mask is not None and mask.dim() == 2 and k.shape[:2] == (B, H):
        bias = masks.additive(mask, score_dtype(q))  # (T, S), broadcast over B*H
        q3, kt = q.reshape(B * H, T, Dh), k.reshape(B * H, S, Dh).transpose(1, 2)  # (B*H, T, Dh), (B*H, Dh, S)
        return torch.baddbmm(bias, q3, kt, alpha=Dh**-0.5).view(B, H, T, S)
    scores = (q @ k.transpose(-2, -1)) * Dh**-0.5  # (B, H, T, S)
    return scores if mask is None else scores.masked_fill(~mask, masks.fill_value(scores.dtype))


def score_dtype(q: torch.Tensor) -> torch.dtype:
    """The dtype Q K^T comes out in: autocast's where it is on (and q is fp32), else q's."""
    kind = q.device.type
    if q.dtype == torch.float32 and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return q.dtype


def softmax_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The attention layers of `model` that have a backend to choose (softmax, not linear, attention)."""
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention) and m.kind == "softmax"]


def set_backend(model: nn.Module, backend: str) -> int:
    """Point every softmax `MultiHeadAttention` in `model` at `backend` -> how many there are."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
    layers = softmax_layers(model)
    for m in layers:
        m.backend = backend
    return len(layers)


@contextlib.contextmanager
def using_backend(model: nn.Module, backend: str | None) -> Iterator[None]:
    """Inside: every softmax attention layer of `model` on `backend` (None: as they are); restored after."""
    before = [(m, m.backend) for m in softmax_layers(model)]
    if backend is not None:
        set_backend(model, backend)
    try:
        yield
    finally:
        for m, name in before:
            m.backend = name


class MultiHeadAttention(nn.Module):
    """Self-attention (one fused QKV projection) or cross-attention (Q from x, KV from context), as `spec`
    (`tinyformer.attention.spec.BlockSpec`) describes: width, heads, KV heads, biases, dropout, backend, kind."""

    def __init__(self, spec: BlockSpec, *, cross: bool = False) -> None:
        super().__init__()
        d_model, n_head, n_kv_head, kind = spec.n_embd, spec.n_head, spec.kv_heads, spec.attention
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        if n_head % n_kv_head:
            raise ValueError(f"n_head={n_head} is not divisible by n_kv_head={n_kv_head}")
        if spec.backend not in BACKENDS or kind not in KINDS:
            raise ValueError(f"backend={spec.backend!r} / kind={kind!r} is not one of {BACKENDS} / {KINDS}")
        if cross and (n_kv_head != n_head or kind != "softmax"):
            raise ValueError("cross-attention is softmax multi-head attention only")
        self.n_head, self.n_kv_head, self.dropout, self.backend = n_head, n_kv_head, spec.attn_dropout, spec.backend
        self.cross, self.kind, self.head_dim, self.qk_norm = cross, kind, spec.head_dim, spec.qk_norm
        if cross:
            self.q = nn.Linear(d_model, d_model, bias=spec.qkv_bias)
            self.kv = nn.Linear(d_model, 2 * d_model, bias=spec.qkv_bias)
        else:  # queries D wide, keys and values n_kv_head * Dh wide each (D when n_kv_head = n_head)
            self.qkv = nn.Linear(d_model, d_model + 2 * n_kv_head * self.head_dim, bias=spec.qkv_bias)
        self.proj = nn.Linear(d_model, d_model, bias=spec.bias)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, W = x.shape
        return x.view(B, L, W // self.head_dim, self.head_dim).transpose(1, 2)  # (B, W / Dh heads, L, Dh)

    def project_context(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention: context (B, S, D) -> keys and values (B, H, S, Dh) each."""
        k, v = self.kv(context).chunk(2, dim=-1)  # 2 x (B, S, D)
        return self.heads(k), self.heads(v)

    def project(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None,
        context_kv: tuple[torch.Tensor, torch.Tensor] | None,
        rope: Rotary | None = None,
        start: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, D), context (B, S, D) or its projected keys/values -> q (B, H, T, Dh), k and v (B, H, S, Dh),
        queries and keys normalised (`qk_norm`) and rotated (`rope`, self-attention) as `forward` needs them."""
        if self.cross:
            if context_kv is None and context is None:
                raise ValueError("cross-attention needs a context tensor (or its keys and values, context_kv)")
            k, v = context_kv if context_kv is not None else self.project_context(context)  # (B, H, S, Dh) each
            return self.placed(self.heads(self.q(x)), None, 0), self.placed(k, None, 0), v
        heads = self.heads(self.qkv(x))  # (B, H + 2 Hkv, T, Dh): the query heads, then the keys', then the values'
        qk = self.placed(heads[:, : self.n_head + self.n_kv_head], rope, start)  # both at once: the same positions
        return qk[:, : self.n_head], qk[:, self.n_head :], heads[:, self.n_head + self.n_kv_head :]

    def placed(self, x: torch.Tensor, rope: Rotary | None, start: int) -> torch.Tensor:
        """Queries or keys (B, heads, T, Dh) at positions [start, start + T), normalised and rotated if the model
        says so. Self-attention hands its queries and keys in one tensor: half the elementwise operations (and
        their kernel launches, which dominate at these widths on a CPU), the same numbers to the bit."""
        if self.qk_norm:  # every query and key to RMS 1 (no learned gain): |score| <= sqrt(Dh) whatever x is
            x = F.rms_norm(x, (self.head_dim,))
        return rope(x, start) if rope is not None else x  # rotated by their positions; shape unchanged

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        rope: Rotary | None = None,
        cache: KVCache | LinearState | None = None,
        start: int = 0,
        context_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D) at positions [start, start+T) -> (out (B, T, D), weights (B, H, T, S) if asked, else None).

        With a cache, S = start + T: the queries see the cached keys of every earlier position.
        Cross-attention takes `context` (B, S, D) or `context_kv`, its `project_context` (B, H, S, Dh) x 2.
        """
        B, T, D = x.shape
        if rope is not None and self.cross:
            raise ValueError("rotary positions are for self-attention; cross-attention's keys sit elsewhere")
        q, k, v = self.project(x, context, context_kv, rope, start)  # (B, H, T, Dh), (B, Hkv, S, Dh) x 2
        if self.kind == "linear":
            if need_weights:
                raise UserError("model.attention=linear has no attention weights to show; views need softmax")
            y, w = linear_attend(q, k, v, causal=causal, mask=mask, state=cache, start=start), None
        else:
            if cache is not None:
                k, v = cache.update(k, v, start)  # (B, Hkv, start + T, Dh) each
            p = self.dropout if self.training else 0.0
            kw = dict(mask=mask, causal=causal, dropout_p=p, backend=self.backend, need_weights=need_weights)
            y, w = attend(q, k, v, **kw)  # (B, H, T, Dh), (B, H, T, S) or None
        y = y.transpose(1, 2).reshape(B, T, D)  # (B, T, D): heads merged back
        return self.proj(y), (w if need_weights else None)
