"""Train for the time you have: what `tinyformer train gpt --time T` reaches in 1, 3, 10 and 30 minutes, against
nanoGPT's tuned CPU command given the same time.

1. The search. At each budget, a few shapes (`SHAPES`: width, depth, heads, dropout, batch, block, learning rate),
   each a set of overrides on `configs/gpt_speedrun.toml`, trained once (seed 1337) with `train.time_budget` set
   to the budget: the run sizes its own schedule to end on time (`tinyformer.train.budget`), so a shape is judged
   by what it reaches in that time, its evaluations included.
2. The table. The best shape of each budget is the budget's row, a shipped preset `gpt_time_<minutes>m.toml`,
   which `--time` trains when no `--config` is given (the largest row at or under the budget asked).
3. The match. `--time` as a user runs it (no config: the row) with 3 seeds, against nanoGPT's command with its
   steps sized to the budget from its own speed on this machine (a 200-iteration probe before the first budget,
   then the median iteration of its run before), in turn: ours, nanoGPT, ours, ours, budget by budget. The
   search's run of the row's own shape is the row's seed 1337: the same config, copied (`runner.same_run`), not
   trained again. nanoGPT's seed is fixed, so one run per budget; its training seconds leave its evaluations
   out (it is given the whole budget to train), ours count them.

    tinyformer experiment budgets [--quick] [--out DIR] [--nanogpt DIR] [--minutes 10[,30]]

Hours on 2 cores: each budget takes (its shapes + 2 seeds + nanoGPT) times its minutes, about 4 hours for
1 + 3 + 10 + 30 minutes. A finished run is reused, so an interrupted study continues where it stopped (a
budget's match is best made in one sitting: its runs are timed side by side). `--minutes` makes only those
budgets (the guide makes each in a folder of its own, a sitting at a time). `--quick`: seconds-long budgets
at a toy size.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from tinyformer.config import load_toml
from tinyformer.device import machine
from tinyformer.errors import UserError
from tinyformer.experiments.gpt_studies import QUICK
from tinyformer.experiments.nanogpt import (
    DATASET,
    ITER,
    NANOGPT_ARGS,
    NANOGPT_QUICK,
    NANOGPT_TOKENS,
    nanogpt_commit,
    nanogpt_curve,
    nanogpt_data,
    nanogpt_run,
    nanogpt_speed,
)
from tinyformer.experiments.report import figure, markdown_table, study_folder, write_report
from tinyformer.experiments.runner import Cell, CellResult, run_grid
from tinyformer.experiments.speedrun_cells import Point, curve
from tinyformer.files import write_text
from tinyformer.models import count_parameters
from tinyformer.plots import plot_series
from tinyformer.train import budget as planning

BASE = "gpt_speedrun"  # every searched shape is this preset with its overrides
SEEDS, QUICK_SEEDS = (1337, 1, 2), (1337,)


@dataclass(frozen=True)
class Shape:
    name: str
    overrides: tuple[str, ...]
    about: str


EVALS = ("train.eval_interval=80", "train.eval_iters=50")  # 10 evaluations planned (fewer where they cost > 10%)
SHAPES = {
    s.name: s
    for s in (
        Shape("speedrun", EVALS, "configs/gpt_speedrun.toml as it is: 4 layers x 128, block 64, batch 16, no dropout"),
        Shape("batch32", (*EVALS, "train.batch_size=32", "train.lr=4e-3"), "batch 32, peak rate 4e-3"),
        Shape("block128", (*EVALS, "model.block_size=128", "model.dropout=0.1"), "block 128, dropout 0.1"),
        Shape(
            "batch32-drop",
            (*EVALS, "train.batch_size=32", "train.lr=4e-3", "model.dropout=0.1"),
            "batch 32, peak rate 4e-3, dropout 0.1",
        ),
        Shape(
            "b32-block128",
            (*EVALS, "train.batch_size=32", "train.lr=4e-3", "model.block_size=128", "model.dropout=0.1"),
            "batch 32, block 128, peak rate 4e-3, dropout 0.1",
        ),
        Shape(
            "6x192",
            (
                *EVALS,
                "model.n_layer=6",
                "model.n_embd=192",
                "model.n_head=6",
                "model.block_size=128",
                "model.dropout=0.1",
                "train.lr=2e-3",
            ),
            "6 layers x 192 (6 heads), block 128, dropout 0.1, peak rate 2e-3",
        ),
        Shape(
            "4x256",
            (
                *EVALS,
                "model.n_embd=256",
                "model.n_head=8",
                "model.block_size=128",
                "model.dropout=0.1",
                "train.lr=2e-3",
            ),
            "4 layers x 256 (8 heads), block 128, dropout 0.1, peak rate 2e-3",
        ),
        Shape(
            "4x256-b32",
            (
                *EVALS,
                "model.n_embd=256",
                "model.n_head=8",
                "model.block_size=128",
                "model.dropout=0.1",
                "train.batch_size=32",
                "train.lr=2e-3",
            ),
            "4 layers x 256 (8 heads), batch 32, block 128, dropout 0.1, peak rate 2e-3",
        ),
    )
}
SEARCH = {  # minutes -> the shapes tried at that budget (what a budget's time can train to a decayed rate)
    1: ("speedrun", "batch32", "block128"),
    3: ("speedrun", "batch32", "block128", "6x192"),
    10: ("block128", "batch32-drop", "4x256", "b32-block128"),
    30: ("b32-block128", "4x256-b32"),  # the 10 minutes' best, and the wider model with its batch and block
}
QUICK_SEARCH = {0.05: ("speedrun", "batch32"), 0.1: ("speedrun", "block128")}


def minutes_name(minutes: float) -> str:
    return f"{minutes:g}min"


# ---- what the runs measured ---------------------------------------------------------------------------------
def spent(r: CellResult) -> float:
    """Training and evaluation seconds of a --time run: what its budget bounds."""
    plan = r.run.state.budget or {}
    return r.run.state.train_seconds + plan.get("eval_seconds", 0.0)


@dataclass
class Tried:
    """One searched shape at one budget."""

    minutes: float
    shape: Shape
    result: CellResult

    @property
    def best(self) -> float:
        return min(v for _, v, _ in curve(self.result))


def search(minutes: float, names, folder: Path, extra: list[str]) -> list[Tried]:
    cells = [
        Cell(
            f"search-{minutes_name(minutes)}-{n}",
            [*SHAPES[n].overrides, f"train.time_budget={minutes * 60:g}"],
            SHAPES[n].about,
        )
        for n in names
    ]
    results = run_grid("gpt", [load_toml(BASE)], extra, cells, folder)
    return [Tried(minutes, SHAPES[n], r) for n, r in zip(names, results, strict=True)]


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


def ours(minutes: float, seed: int, folder: Path, extra: list[str]) -> CellResult:
    """`tinyformer train gpt --time <minutes>m --set train.seed=<seed>`: no config, so the table's row."""
    cell = Cell(
        f"time-{minutes_name(minutes)}-seed{seed}",
        [f"train.time_budget={minutes * 60:g}", f"train.seed={seed}"],
        "--time, the table's row",
    )
    return run_grid("gpt", [], extra, [cell], folder)[0]


PROBE = 200  # iterations of nanoGPT's command timed before its first budget


def nanogpt_step_s(checkout: Path, command: list[str], folder: Path) -> float:
    """nanoGPT's seconds per iteration on this machine: the median iteration of a short run of its command."""
    probe = [f"--max_iters={PROBE}", f"--lr_decay_iters={PROBE}", "--eval_interval=100000", "--eval_iters=1"]
    log = nanogpt_run(checkout, [*command, *probe], folder / "nanogpt-speed.log")
    return NANOGPT_TOKENS / nanogpt_speed(log)


def theirs(checkout: Path, command: list[str], minutes: float, iter_s: float, folder: Path) -> tuple[Side, float]:
    """nanoGPT's command with its steps sized to `minutes` at `iter_s` seconds an iteration -> its run, and the
    seconds an iteration it ran at (what sizes the next budget: the latest speed measured in this sitting)."""
    n = max(10, round(minutes * 60 / iter_s))
    sized = [f"--max_iters={n}", f"--lr_decay_iters={n}", f"--eval_interval={max(1, n // 5)}"]
    log = nanogpt_run(checkout, [*command, *sized], folder / f"nanogpt-{minutes_name(minutes)}.log")
    c = nanogpt_curve(log)
    steps = max(int(m[1]) for m in map(ITER.match, log.splitlines()) if m)  # as its log ran (a reused log too)
    return Side(minutes, [c], [c[-1][0]], [steps]), NANOGPT_TOKENS / nanogpt_speed(log)


# ---- the study ----------------------------------------------------------------------------------------------
def asked(minutes, quick: bool) -> dict[float, tuple[str, ...]]:
    """The budgets to make, each with its shapes: all of them, or those `--minutes` lists ("10", "1,3", 10 or
    [1, 3])."""
    known = QUICK_SEARCH if quick else SEARCH
    if minutes is None:
        return dict(known)
    listed = (
        minutes.split(",") if isinstance(minutes, str) else minutes if isinstance(minutes, list | tuple) else [minutes]
    )
    try:
        wanted = [float(m) for m in listed]
    except (TypeError, ValueError):
        wanted = []
    if not wanted or any(m not in known for m in wanted):
        said = ", ".join(f"{m:g}" for m in known)
        raise UserError(f"--minutes {minutes!r}: give budgets of this study{' at --quick' if quick else ''}: {said}")
    return {m: known[m] for m in wanted}


def run(
    out: Path | None = None,
    quick: bool = False,
    data: str | None = None,
    nanogpt: str | None = None,
    minutes: str | None = None,
) -> Path:
    from tinyformer.data.tinyshakespeare import read_text, resolve_path

    wanted = asked(minutes, quick)  # checked before anything starts, like the checkout below
    folder = study_folder("budgets", out, quick)
    extra = ([f"data.path={json.dumps(data)}"] if data else []) + (
        [q for q in QUICK if not q.startswith(("train.max_iters", "train.eval_"))] if quick else []  # the rows say
    )
    checkout = Path(nanogpt).expanduser() if nanogpt else None
    command: list[str] = []
    if checkout is not None:  # checked before hours of training
        if not (checkout / "train.py").is_file() or not (checkout / "model.py").is_file():
            raise UserError(f"--nanogpt {nanogpt!r}: no nanoGPT checkout there (train.py and model.py)")
        nanogpt_data(checkout, read_text(resolve_path(data)))
        command = ["python", "train.py", *NANOGPT_ARGS, *(NANOGPT_QUICK if quick else []), f"--dataset={DATASET}"]
        iter_s = nanogpt_step_s(checkout, command, folder)
    seeds = QUICK_SEEDS if quick else SEEDS
    tried, mine, nano = {}, {}, {}
    for m, names in (QUICK_SEARCH if quick else SEARCH).items():  # a budget at a time: its runs in one sitting
        if m not in wanted and not (folder / f"sitting-{minutes_name(m)}.json").is_file():
            continue  # the report tells every budget finished in this folder: an earlier --minutes's, reused
        tried[m] = search(m, names, folder, extra)
        runs = [ours(m, seeds[0], folder, extra)]  # the search's run of the row's shape, when it is the same
        if checkout is not None:
            nano[m], iter_s = theirs(checkout, command, m, iter_s, folder)
        runs += [ours(m, s, folder, extra) for s in seeds[1:]]
        mine[m] = (planning.row_for("gpt", m * 60), runs, sitting(folder, m))
    return report(folder, quick, tried, mine, nano, checkout, command)


def sitting(folder: Path, minutes: float) -> str:
    """Where and when a budget's runs were made: recorded when its last run is done, kept when they are reused
    (the study takes hours: a budget made in another sitting says so)."""
    path = folder / f"sitting-{minutes_name(minutes)}.json"
    if not path.is_file():
        write_text(path, json.dumps({"cpu": machine()["cpu"], "date": time.strftime("%Y-%m-%d")}) + "\n")
    made = json.loads(path.read_text())
    return f"{made['cpu']}, {made['date']}"


def side_of(minutes: float, runs: list[CellResult]) -> Side:
    return Side(minutes, [curve(r) for r in runs], [spent(r) for r in runs], [r.run.state.step for r in runs])


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


def report(folder: Path, quick: bool, tried, mine, nano, checkout, command) -> Path:
    rows = {m: row for m, (row, _, _) in mine.items()}
    sides = {m: side_of(m, runs) for m, (_, runs, _) in mine.items()}
    sittings = {m: made for m, (_, _, made) in mine.items()}
    seeds = QUICK_SEEDS if quick else SEEDS
    line = len(sides) > 1  # best val against the budget: a line needs two budgets
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
    commit = nanogpt_commit(checkout) if checkout else ""
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
