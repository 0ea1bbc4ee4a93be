"""Training for the time you have: `tinyformer train gpt --time 10m` (`train.time_budget`, in seconds).

The run measures this machine's speed in its own first steps (`MEASURE` of them, the slowest first ones left
out), then sizes its schedule so that training, evaluations included, ends at the budget: `max_iters` from the
measured seconds per step, the warmup and the evaluation cadence at the same fraction of the run as the
config's (a preset's 100 warmup steps of 3,000 stay 1/30 of the run, its evaluations as many as it had, at
most `MAX_EVALS`), the cosine (or wsd) decay ending at the new last step. At every evaluation it measures
again and moves the last step, so a machine that slows down or speeds up still ends on time; the learning
rate stays a pure function of (step, plan), and the plan is saved with each checkpoint, so a resumed run
continues the same schedule. If the budget runs out anyway, the run evaluates, saves and ends there.

What it does not choose: the model's shape, dropout, batch and learning rate are the config's (a preset's).
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from dataclasses import dataclass

from tinyformer.config import TrainConfig
from tinyformer.errors import UserError

MEASURE = 12  # steps timed before the first plan (the first 2 left out: allocations, caches)
MAX_EVALS = 20  # evaluations in a planned run, at most (each one costs eval_iters batches)
UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """ "90", "90s", "10m", "1h", "1h30m", "2.5m" -> seconds; UserError (one line) for anything else."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smh])", t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise UserError(f"--time {text!r}: give a duration such as 90s, 10m, 1h or 1h30m")
        seconds = sum(float(n) * UNITS[u] for n, u in parts)
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"--time {text!r}: the budget must be more than 0 seconds")
    return seconds


@dataclass
class Plan:
    """The schedule sized to the budget, as saved in trainer_state.pt (`TrainerState.budget`)."""

    budget: float  # seconds of training and evaluation together
    max_iters: int
    warmup_iters: int
    eval_interval: int
    eval_iters: int  # batches per evaluation: all evaluations together take at most EVAL_SHARE of the budget
    step_s: float = 0.0  # the measured seconds per optimizer step the plan used
    eval_batch_s: float = 0.0  # the measured seconds per evaluation batch (their mean)
    eval_seconds: float = 0.0  # time spent in evaluations so far (train_seconds excludes it)
    eval_batches: int = 0  # evaluation batches so far
    plans: int = 0  # how many times the run has planned (1 after the first measurement)

    def apply(self, config: TrainConfig) -> TrainConfig:
        """`config` with this plan's steps, warmup and evaluations."""
        return dataclasses.replace(
            config,
            max_iters=max(self.max_iters, 1),
            warmup_iters=self.warmup_iters,
            eval_interval=max(self.eval_interval, 1),
            eval_iters=self.eval_iters,
        )

    def evaluated(self, seconds: float) -> Plan:
        """This plan after one more evaluation (of `eval_iters` batches) that took `seconds`."""
        total, batches = self.eval_seconds + seconds, self.eval_batches + self.eval_iters
        return dataclasses.replace(self, eval_seconds=total, eval_batches=batches, eval_batch_s=total / batches)

    def line(self) -> str:
        evals = self.max_iters // self.eval_interval + 1
        return (
            f"time budget {self.budget:,.0f} s: {self.step_s * 1000:,.1f} ms/step measured here -> "
            f"{self.max_iters:,} steps, warmup {self.warmup_iters:,}, {evals} evaluations of {self.eval_iters} "
            f"batches (every {self.eval_interval:,} steps, {self.eval_iters * self.eval_batch_s:.1f} s each)"
        )


EVAL_SHARE = 0.1  # of the budget, for every evaluation together
FIRST_EVAL = 10  # batches in the evaluation before training (its cost is not known yet)


def first_plan(config: TrainConfig) -> Plan:
    """Before anything is measured: the config's own schedule, a short first evaluation, replaced after
    `MEASURE` steps."""
    c = config
    return Plan(c.time_budget, c.max_iters, c.warmup_iters, c.eval_interval, min(c.eval_iters, FIRST_EVAL))


def replan(plan: Plan, original: TrainConfig, step: int, train_seconds: float, recent: list[float]) -> Plan:
    """A plan that ends at the budget from here: `step` steps done in `train_seconds` (+ plan.eval_seconds),
    `recent` the latest step times (their median is the speed from now on). The first plan sets the warmup, the
    evaluations' cadence and size; later ones move the last step only, so that no evaluation moves."""
    step_s = statistics.median(recent)
    evals = max(1, min(MAX_EVALS, original.max_iters // original.eval_interval))  # the config's count
    if plan.plans == 0:
        share = EVAL_SHARE * plan.budget / (evals * max(plan.eval_batch_s, 1e-9))
        plan = dataclasses.replace(plan, eval_iters=max(1, min(original.eval_iters, int(share))))
    eval_s = plan.eval_iters * plan.eval_batch_s
    left = plan.budget - train_seconds - plan.eval_seconds
    for _twice in range(2):  # the evaluations still to come depend on the steps, and the steps on them
        interval = plan.eval_interval if plan.plans else max(1, math.ceil(max(plan.max_iters, 1) / evals))
        steps_left = max(0, int((left - eval_s * _evals_left(step, plan.max_iters, interval)) / step_s))
        plan = dataclasses.replace(plan, max_iters=step + steps_left)
    if plan.plans == 0:
        total = max(plan.max_iters, 1)
        warmup = round(original.warmup_iters * total / original.max_iters)
        plan = dataclasses.replace(plan, warmup_iters=warmup, eval_interval=max(1, math.ceil(total / evals)))
    return dataclasses.replace(plan, step_s=step_s, plans=plan.plans + 1)


def _evals_left(step: int, max_iters: int, interval: int) -> int:
    """Evaluations after `step` in a run of `max_iters` steps evaluated every `interval` (and at its end)."""
    return max(0, max_iters // interval - step // interval) + 1


def over(plan: Plan, train_seconds: float) -> bool:
    """Whether the budget is spent (training and evaluations)."""
    return train_seconds + plan.eval_seconds >= plan.budget
