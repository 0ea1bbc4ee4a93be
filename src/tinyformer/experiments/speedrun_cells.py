"""The speedrun study's cells and what their runs measure (`tinyformer.experiments.speedrun` tells the study).

A cell is one set of overrides of the CPU preset, trained with each seed until its first evaluation at val loss
<= TARGET. A run is read as its curve: (training seconds, val loss, step) at each evaluation; a cell's runs
over the seeds are a `Group`, which gives the time and steps to the target (the median over the seeds, a run
that never reached it counting as infinitely slow) and the best val loss within the first BUDGET_S seconds.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from tinyformer.config import load_toml
from tinyformer.experiments.gpt_studies import BASE_PRESET, run_study
from tinyformer.experiments.runner import Cell, CellResult

TARGET = 1.88  # val loss (nats per character) that every cell is timed to
BUDGET_S = 10.0  # seconds of training after which each run's best val loss is compared
SEEDS, QUICK_SEEDS = (1337, 1, 2), (1337,)
EVERY = ["train.eval_interval=100", "train.eval_iters=50"]  # the target is checked every 100 steps
STOP = f"train.stop_at=loss<={TARGET}"  # and a run ends at the first evaluation that meets it
PRESET = "gpt_speedrun"  # configs/gpt_speedrun.toml: the fastest combination found, timed as a cell of its own


def seeded(name: str, overrides: list[str], about: str, seeds: tuple[int, ...]) -> list[Cell]:
    return [Cell(f"{name}-seed{s}", [*overrides, STOP, f"train.seed={s}"], about) for s in seeds]


Point = tuple[float, float, int]  # (training seconds, val loss, step) at one evaluation


def first_reach(curve: list[Point], target: float) -> Point | None:
    """The first evaluation at or under `target` (None: never)."""
    return next((p for p in curve if p[1] <= target), None)


def best_within(curve: list[Point], seconds: float) -> float:
    """The lowest val loss among the evaluations made within `seconds` of training (step 0's at least)."""
    return min(v for t, v, _ in curve if t <= seconds or t == curve[0][0])


def curve(r: CellResult) -> list[Point]:
    return [(m["train_seconds"], m["loss"], m["step"]) for m in r.metrics if m.get("split") == "val" and "loss" in m]


def median_or_inf(xs: list[float | None]) -> float:
    """The median, a run that never reached the target counting as infinitely slow."""
    return statistics.median(x if x is not None else float("inf") for x in xs)


@dataclass
class Group:
    """One cell's runs over the seeds, and each run's median training speed (tokens per second)."""

    name: str
    about: str
    curves: list[list[Point]]
    speeds: list[float]

    @property
    def times(self) -> list[float | None]:
        return [p[0] if (p := first_reach(c, TARGET)) else None for c in self.curves]

    @property
    def steps(self) -> list[int | None]:
        return [p[2] if (p := first_reach(c, TARGET)) else None for c in self.curves]

    @property
    def median_time(self) -> float:
        return median_or_inf(self.times)

    @property
    def median_steps(self) -> float:
        return median_or_inf(self.steps)

    @property
    def bests(self) -> list[float]:
        return [best_within(c, BUDGET_S) for c in self.curves]


def speed(r: CellResult) -> float:
    return statistics.median(m["tokens_per_s"] for m in r.metrics if m.get("split") == "train" and "tokens_per_s" in m)


Spec = tuple[str, list[str], str]  # a cell: (name, overrides, what it is)


def train_groups(specs: list[Spec], seeds, out: Path, quick: bool, data) -> list[Group]:
    """Every cell of `specs` over `seeds`, seed by seed (each cell's first seed, then each one's second, ...), so
    a slow stretch of a shared machine lands on every cell a little rather than on one cell's every run."""
    cells = [c for s in seeds for name, overrides, about in specs for c in seeded(name, overrides, about, (s,))]
    _, results = run_study("speedrun", cells, out, quick, data, budget=EVERY)
    return [
        Group(name, about, [curve(r) for r in results[i :: len(specs)]], [speed(r) for r in results[i :: len(specs)]])
        for i, (name, _, about) in enumerate(specs)
    ]


def preset_overrides(name: str) -> list[str]:
    """Where a shipped preset differs from the study's base preset, as `section.key=value` overrides."""

    def literal(v) -> str:
        return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else repr(v)

    base, layer = load_toml(BASE_PRESET), load_toml(name)
    return [
        f"{sec}.{k}={literal(v)}"
        for sec, keys in layer.items()
        if isinstance(keys, dict)
        for k, v in keys.items()
        if base.get(sec, {}).get(k) != v
    ]


def preset_spec() -> Spec:
    """The shipped preset as a cell: where it differs from the base preset."""
    return PRESET, preset_overrides(PRESET), f"configs/{PRESET}.toml"
