import pytest

from tinyformer.config import TrainConfig
from tinyformer.train.schedules import lr_at


def test_constant_with_warmup():
    c = TrainConfig(lr=1e-3, warmup_iters=10, max_iters=100)
    assert lr_at(0, c) == pytest.approx(1e-4)
    assert lr_at(9, c) == pytest.approx(1e-3)
    assert lr_at(50, c) == lr_at(99, c) == 1e-3


def test_cosine_goes_from_peak_to_floor_monotonically():
    c = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=110, schedule="cosine")
    lrs = [lr_at(s, c) for s in range(110)]
    assert lrs[10] == pytest.approx(1e-3)
    assert lrs[60] == pytest.approx(5.5e-4)  # half way: the mean of peak and floor
    assert lr_at(110, c) == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def test_noam_matches_the_paper_formula():
    d, warmup = 128, 1000
    c = TrainConfig(lr=d**-0.5 * warmup**-0.5, warmup_iters=warmup, schedule="noam", max_iters=5000)
    for step in (0, 10, 999, 1000, 4000):
        s = step + 1
        assert lr_at(step, c) == pytest.approx(d**-0.5 * min(s**-0.5, s * warmup**-1.5))
