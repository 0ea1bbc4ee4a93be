"""The speedrun study's third part: what the preset and nanoGPT reach in 1, 3 and 10 minutes of training.

Each command's schedule is sized to end at the budget (its steps = the budget x the steps per training second
it ran at in the timed cells), so the learning rate has decayed when time is up, as a user with that much time
would set it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from tinyformer.experiments.gpt_studies import run_study
from tinyformer.experiments.nanogpt import nanogpt_curve, nanogpt_run
from tinyformer.experiments.report import figure, markdown_table
from tinyformer.experiments.runner import Cell
from tinyformer.experiments.speedrun_cells import PRESET, QUICK_SEEDS, SEEDS, Group, Point, curve, preset_overrides
from tinyformer.plots import plot_series

BUDGETS = {1: SEEDS, 3: SEEDS, 10: SEEDS[:1]}  # minutes of training -> seeds (3 seeds of ten minutes: 40 more)
QUICK_BUDGETS = {0.01: QUICK_SEEDS}
EVALS = 5  # evaluations in a budget run, the last at its end (and one at step 0)


def steps_per_second(g: Group) -> float:
    """Median over its runs of the steps per training second at each run's last evaluation."""
    return statistics.median(c[-1][2] / c[-1][0] for c in g.curves if c[-1][0] > 0)


def steps_in(seconds: float, per_second: float) -> int:
    """The steps that fill `seconds` of training at `per_second`: a multiple of EVALS, at least EVALS."""
    n = round(seconds * per_second)
    return max(EVALS, n - n % EVALS)


@dataclass
class Budget:
    """One command's runs sized to `minutes` of training: `steps` each, their curves."""

    minutes: float
    steps: int
    curves: list[list[Point]]

    @property
    def bests(self) -> list[float]:
        return [min(v for _, v, _ in c) for c in self.curves]

    @property
    def seconds(self) -> list[float]:
        return [c[-1][0] for c in self.curves]

    def text(self) -> list[str]:
        b, s = self.bests, self.seconds
        spread = f" ({min(b):.4f}-{max(b):.4f})" if len(b) > 1 else ""
        return [f"{self.steps:,}", f"{statistics.median(b):.4f}{spread}", f"{statistics.median(s):.0f}", str(len(b))]


def budget_row(b: Budget, nano: Budget | None) -> list[str]:
    return [f"{b.minutes:g}", *b.text(), *(nano.text() if nano else [])]


def preset_budget(minutes: float, seeds, per_second: float, folder: Path, quick: bool, data) -> Budget:
    """The preset's runs with its schedule sized to `minutes` at `per_second` steps, one per seed."""
    n = steps_in(minutes * 60, per_second)
    sized = [
        f"train.max_iters={n}",
        f"train.eval_interval={n // EVALS}",
        *([] if quick else ["train.eval_iters=100"]),
    ]
    about = f"configs/{PRESET}.toml sized to {minutes:g} minutes"
    cells = [
        Cell(f"{PRESET}-{minutes:g}min-seed{s}", [*preset_overrides(PRESET), *sized, f"train.seed={s}"], about)
        for s in seeds
    ]
    _, results = run_study("speedrun", cells, folder, quick, data)
    return Budget(minutes, n, [curve(r) for r in results])


def budget_runs(preset: Group, nano: Group | None, checkout, command, folder: Path, quick: bool, data):
    """The preset's and nanoGPT's runs sized to each budget of BUDGETS, from the speeds of their runs above."""
    budgets = QUICK_BUDGETS if quick else BUDGETS
    ours = [
        preset_budget(minutes, seeds, steps_per_second(preset), folder, quick, data)
        for minutes, seeds in budgets.items()
    ]
    theirs = []
    for minutes in budgets if nano is not None else ():
        n = steps_in(minutes * 60, steps_per_second(nano))
        sized = [f"--max_iters={n}", f"--lr_decay_iters={n}", f"--eval_interval={n // EVALS}"]
        log = nanogpt_run(checkout, [*command, *sized], folder / f"nanogpt-{minutes:g}min.log")
        theirs.append(Budget(minutes, n, [nanogpt_curve(log)]))
    return ours, theirs


def budget_part(ours: list[Budget], theirs: list[Budget], folder: Path) -> list[str]:
    """The report's section on the time budgets: a table and the curves of each budget's first run."""
    cols = ["minutes", "steps", "best val (median, range)", "training s", "seeds"]
    cols += ["nanoGPT steps", "nanoGPT best val", "nanoGPT training s", "nanoGPT runs"] if theirs else []
    rows = [budget_row(b, n) for b, n in zip(ours, theirs or [None] * len(ours), strict=True)]
    curves = {f"{PRESET}, {b.minutes:g} min": [(t, v) for t, v, _ in b.curves[0]] for b in ours}
    curves |= {f"nanoGPT, {b.minutes:g} min": [(t, v) for t, v, _ in b.curves[0]] for b in theirs}
    plot_series(curves, folder / "budgets.png", "training seconds", "val loss", "Each schedule sized to its budget")
    return [
        "## Best val loss in a time budget",
        "",
        f"configs/{PRESET}.toml{' and nanoGPT' if theirs else ''} with the schedule sized to end at each budget "
        "(steps = the budget x the steps per training second measured above; the learning rate has decayed when "
        "time is up). Training seconds leave evaluations out; a run a little over its budget ran slower than the "
        "runs that sized it. nanoGPT's seed is fixed, so one run per budget.",
        "",
        markdown_table(cols, rows),
        "",
        figure("budgets.png", "val loss against training seconds, each schedule sized to its budget"),
    ]


def budget_figures(ours: list[Budget], theirs: list[Budget]) -> dict:
    """figures.json's "budgets": per budget in minutes, each command's steps, best val losses and seconds."""
    return {
        f"{b.minutes:g}": {
            name: {"steps": x.steps, "bests": x.bests, "seconds": x.seconds}
            for name, x in ((PRESET, b), ("nanoGPT", n))
            if x is not None
        }
        for b, n in zip(ours, theirs or [None] * len(ours), strict=True)
    }
