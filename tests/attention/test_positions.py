import math

import pytest
import torch

from tinyformer.attention.positions import Rotary, ntk_base, sinusoidal_table


def scores(rope: Rotary, q: torch.Tensor, k: torch.Tensor, qpos: int, kpos: int) -> torch.Tensor:
    """q . k after rotating q to position qpos and k to position kpos; q, k (B, H, 1, Dh)."""
    return (rope(q, qpos) * rope(k, kpos)).sum(-1)


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = Rotary(16)
    q, k = torch.randn(2, 3, 1, 16), torch.randn(2, 3, 1, 16)
    base = scores(rope, q, k, 7, 3)
    for shift in (1, 5, 100, 1000):
        torch.testing.assert_close(scores(rope, q, k, 7 + shift, 3 + shift), base, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(scores(rope, q, k, 8, 3), base, atol=1e-3)  # the distance itself does matter


def test_rope_at_position_zero_is_the_identity_and_keeps_norms():
    torch.manual_seed(0)
    rope, x = Rotary(8), torch.randn(2, 2, 5, 8)
    torch.testing.assert_close(rope(x[:, :, :1], 0), x[:, :, :1])
    y = rope(x, 3)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))  # a rotation
    assert not torch.allclose(y, x)


def test_rope_rows_follow_their_start_position():
    torch.manual_seed(0)
    rope, x = Rotary(8), torch.randn(1, 2, 6, 8)
    whole = rope(x, 0)
    torch.testing.assert_close(rope(x[:, :, 4:], 4), whole[:, :, 4:])  # a cache step rotates like the full pass


def test_ntk_scaling_raises_the_base_and_keeps_the_fastest_pair():
    assert ntk_base(10000.0, 1.0, 32) == 10000.0
    assert ntk_base(10000.0, 4.0, 32) == pytest.approx(10000.0 * 4 ** (32 / 30))
    rope = Rotary(32)
    plain = rope.angles(0, 512, torch.device("cpu"))
    rope.alpha = 4.0
    scaled = rope.angles(0, 512, torch.device("cpu"))
    torch.testing.assert_close(scaled[:, 0], plain[:, 0])  # pair 0 turns by the position itself: unchanged
    # the slowest pair turns alpha times slower, so position 4N looks like position N did
    torch.testing.assert_close(scaled[:, -1][4 * 100], plain[:, -1][100], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_is_the_pairwise_rotation_to_the_bit_forward_and_backward(dtype):
    """The one-pass form x*[cos, cos] + [x2, x1]*[-sin, sin] makes the same products and sums as the pairs'
    (x1 cos - x2 sin, x1 sin + x2 cos), so it must give the same numbers, in bf16 too, and the same gradient."""
    torch.manual_seed(0)
    rope = Rotary(16)
    x = (torch.randn(2, 3, 9, 16) * 4).to(dtype).requires_grad_()
    theta = rope.angles(5, 9, x.device)
    cos, sin = theta.cos().to(dtype), theta.sin().to(dtype)
    x1, x2 = x.chunk(2, dim=-1)
    pairs = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    ours = rope(x, 5)
    assert torch.equal(ours, pairs)
    g = torch.randn_like(ours)
    assert torch.equal(torch.autograd.grad(ours, x, g)[0], torch.autograd.grad(pairs, x, g)[0])


def test_rope_tables_follow_the_scaling_and_survive_inference_mode():
    torch.manual_seed(0)
    rope, x = Rotary(8), torch.randn(1, 2, 6, 8)
    plain = rope(x, 0)
    rope.alpha = 4.0  # NTK scaling switched on after a call: the kept table must not be reused
    fresh = Rotary(8)
    fresh.alpha = 4.0
    torch.testing.assert_close(rope(x, 0), fresh(x, 0), rtol=0, atol=0)
    assert not torch.allclose(rope(x, 0), plain)
    rope.alpha = 1.0
    with torch.inference_mode():  # a table made while sampling ...
        rope(x, 0)
    w = x.clone().requires_grad_()
    rope(w, 0).sum().backward()  # ... is not the one a training step records
    assert w.grad is not None


def test_sinusoidal_table_values_and_offset():
    t = sinusoidal_table(50, 8)
    assert t.shape == (50, 8)
    assert t[3, 0] == pytest.approx(math.sin(3)) and t[3, 1] == pytest.approx(math.cos(3))
    assert t[3, 2] == pytest.approx(math.sin(3 / 10000 ** (2 / 8)))
    torch.testing.assert_close(sinusoidal_table(10, 8, start=40), t[40:])


def test_odd_head_width_is_refused():
    with pytest.raises(ValueError, match="even head width"):
        Rotary(7)
