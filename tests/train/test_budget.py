"""`train --time`: the schedule sized to a time budget ends on time (training and evaluations together, within
5%), keeps to it when the machine slows down mid-run, continues the same plan after a resume, and a bad
duration is one line. The clock is a fake one the test advances, so no assertion depends on this machine."""

from __future__ import annotations

import json
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

    def __init__(self, tick: float, slow_after: int | None = None, factor: float = 2.0) -> None:
        self.now, self.tick, self.calls, self.slow_after, self.factor = 0.0, tick, 0, slow_after, factor

    def perf_counter(self) -> float:
        self.calls += 1
        if self.slow_after is not None and self.calls == self.slow_after:
            self.tick *= self.factor
        self.now += self.tick
        return self.now

    monotonic = perf_counter


class CostlyEval(FixedBatch):
    """An evaluation that takes `seconds` on the fake clock."""

    def __init__(self, x, clock: Clock, seconds: float) -> None:
        super().__init__(x, x)
        self.clock, self.seconds = clock, seconds

    def evaluate(self, model):
        self.clock.now += self.seconds
        return super().evaluate(model)


def fit(tmp_path, monkeypatch, clock: Clock, seconds: float, until=None, resume=False, eval_s: float = 0.0):
    monkeypatch.setattr(trainer_module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter,
                                                                       monotonic=clock.monotonic))  # fmt: skip
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, backend="sdpa"))
    x = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(1))
    config = TrainConfig(max_iters=3000, warmup_iters=100, eval_interval=500, eval_iters=100, schedule="cosine",
                         lr=3e-3, device="cpu", time_budget=seconds)  # fmt: skip
    task = CostlyEval(x, clock, eval_s)
    trainer = Trainer(model, task, config, tmp_path, progress=False, resume=resume)
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
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r["step"] for r in rows if r.get("split") == "val"]
    assert len(evals) == len(set(evals)) == plan.evals
    assert evals[-1] - evals[-2] > plan.eval_s / plan.step_s  # no last evaluation a few steps after the one before


def test_a_machine_that_slows_down_mid_run_still_ends_on_time(tmp_path, monkeypatch):
    steady, _ = fit(tmp_path / "steady", monkeypatch, Clock(0.05), 20.0)
    slowed, result = fit(tmp_path / "slowed", monkeypatch, Clock(0.05, slow_after=150), 20.0)
    assert 0.95 * 20.0 <= spent(slowed) <= 20.0 * 1.001
    assert result.step < steady.plan.max_iters  # it planned fewer steps once its steps took longer


def test_a_slowdown_after_the_last_plan_ends_the_run_at_the_budget(tmp_path, monkeypatch):
    steady, _ = fit(tmp_path / "steady", monkeypatch, Clock(0.05), 20.0)
    last_eval = steady.plan.max_iters // steady.plan.eval_interval * steady.plan.eval_interval
    calls = 2 * (last_eval + (steady.plan.max_iters - last_eval) // 2) + 40  # half-way through the last stretch
    slowed, result = fit(tmp_path / "slowed", monkeypatch, Clock(0.05, slow_after=calls, factor=4.0), 20.0)
    assert result.step < steady.plan.max_iters and result.status == "finished"
    assert spent(slowed) <= 20.0 * 1.05  # within 5%: the step that crossed it, and the last evaluation


def test_a_speedup_after_the_last_evaluation_still_spends_the_budget(tmp_path, monkeypatch):
    """The plan follows the speed between evaluations too: steps 4x faster from the last evaluation on (the
    machine's other load went away) are spent on more steps, not left over (a 1-minute run once ended 6% early)."""
    steady, _ = fit(tmp_path / "steady", monkeypatch, Clock(0.05), 20.0)
    last_eval = steady.plan.max_iters // steady.plan.eval_interval * steady.plan.eval_interval
    sped, result = fit(tmp_path / "sped", monkeypatch, Clock(0.05, slow_after=2 * last_eval + 40, factor=0.25), 20.0)
    assert result.step > steady.plan.max_iters and result.status == "finished"
    assert 0.95 * 20.0 <= spent(sped) <= 20.0 * 1.001


def test_a_resumed_run_continues_its_plan(tmp_path, monkeypatch):
    first, stopped = fit(tmp_path, monkeypatch, Clock(0.05), 20.0, until=30)
    interval = first.plan.eval_interval
    assert stopped.status == "stopped" and first.plan.plans >= 1 and interval > 31  # planned by step 30
    _, stopped = fit(tmp_path, monkeypatch, Clock(0.05), 20.0, until=interval - 1, resume=True)
    again, result = fit(tmp_path, monkeypatch, Clock(0.05), 20.0, resume=True)  # evaluates at its first step
    assert again.plan.eval_interval == interval and result.status == "finished"
    assert 0.95 * 20.0 <= spent(again) <= 20.0 * 1.001  # the time before the stops counts
    with pytest.raises(UserError, match="planned for a budget of 20 s"):
        fit(tmp_path, monkeypatch, Clock(0.05), 30.0, resume=True)


def test_evaluations_take_at_most_a_tenth_of_the_budget(tmp_path, monkeypatch):
    trainer, _ = fit(tmp_path, monkeypatch, Clock(0.05), 20.0, eval_s=1.0)  # a second each
    assert trainer.plan.evals <= 1 + 2  # the one before training, then 0.1 x 20 s / 1 s of them
    assert 0.95 * 20.0 <= spent(trainer) <= 20.0 * 1.001


def test_durations_read_as_people_write_them():
    assert [budget.parse_duration(t) for t in ("90", "90s", "10m", "1h", "1h30m", "2.5m")] == [
        90, 90, 600, 3600, 5400, 150,
    ]  # fmt: skip
    for bad in ("", "ten minutes", "10x", "0s", "5m10"):
        with pytest.raises(UserError, match="--time"):
            budget.parse_duration(bad)


def test_a_last_stretch_shorter_than_an_evaluation_ends_at_the_evaluation_before():
    """4 steps (84 ms) left after the evaluation at step 1692 would cost a 0.7 s evaluation of their own: the run
    ends at 1692 instead (seen in a resumed 40 s run)."""
    config = TrainConfig(max_iters=3000, warmup_iters=100, eval_interval=500, time_budget=40.0)
    plan = budget.Plan(40.0, 1700, 56, 282, step_s=0.021, eval_s=0.7, eval_seconds=4.2, evals=6, plans=1)
    assert budget.replan(plan, config, 1692, 40.0 - 4.2 - 0.7 - 4.5 * 0.021, [0.021]).max_iters == 1692
    longer = budget.replan(plan, config, 1300, 40.0 - 4.2 - 1.4 - 350 * 0.021, [0.021]).max_iters
    assert 1648 <= longer <= 1650  # 240 steps after the evaluation at 1410: they stay


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A budget table of two rows (1 and 10 minutes) in a presets folder of its own, beside another preset."""
    from tinyformer import config as cfg

    rows = {"gpt_time_1m": "[model]\nn_layer = 3\n", "gpt_time_10m": "[model]\nn_layer = 5\ndropout = 0.1\n"}
    for name, text in {**rows, "gpt_cpu_quick": "[model]\nn_layer = 2\n"}.items():
        (tmp_path / f"{name}.toml").write_text(text)
    monkeypatch.setattr(cfg, "PRESETS", tmp_path)
    return rows


def test_the_row_for_a_budget_is_the_largest_at_or_under_it_and_the_smallest_under_them_all(table):
    assert budget.rows("gpt") == {1: "gpt_time_1m", 10: "gpt_time_10m"}
    picks = {s: budget.row_for("gpt", s) for s in (20, 60, 599, 600, 1800)}
    assert picks == {
        20: "gpt_time_1m",
        60: "gpt_time_1m",
        599: "gpt_time_1m",
        600: "gpt_time_10m",
        1800: "gpt_time_10m",
    }
    assert budget.row_for("reverse", 600) is None  # a task without a table keeps its own recipe


def test_time_with_no_config_trains_the_rows_shape_and_says_which_while_a_config_or_a_set_wins(table):
    from tinyformer.runs import new_config

    ten = new_config("gpt", [], ["train.time_budget=900"])
    assert (ten.model.n_layer, ten.model.dropout, ten.train.time_row) == (5, 0.1, "gpt_time_10m")
    assert new_config("gpt", [], ["train.time_budget=60"]).train.time_row == "gpt_time_1m"
    mine = new_config("gpt", [], ["train.time_budget=900", "model.dropout=0.3"])  # --set beats the row
    assert (mine.model.n_layer, mine.model.dropout) == (5, 0.3)
    given = new_config("gpt", [{"model": {"n_layer": 2}}], ["train.time_budget=900"])  # --config: its shape
    assert (given.model.n_layer, given.train.time_row) == (2, "")
    assert new_config("gpt", [], []).train.time_row == ""  # no --time, no row
