"""The budgets study's report, read from its finished runs: what each run spent and reached (a searched shape's
`Tried`, a command's `Side` at a budget), the match's table (`--time` as a user runs it against nanoGPT's
command), the search's table, the two figures and figures.json. The search and the match, and how they run,
are `budgets.py`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from tinyformer.experiments.nanogpt import nanogpt_commit
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import CellResult
from tinyformer.experiments.speedrun_cells import Point, curve
from tinyformer.files import write_text
from tinyformer.models import count_parameters
from tinyformer.plots import plot_series

BASE = "gpt_speedrun"  # every searched shape is this preset with its overrides
SEEDS, QUICK_SEEDS = (1337, 1, 2), (1337,)
PROBE = 200  # iterations of nanoGPT's command timed before its first budget


@dataclass(frozen=True)
class Shape:
    name: str
    overrides: tuple[str, ...]
    about: str


# ---- what the runs measured ---------------------------------------------------------------------------------
def spent(r: CellResult) -> float:
    """Training and evaluation seconds of a --time run: what its budget bounds."""
    plan = r.run.state.budget
    return r.run.state.train_seconds + (plan.eval_seconds if plan is not None else 0.0)


@dataclass
class Tried:
    """One searched shape at one budget."""

    minutes: float
    shape: Shape
    result: CellResult

    @property
    def best(self) -> float:
        return min(v for _, v, _ in curve(self.result))


@dataclass
class Side:
    """One command's runs at one budget: each run's curve and its spent seconds against the budget."""

    minutes: float
    curves: list[list[Point]]
    seconds: list[float]  # training (+ evaluation, ours) seconds of each run
    steps: list[int]

    @property
    def bests(self) -> list[float]:
        return [min(v for _, v, _ in c) for c in self.curves]

    def best_text(self) -> str:
        b = self.bests
        return f"{statistics.median(b):.4f}" + (f" ({min(b):.4f}-{max(b):.4f})" if len(b) > 1 else "")

    def ends_text(self) -> str:
        """How close each run ended to its budget, in %."""
        return ", ".join(f"{100 * (s / (self.minutes * 60) - 1):+.1f}%" for s in self.seconds)


def side_of(minutes: float, runs: list[CellResult]) -> Side:
    return Side(minutes, [curve(r) for r in runs], [spent(r) for r in runs], [r.run.state.step for r in runs])


# ---- the report ---------------------------------------------------------------------------------------------
def search_table(tried: dict[float, list[Tried]]) -> str:
    """Every searched shape, budget by budget, best first."""
    cols = ["cell", "what changes", "parameters", "steps", "best val", "spent s"]
    rows = [
        [
            t.result.cell.name,
            t.shape.about,
            f"{count_parameters(t.result.run.model):,}",
            f"{t.result.run.state.step:,}",
            f"{t.best:.4f}",
            f"{spent(t.result):.0f}",
        ]
        for ts in tried.values()
        for t in sorted(ts, key=lambda t: t.best)
    ]
    return markdown_table(cols, rows)


def match_table(rows: dict[float, str], sides: dict[float, Side], nano: dict[float, Side]) -> str:
    """Per budget: the row, our best val (median, range) and spent seconds, nanoGPT's beside them."""
    cols = ["minutes", "row (preset)", "best val (median, range)", "spent s (median)", "ended vs budget"]
    cols += ["nanoGPT best val", "nanoGPT training s", "nanoGPT steps", "ours ahead"] if nano else []
    lines = []
    for m, s in sides.items():
        ours_line = [f"{m:g}", rows[m] or "-", s.best_text(), f"{statistics.median(s.seconds):.0f}", s.ends_text()]
        if (n := nano.get(m)) is not None:
            ahead = "yes" if statistics.median(s.bests) < n.bests[0] else "no"
            ours_line += [n.best_text(), f"{n.seconds[0]:.0f}", f"{n.steps[0]:,}", ahead]
        lines.append(ours_line)
    return markdown_table(cols, lines)


def plot_match(folder: Path, sides: dict[float, Side], nano: dict[float, Side], seeds, line: bool) -> None:
    """best_vs_budget.png (where `line`: two budgets or more), ours and nanoGPT's; val_vs_time.png, every run."""
    if line:
        lines = {
            f"tinyformer train gpt --time (median of {len(seeds)} seeds)": [
                (m, statistics.median(s.bests)) for m, s in sides.items()
            ]
        }
        lines |= (
            {"nanoGPT's tuned CPU command, its steps sized to the budget": [(m, n.bests[0]) for m, n in nano.items()]}
            if nano
            else {}
        )
        title = "Best val loss in the time you have (2 cores)"
        plot_series(lines, folder / "best_vs_budget.png", "budget (minutes)", "best val loss", title)
    runs = {
        f"--time {m:g}m, seed {seed}": [(t, v) for t, v, _ in c]
        for m, s in sides.items()
        for seed, c in zip(seeds, s.curves, strict=True)
    }
    runs |= {f"nanoGPT, {m:g} min": [(t, v) for t, v, _ in n.curves[0]] for m, n in nano.items()}
    plot_series(
        runs,
        folder / "val_vs_time.png",
        "training seconds (evaluations left out)",
        "val loss",
        "Each run sized to its budget",
    )


def figures_of(rows, sittings, sides, tried, nano, commit: str, command: list[str]) -> dict:
    """figures.json: each budget's row, sitting and sides (their curves left out), each searched shape's best."""
    figures = {
        "budgets": {
            f"{m:g}": {"row": rows[m], "made": sittings[m], "ours": vars(sides[m]) | {"bests": sides[m].bests}}
            | ({"nanoGPT": vars(nano[m]) | {"bests": nano[m].bests}} if m in nano else {})
            for m in sides
        },
        "search": {
            f"{m:g}": {t.shape.name: {"best": t.best, "steps": t.result.run.state.step} for t in ts}
            for m, ts in tried.items()
        },
        "nanogpt": {"commit": commit, "command": " ".join(command)},
    }
    for f in figures["budgets"].values():
        for side in ("ours", "nanoGPT"):
            f.get(side, {}).pop("curves", None)
    return figures


def report(folder: Path, quick: bool, tried, mine, nano, checkout, command) -> Path:
    rows = {m: row for m, (row, _, _) in mine.items()}
    sides = {m: side_of(m, runs) for m, (_, runs, _) in mine.items()}
    sittings = {m: made for m, (_, _, made) in mine.items()}
    seeds = QUICK_SEEDS if quick else SEEDS
    line = len(sides) > 1  # best val against the budget: a line needs two budgets
    plot_match(folder, sides, nano, seeds, line)
    commit = nanogpt_commit(checkout) if checkout else ""
    figures = figures_of(rows, sittings, sides, tried, nano, commit, command)
    about_nano = (
        f"nanoGPT at commit `{commit}`, run from its checkout as `{' '.join(command)}`, its steps sized to each "
        f"budget from its own speed here (a {PROBE}-iteration run before the first budget, then its run before); "
        "its training seconds leave its evaluations out."
        if nano
        else "nanoGPT not run (`--nanogpt DIR`)."
    )
    table, searched = match_table(rows, sides, nano), search_table(tried)
    write_text(folder / "table.md", table + "\n")  # the guide quotes both as they are
    write_text(folder / "search.md", searched + "\n")
    body = [
        "## Best val loss in the time you have",
        "",
        "`tinyformer train gpt --time <minutes>m` as a user runs it (no config: the budget table's row), seeds "
        f"{', '.join(map(str, seeds))}; spent seconds are training and evaluation together, what the budget "
        "bounds. " + about_nano,
        "",
        table,
        "",
        "Each budget's runs were made side by side in one sitting: "
        + "; ".join(f"{m:g} min on {made}" for m, made in sittings.items())
        + ".",
        "",
        *([figure("best_vs_budget.png", "best val loss against the budget, ours and nanoGPT's"), ""] if line else []),
        figure("val_vs_time.png", "val loss against training seconds, every run of the match"),
        "",
        "## The search: the shapes tried at each budget, seed 1337, best first",
        "",
        f"Each is configs/{BASE}.toml with its overrides, trained with train.time_budget set to the budget; the best "
        "of each budget is its row (configs/gpt_time_<minutes>m.toml).",
        "",
        searched,
    ]
    return write_report(folder, "Train for the time you have", quick, body, figures=figures)
