"""tinyformer.attention.dropout: the cheap CPU mask is still dropout (rate, scale, gradient, seeding)."""

from __future__ import annotations

import pytest
import torch

from tinyformer.attention.dropout import Dropout, dropout
from tinyformer.attention.multihead import attend


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_each_element_is_dropped_with_probability_p_independently(p):
    torch.manual_seed(0)
    kept = dropout(torch.ones(1 << 20), p) != 0  # 1,048,576 draws: the rate is within 0.002 (> 4 sigma)
    assert abs(kept.float().mean().item() - (1 - p)) < 0.002
    pairs = kept.view(-1, 4).float()  # the 4 elements that share one 64-bit word
    for i, j in [(0, 1), (1, 2), (2, 3), (0, 3)]:
        both = (pairs[:, i] * pairs[:, j]).mean().item()
        assert abs(both - (1 - p) ** 2) < 0.003  # independent: P(both kept) = (1 - p)^2


def test_kept_elements_are_scaled_by_one_over_one_minus_p_and_the_gradient_follows_the_mask():
    torch.manual_seed(1)
    x = torch.randn(64, 33, requires_grad=True)  # 2,112 elements: not a multiple of 4 x 64 bits
    y = dropout(x, 0.25)
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / 0.75)
    y.sum().backward()
    assert torch.allclose(x.grad, kept.float() / 0.75)


def test_same_seed_same_mask_and_every_call_a_new_one():
    x = torch.ones(4096)
    torch.manual_seed(3)
    a, b = dropout(x, 0.5), dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.5), a)  # reproducible from the global seed (resume depends on it)
    assert not torch.equal(a, b)


def test_eval_mode_p_zero_and_p_one():
    x = torch.randn(10, 10)
    layer = Dropout(0.5).eval()
    assert layer(x) is x and dropout(x, 0.0) is x
    assert torch.count_nonzero(dropout(x, 1.0)) == 0
    assert Dropout(0.5).state_dict() == {}  # a drop-in for nn.Dropout: checkpoints are unchanged


def test_bf16_inputs_stay_bf16():
    x = torch.ones(256, dtype=torch.bfloat16)
    assert dropout(x, 0.1).dtype == torch.bfloat16


def test_attention_dropout_on_cpu_takes_the_manual_path_with_the_same_result():
    """SDPA with dropout would use PyTorch's mask; on a CPU attend routes it through the manual path, so the
    sdpa and manual backends draw the same mask from the same seed and agree exactly."""
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    torch.manual_seed(4)
    a, _ = attend(q, k, v, causal=True, dropout_p=0.3, backend="sdpa")
    torch.manual_seed(4)
    b, _ = attend(q, k, v, causal=True, dropout_p=0.3, backend="manual")
    assert torch.equal(a, b)
    no_drop, _ = attend(q, k, v, causal=True, backend="manual")
    assert not torch.allclose(a, no_drop)  # dropout did act
    assert torch.allclose(attend(q, k, v, causal=True)[0], no_drop, atol=1e-6)  # and p = 0 still uses SDPA
