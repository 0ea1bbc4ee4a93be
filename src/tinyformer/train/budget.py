"""Training for the time you have: `tinyformer train gpt --time 10m` (`train.time_budget`, in seconds).

The run measures this machine's speed in its own first steps (`MEASURE` of them, the slowest first ones left
out), then sizes its schedule so that training, evaluations included, ends at the budget: `max_iters` from the
measured seconds per step, the warmup and the evaluation cadence at the same fraction of the run as the
config's (a preset's 100 warmup steps of 3,000 stay 1/30 of the run, its evaluations as many as it had, at
most `MAX_EVALS`), the cosine (or wsd) decay ending at the new last step. After every step (and every
evaluation) it measures again and moves the last step, so a machine that slows down or speeds up, even in a
run's last stretch, still ends on time; the learning rate stays a pure function of (step, plan), and the plan
is saved with each checkpoint, so a resumed run continues the same schedule. If the budget runs out anyway,
the run evaluates, saves and ends there. `--time` sets the run's length, `train.max_iters` only the shape it
scales: a config of fewer steps than the measuring takes still trains for its budget (`measuring`).

What it chooses before the run: for a task with a budget table and a run given no `--config`, the model's shape,
dropout, batch and learning rate come from the table's row for the budget (`row_for`): the shipped preset
`<task>_time_<minutes>m` of the largest budget at or under the one asked (the smallest row under it), each row
the best of its budget in `tinyformer experiment budgets` (the search is in that study's report and the
guide's part 1, "How good in the time you have"). The run's `train.time_row` records the row. With `--config`,
the config's shape is kept.
What it does not count: the checkpoint written after each evaluation, the loss plot and the end-of-run sample.
One process only: under torchrun each rank would plan on its own clock.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics

from tinyformer.config import TrainConfig
from tinyformer.errors import UserError
from tinyformer.timeplan import Plan

ROW = re.compile(r"(?P<task>\w+?)_time_(?P<minutes>\d+)m")  # a budget row: presets/gpt_time_10m.toml
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


EVAL_SHARE = 0.1  # of the budget, for every evaluation together: fewer evaluations where they would take more


def first_plan(config: TrainConfig) -> Plan:
    """Before anything is measured: the config's own schedule, replaced after `MEASURE` steps."""
    return measuring(Plan(config.time_budget, config.max_iters, config.warmup_iters, config.eval_interval), 0)


def measuring(plan: Plan, step: int) -> Plan:
    """A plan not made yet, at `step`, runs until it is: `--time` sizes the run, and `train.max_iters` only gives
    the shape the plan scales (its warmup's share, its count of evaluations), so a config of fewer steps than the
    measuring takes (`train.max_iters=3`) does not end the run before its budget is planned. (The one step more:
    the step that plans is not the last of the schedule, so it does not evaluate off the cadence.)"""
    return plan if plan.plans else dataclasses.replace(plan, max_iters=max(plan.max_iters, step + MEASURE + 3))


def replan(plan: Plan, original: TrainConfig, step: int, train_seconds: float, recent: list[float]) -> Plan:
    """A plan that ends at the budget from here: `step` steps done in `train_seconds` (+ plan.eval_seconds),
    `recent` the latest step times (their median is the speed from now on; none: the plan's last). The first plan
    sets the warmup and the evaluations' cadence; later ones move the last step only, so no evaluation moves."""
    step_s = max(statistics.median(recent) if recent else plan.step_s, 1e-6)
    left = plan.budget - train_seconds - plan.eval_seconds
    if plan.plans == 0:  # the config's count of evaluations, fewer where they would take more than their share
        affordable = int(EVAL_SHARE * plan.budget / max(plan.eval_s, 1e-9))
        evals = max(1, min(MAX_EVALS, original.max_iters // original.eval_interval, affordable))
    for _twice in range(2):  # the evaluations still to come depend on the steps, and the steps on them
        interval = plan.eval_interval if plan.plans else max(1, math.ceil(max(plan.max_iters, 1) / evals))
        steps_left = max(0, int((left - plan.eval_s * _evals_left(step, plan.max_iters, interval)) / step_s))
        plan = dataclasses.replace(plan, max_iters=step + steps_left)
    last = plan.max_iters // plan.eval_interval * plan.eval_interval  # the last evaluation on the cadence
    if plan.plans and last >= step and plan.max_iters - last <= plan.eval_s / step_s:
        plan = dataclasses.replace(plan, max_iters=last)  # the steps after it would cost less than their evaluation
    if plan.plans == 0:
        total = max(plan.max_iters, 1)
        warmup = round(original.warmup_iters * total / original.max_iters)
        plan = dataclasses.replace(plan, warmup_iters=warmup, eval_interval=max(1, math.ceil(total / evals)))
    return dataclasses.replace(plan, step_s=step_s, plans=plan.plans + 1)


def _evals_left(step: int, max_iters: int, interval: int) -> int:
    """Evaluations after `step` in a run of `max_iters` steps evaluated every `interval` (and at its end)."""
    return max(0, max_iters // interval - step // interval) + (max_iters % interval != 0)


def over(plan: Plan, train_seconds: float) -> bool:
    """Whether the budget is spent (training and evaluations)."""
    return train_seconds + plan.eval_seconds >= plan.budget


def rows(task: str) -> dict[int, str]:
    """The budget table of `task`: {minutes: the shipped preset of that row}, by budget."""
    from tinyformer.config import presets

    found = {int(m["minutes"]): name for name in presets() if (m := ROW.fullmatch(name)) and m["task"] == task}
    return dict(sorted(found.items()))


def row_for(task: str, seconds: float) -> str | None:
    """The row of `task`'s table for a budget of `seconds`: the largest budget at or under it (the smallest row
    for a budget under every row's), or None for a task with no table."""
    table = rows(task)
    fits = [name for minutes, name in table.items() if minutes * 60 <= seconds]
    return fits[-1] if fits else next(iter(table.values()), None)
