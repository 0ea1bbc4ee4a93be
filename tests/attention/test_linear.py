"""Linear attention: the chunked causal form equals the quadratic definition, the recurrent form equals the
parallel one, padding keys are ignored, and the state does not rewind."""

import pytest
import torch

from tinyformer.attention.linear import LinearState, causal_linear, feature_map, full_linear, linear_attend


def quadratic(q, k, v, causal=True):
    """The definition, written with the T x T matrix: out_i = sum_j<=i phi(q_i).phi(k_j) v_j / sum_j<=i (...)."""
    a = feature_map(q) @ feature_map(k).transpose(-2, -1)  # (B, H, T, S)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(-1, keepdim=True)


def qkv(T=11, S=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (2, 3, T, 8)
    return (
        torch.randn(shape, generator=g),
        torch.randn(2, 3, S or T, 8, generator=g),
        torch.randn(2, 3, S or T, 8, generator=g),
    )


@pytest.mark.parametrize("chunk", [1, 4, 5, 64])  # 11 positions: several chunks, a ragged last one, or one chunk
def test_chunked_prefix_sums_equal_the_quadratic_definition(chunk):
    q, k, v = qkv()
    out, _ = causal_linear(feature_map(q), feature_map(k), v, chunk=chunk)
    torch.testing.assert_close(out, quadratic(q, k, v), atol=1e-5, rtol=1e-5)


def test_recurrent_form_equals_parallel_form_token_by_token():
    q, k, v = qkv(T=23)
    parallel = linear_attend(q, k, v, causal=True)
    state = LinearState(2, 3, 8)
    steps = [
        linear_attend(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], causal=True, state=state, start=t)
        for t in range(23)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=2), parallel, atol=1e-5, rtol=1e-5)
    assert state.length == 23 and state.s.shape == (2, 3, 8, 8)  # the same size after 23 tokens as after 1


def test_prefill_then_steps_equals_one_pass():
    q, k, v = qkv(T=20)
    state = LinearState(2, 3, 8)
    head = linear_attend(q[:, :, :13], k[:, :, :13], v[:, :, :13], causal=True, state=state, start=0)
    tail = linear_attend(q[:, :, 13:], k[:, :, 13:], v[:, :, 13:], causal=True, state=state, start=13)
    torch.testing.assert_close(torch.cat([head, tail], 2), quadratic(q, k, v), atol=1e-5, rtol=1e-5)


def test_state_restarts_at_zero_and_refuses_a_gap_or_a_rewind():
    q, k, v = qkv(T=6)
    state = LinearState(2, 3, 8)
    linear_attend(q, k, v, causal=True, state=state, start=0)
    again = linear_attend(q, k, v, causal=True, state=state, start=0)  # start 0 resets: same result as fresh
    torch.testing.assert_close(again, quadratic(q, k, v), atol=1e-5, rtol=1e-5)
    for start in (3, 7):
        with pytest.raises(ValueError, match="cannot be rewound"):
            linear_attend(q, k, v, causal=True, state=state, start=start)


def test_non_causal_form_sees_every_real_key_and_no_padding_key():
    q, k, v = qkv(T=5, S=9)
    valid = torch.tensor([[True] * 9, [True] * 6 + [False] * 3])[:, None, None, :]  # (B, 1, 1, S)
    out = linear_attend(q, k, v, causal=False, mask=valid)
    torch.testing.assert_close(out[0], quadratic(q, k, v, causal=False)[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        out[1], quadratic(q[1:], k[1:, :, :6], v[1:, :, :6], causal=False)[0], atol=1e-5, rtol=1e-5
    )
    assert not torch.allclose(out[1], full_linear(feature_map(q), feature_map(k), v)[1], atol=1e-3)  # mask matters


def test_a_mask_that_is_not_key_padding_is_refused():
    q, k, v = qkv(T=4)
    with pytest.raises(ValueError, match="can only hide keys"):
        linear_attend(q, k, v, causal=False, mask=torch.ones(1, 1, 4, 4, dtype=torch.bool))
