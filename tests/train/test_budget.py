"""`train --time`: the schedule sized to a time budget ends on time (training and evaluations together, within
5%), keeps to it when the machine slows down mid-run, continues the same plan after a resume, and a bad
duration is one line. The clock is a fake one the test advances, so no assertion depends on this machine."""

from __future__ import annotations

import types

import pytest
import torch

from tests.train.test_trainer import FixedBatch
from tinyformer.config import TrainConfig
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.train import budget
from tinyformer.train import trainer as trainer_module
from tinyformer.train.trainer import Trainer


class Clock:
    """time.perf_counter and time.monotonic that move `tick` seconds a call; `tick` doubles after `slow_after`
    calls (the machine gets busy)."""

    def __init__(self, tick: float, slow_after: int | None = None) -> None:
        self.now, self.tick, self.calls, self.slow_after = 0.0, tick, 0, slow_after

    def perf_counter(self) -> float:
        self.calls += 1
        if self.slow_after is not None and self.calls == self.slow_after:
            self.tick *= 2
        self.now += self.tick
        return self.now

    monotonic = perf_counter


def fit(tmp_path, monkeypatch, clock: Clock, seconds: float, until: int | None = None, resume: bool = False):
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter,
                                                                       monotonic=clock.monotonic))  # fmt: skip
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, backend="sdpa"))
    x = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(1))
    config = TrainConfig(max_iters=3000, warmup_iters=100, eval_interval=500, eval_iters=100, schedule="cosine",
                         lr=3e-3, device="cpu", time_budget=seconds)  # fmt: skip
    trainer = Trainer(model, FixedBatch(x, x), config, tmp_path, progress=False, resume=resume)
    return trainer, trainer.fit(until)


def spent(trainer) -> float:
    return trainer.train_seconds + trainer.plan.eval_seconds


def test_a_budget_ends_on_time_with_the_configs_shape_of_schedule(tmp_path, monkeypatch):
    trainer, result = fit(tmp_path, monkeypatch, Clock(0.05), 20.0)
    assert result.status == "finished"
    assert 0.95 * 20.0 <= spent(trainer) <= 20.0 * 1.001  # evaluations included
    plan = trainer.plan
    assert plan.plans >= 2 and plan.max_iters == result.step
    assert abs(plan.warmup_iters / plan.max_iters - 100 / 3000) < 0.01  # the preset's warmup share
    assert 4 <= plan.max_iters // plan.eval_interval + 1 <= 7  # as many evaluations as the config had (6)
    assert trainer.config.max_iters == plan.max_iters  # the cosine ends at the planned last step


def test_a_machine_that_slows_down_mid_run_still_ends_on_time(tmp_path, monkeypatch):
    steady, _ = fit(tmp_path / "steady", monkeypatch, Clock(0.05), 20.0)
    slowed, result = fit(tmp_path / "slowed", monkeypatch, Clock(0.05, slow_after=150), 20.0)
    assert 0.95 * 20.0 <= spent(slowed) <= 20.0 * 1.001
    assert result.step < steady.plan.max_iters  # it planned fewer steps once its steps took longer


def test_a_resumed_run_continues_its_plan(tmp_path, monkeypatch):
    first, stopped = fit(tmp_path, monkeypatch, Clock(0.05), 20.0, until=60)
    assert stopped.status == "stopped" and first.plan.plans >= 1
    again, result = fit(tmp_path, monkeypatch, Clock(0.05), 20.0, resume=True)
    assert again.original.max_iters == 3000 and result.status == "finished"
    assert 0.95 * 20.0 <= spent(again) <= 20.0 * 1.001  # the time before the stop counts


def test_durations_read_as_people_write_them():
    assert [budget.parse_duration(t) for t in ("90", "90s", "10m", "1h", "1h30m", "2.5m")] == [
        90, 90, 600, 3600, 5400, 150,
    ]  # fmt: skip
    for bad in ("", "ten minutes", "10x", "0s", "5m10"):
        with pytest.raises(UserError, match="--time"):
            budget.parse_duration(bad)
