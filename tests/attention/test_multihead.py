import pytest
import torch

from tinyformer.attention import masks
from tinyformer.attention.multihead import MultiHeadAttention, attend
from tinyformer.attention.spec import BlockSpec

B, H, T, S, Dh = 2, 4, 7, 9, 8


def qkv(t=T, s=S, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, t, Dh, generator=g),
        torch.randn(B, H, s, Dh, generator=g),
        torch.randn(B, H, s, Dh, generator=g),
    )


def padding(s=S):
    valid = torch.ones(B, s, dtype=torch.bool)
    valid[0, -3:] = False  # first row has 3 padded keys
    return masks.from_key_valid(valid)


@pytest.mark.parametrize(
    "t, s, causal, use_pad",
    [(T, T, True, False), (T, T, False, False), (T, S, False, True), (T, T, True, True), (3, S, True, False)],
)
def test_sdpa_equals_manual(t, s, causal, use_pad):
    q, k, v = qkv(t, s)
    mask = padding(s) if use_pad else None
    fast, no_w = attend(q, k, v, mask=mask, causal=causal, backend="sdpa")
    slow, w = attend(q, k, v, mask=mask, causal=causal, backend="manual")
    assert no_w is None and w.shape == (B, H, t, s)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)


def test_weights_are_distributions_that_ignore_masked_keys():
    q, k, v = qkv(T, T)
    mask = padding(T)
    _, w = attend(q, k, v, mask=mask, causal=True, backend="manual")
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T))
    allowed = masks.combine(masks.causal(T), mask).expand(B, H, T, T)
    assert torch.all(w[~allowed] == 0)
    assert torch.all(w[allowed] > 0)


def test_asking_for_weights_uses_the_manual_path_even_with_sdpa_backend():
    torch.manual_seed(0)
    mha = MultiHeadAttention(BlockSpec(32, 4, backend="sdpa")).eval()
    x = torch.randn(2, 5, 32)
    out_fast, none = mha(x, causal=True)
    out_slow, w = mha(x, causal=True, need_weights=True)
    assert none is None and w.shape == (2, 4, 5, 5)
    torch.testing.assert_close(out_fast, out_slow, atol=1e-5, rtol=0)


def test_cross_attention_padding_in_context_changes_nothing():
    """Appending padded keys to the context must leave the output unchanged."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(BlockSpec(32, 4), cross=True).eval()
    x, ctx = torch.randn(1, 4, 32), torch.randn(1, 6, 32)
    ref, _ = mha(x, ctx)
    padded = torch.cat([ctx, torch.randn(1, 3, 32)], dim=1)
    valid = torch.tensor([[True] * 6 + [False] * 3])
    out, _ = mha(x, padded, mask=masks.from_key_valid(valid))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    unmasked, _ = mha(x, padded)
    assert not torch.allclose(unmasked, ref, atol=1e-3)


def test_width_must_divide_into_heads():
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_head=4"):
        MultiHeadAttention(BlockSpec(30, 4))


@pytest.mark.parametrize("n_kv_head, qk_norm", [(0, False), (2, False), (1, True)])
def test_rotary_queries_and_keys_rotated_together_equal_each_rotated_alone(n_kv_head, qk_norm):
    """Self-attention rotates its queries and keys as one tensor (half the kernels); the result must be the
    definition: the projection split into q, k, v heads, each of q and k normalised and rotated on its own."""
    from tinyformer.attention.positions import Rotary

    torch.manual_seed(0)
    spec = BlockSpec(n_embd=32, n_head=4, n_kv_head=n_kv_head, qk_norm=qk_norm, backend="manual")
    attn, rope = MultiHeadAttention(spec).eval(), Rotary(8)
    x, start = torch.randn(2, 5, 32), 3
    out, w = attn(x, causal=True, need_weights=True, rope=rope, start=start)

    kvh = spec.kv_heads
    q, k, v = attn.qkv(x).split([32, kvh * 8, kvh * 8], dim=-1)
    q, k, v = (t.view(2, 5, -1, 8).transpose(1, 2) for t in (q, k, v))
    if qk_norm:
        q, k = torch.nn.functional.rms_norm(q, (8,)), torch.nn.functional.rms_norm(k, (8,))
    q, k = rope(q, start), rope(k, start)
    y, ref_w = attend(q, k, v, causal=True, backend="manual", need_weights=True)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=0)
    torch.testing.assert_close(out, attn.proj(y.transpose(1, 2).reshape(2, 5, 32)), rtol=0, atol=0)
