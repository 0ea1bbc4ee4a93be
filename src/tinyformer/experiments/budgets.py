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

This module is the search and the match and how they run; the report is read from the runs by
`budgets_report.py`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tinyformer.config import load_toml
from tinyformer.device import machine
from tinyformer.errors import UserError
from tinyformer.experiments.budgets_report import BASE, PROBE, QUICK_SEEDS, SEEDS, Shape, Side, Tried, report
from tinyformer.experiments.gpt_studies import QUICK
from tinyformer.experiments.nanogpt import (
    DATASET,
    ITER,
    NANOGPT_ARGS,
    NANOGPT_QUICK,
    NANOGPT_TOKENS,
    nanogpt_curve,
    nanogpt_data,
    nanogpt_run,
    nanogpt_speed,
)
from tinyformer.experiments.report import study_folder
from tinyformer.experiments.runner import Cell, CellResult, run_grid
from tinyformer.files import read_json, write_text
from tinyformer.train import budget as planning

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


# ---- the runs: the search's shapes, ours, nanoGPT's ---------------------------------------------------------
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


def ours(minutes: float, seed: int, folder: Path, extra: list[str]) -> CellResult:
    """`tinyformer train gpt --time <minutes>m --set train.seed=<seed>`: no config, so the table's row."""
    cell = Cell(
        f"time-{minutes_name(minutes)}-seed{seed}",
        [f"train.time_budget={minutes * 60:g}", f"train.seed={seed}"],
        "--time, the table's row",
    )
    return run_grid("gpt", [], extra, [cell], folder)[0]


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
    checkout = Path(nanogpt).expanduser() if nanogpt else None
    if checkout is not None and not ((checkout / "train.py").is_file() and (checkout / "model.py").is_file()):
        raise UserError(f"--nanogpt {nanogpt!r}: no nanoGPT checkout there (train.py and model.py)")
    folder = study_folder("budgets", out, quick)
    sittings_read(folder, quick)  # a corrupt record is said now, not after hours of training
    extra = ([f"data.path={json.dumps(data)}"] if data else []) + (
        [q for q in QUICK if not q.startswith(("train.max_iters", "train.eval_"))] if quick else []  # the rows say
    )
    command: list[str] = []
    if checkout is not None:  # checked before hours of training
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
    made = read_sitting(path)
    return f"{made['cpu']}, {made['date']}"


def sittings_read(folder: Path, quick: bool) -> None:
    """Every sitting recorded in the study's folder, read before anything trains (`read_sitting`)."""
    for m in QUICK_SEARCH if quick else SEARCH:
        path = folder / f"sitting-{minutes_name(m)}.json"
        if path.exists() or path.is_symlink():
            read_sitting(path)


def read_sitting(path: Path) -> dict:
    """A budget's sitting as `sitting` records it, {"cpu": text, "date": text}; another file is a UserError."""
    made = read_json(path, max_bytes=2**16)
    if not (isinstance(made, dict) and all(isinstance(made.get(k), str) for k in ("cpu", "date"))):
        raise UserError(
            f'{path} is not a sitting record ({{"cpu": text, "date": text}}): delete it, and the budget\'s runs, '
            "reused, are recorded as made in this sitting"
        )
    return made
