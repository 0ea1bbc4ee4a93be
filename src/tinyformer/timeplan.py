"""The `--time` plan as a run keeps it: the schedule sized to the time budget, saved in trainer_state.pt with each
checkpoint (`TrainerState.budget`), and the one rule for where a run ends.

A ground-floor module, as `tinyformer.runfolder`, which reads it: `tinyformer.train.budget` makes and moves a plan;
this holds its fields, reads one from a file (`Plan.from_dict`: a field missing, of another type or out of its
range is one line naming the file and the field) and says where a run ends (`end_step`, `finished`: the plan's last
step for a `--time` run, `train.max_iters` otherwise), for `info`, `api.summary` and the studies alike.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tinyformer.errors import UserError

Config = TypeVar("Config")  # a TrainConfig (`tinyformer.config`, a layer above this one)
MAX_COUNT = 2**63  # a count of steps or evaluations a plan holds is below it


@dataclass
class Plan:
    """The schedule sized to the budget, as saved in trainer_state.pt (`TrainerState.budget`)."""

    budget: float  # seconds of training and evaluation together
    max_iters: int
    warmup_iters: int
    eval_interval: int
    step_s: float = 0.0  # the measured seconds per optimizer step the plan used
    eval_s: float = 0.0  # the measured seconds per evaluation (their mean)
    eval_seconds: float = 0.0  # time spent in evaluations so far (train_seconds excludes it)
    evals: int = 0  # evaluations so far
    plans: int = 0  # how many times the run has planned (0: not yet; then once a step and at each evaluation)

    def apply(self, config: Config) -> Config:
        """`config` (a TrainConfig) with this plan's steps, warmup and evaluation cadence."""
        return dataclasses.replace(
            config, max_iters=max(self.max_iters, 1), warmup_iters=self.warmup_iters, eval_interval=self.eval_interval
        )

    def evaluated(self, seconds: float) -> Plan:
        """This plan after one more evaluation that took `seconds`."""
        total, n = self.eval_seconds + seconds, self.evals + 1
        return dataclasses.replace(self, eval_seconds=total, evals=n, eval_s=total / n)

    def line(self) -> str:
        evals = self.max_iters // self.eval_interval + 1
        return (
            f"time budget {self.budget:,.0f} s: {self.step_s * 1000:,.1f} ms/step and {self.eval_s:.1f} s per "
            f"evaluation measured here -> {self.max_iters:,} steps, warmup {self.warmup_iters:,}, {evals} "
            f"evaluations (every {self.eval_interval:,} steps)"
        )

    @classmethod
    def from_dict(cls, data: Any, where: str | Path) -> Plan:
        """The plan trainer_state.pt holds under "budget" (a dict: what `TrainerState.to_dict` writes); one of
        another shape is a UserError naming `where` (the file) and the field. Keys this version does not know
        are left out; fields added since a folder was written take their defaults."""
        said = f"{where} does not hold a trainer state:"
        if not isinstance(data, dict):
            raise UserError(f"{said} 'budget' is a {type(data).__name__}, not a plan (a dict)")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in data and f.default is dataclasses.MISSING:
                raise UserError(f"{said} 'budget.{f.name}' is missing")
            if f.name in data:
                values[f.name] = _field(f.name, f.type, data[f.name], said)
        return cls(**values)


LEAST = {"budget": 1e-9, "eval_interval": 1}  # the fields with a floor above 0 (the budget: above 0 s)


def _field(name: str, kind: str, value: Any, said: str) -> float | int:
    """One field of a saved plan, checked: an int field a non-negative int (`eval_interval` >= 1), a float one a
    finite number >= 0 (`budget` > 0), never a bool."""
    least = LEAST.get(name, 0)
    if kind == "int":
        ok = type(value) is int and least <= value < MAX_COUNT
        allowed = f"an int from {least} below 2**63"
    else:
        ok = type(value) in (int, float) and math.isfinite(value) and value >= least
        allowed = "a number of seconds above 0" if least else "a finite number >= 0"
    if not ok:
        raise UserError(f"{said} 'budget.{name}' is {value!r}; it must be {allowed}")
    return float(value) if kind == "float" else value


class Progress(Protocol):
    """What `end_step` and `finished` read of a run's state (a `tinyformer.runfolder.TrainerState`)."""

    step: int
    reached: str
    budget: Plan | None


def end_step(state: Progress, max_iters: int) -> int:
    """The step a run ends at: a `--time` run's, its plan's last step (the budget sizes the run); any other run's,
    `max_iters` (its config's `train.max_iters`)."""
    return max_iters if state.budget is None else state.budget.max_iters


def finished(state: Progress, max_iters: int) -> bool:
    """Whether a run has trained to its end (`end_step`), or stopped where `train.stop_at` was met."""
    return state.step >= end_step(state, max_iters) or bool(state.reached)
