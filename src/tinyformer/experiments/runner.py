"""One experiment runner for every study: a named grid of config overrides.

Each cell is a run folder under the experiment's folder. A cell whose run
finished is reused as it is, one that was interrupted is resumed, a missing one
is trained with the same code path as `tinyformer train`. The study then reads
the run folders (config, metrics.jsonl, weights) and writes its report.
"""

from __future__ import annotations

import json
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path

from tinyformer import config as cfg
from tinyformer import interrupt
from tinyformer.files import make_dir
from tinyformer.runfolder import CONFIG, LOCK, METRICS, STATE, is_run, read_metrics, read_state, saved_config
from tinyformer.runs import Run, load_run, prepare_run, train_run
from tinyformer.timeplan import finished as finished_at


@dataclass
class Cell:
    name: str  # folder name and label in tables and plots
    overrides: list[str] = field(default_factory=list)  # `section.key=value` on top of the base config
    about: str = ""  # one line for the report


@dataclass
class CellResult:
    cell: Cell
    run: Run  # config, tokenizer, final (latest) weights, trainer state
    metrics: list[dict]  # metrics.jsonl rows
    reused: bool  # True when the run folder already held the finished run

    def series(self, split: str, key: str) -> list[tuple[int, float]]:
        return [(r["step"], r[key]) for r in self.metrics if r.get("split") == split and key in r]


def finished(run_dir: Path) -> bool:
    if not (run_dir / STATE).is_file():
        return False
    return finished_at(read_state(run_dir / STATE), saved_config(run_dir)["train"]["max_iters"])  # --time: its plan's


def run_cell(task: str, base: list[dict], extra: list[str], cell: Cell, folder: Path) -> CellResult:
    run_dir = folder / cell.name
    reused = finished(run_dir)
    if not reused:
        resume = run_dir if is_run(run_dir) else None  # a checkpoint, or a save a kill cut short
        overrides = [] if resume else [*extra, *cell.overrides]
        config, task_cls, run_dir, tokenizer = prepare_run(task, base, overrides, run_dir, resume)
        twin = None if resume else same_run(config, folder.parent, run_dir)
        if twin is not None:  # another study trained this very config: its run is this cell's
            print(f"== {cell.name}: the same config as {twin} (finished): copied, not trained again")
            shutil.copytree(twin, run_dir, ignore=shutil.ignore_patterns(LOCK, "*.tmp*"))
            return run_cell(task, base, extra, cell, folder)
        print(f"== {cell.name}: {cell.about or ' '.join(cell.overrides) or 'the base config'}")
        result, _ = train_run(config, task_cls, run_dir, tokenizer, resume=bool(resume))
        if result.status != "finished":  # an interrupted cell stops the experiment; rerunning resumes it
            raise interrupt.Stopped(result.signal or signal.SIGINT)
    rows = read_metrics(run_dir / METRICS)
    return CellResult(cell, load_run(run_dir, weights="latest"), rows, reused)  # the model the curves end at


DERIVED = (("model", "vocab_size"), ("model", "labels"))  # filled in by the task from its data when unset
LABELS = (("train", "time_row"),)  # which preset a config came from: the same values train the same run


def same_run(config, studies: Path, run_dir: Path) -> Path | None:
    """A finished cell of any study under `studies` whose saved config is `config` (the keys a task fills from
    its data aside, when `config` leaves them unset, and the labels), or None."""
    want = json.loads(json.dumps(cfg.to_dict(config)))
    for section, key in DERIVED:
        if not want.get(section, {}).get(key, True):
            del want[section][key]
    for section, key in LABELS:
        want.get(section, {}).pop(key, None)
    for saved in sorted(studies.glob(f"*/*/{CONFIG}")):
        other, have = saved.parent, saved_config(saved.parent)
        for section, key in LABELS:
            have.get(section, {}).pop(key, None)
        for section, key in DERIVED:
            if key not in want.get(section, {}) and isinstance(have.get(section), dict):
                have[section].pop(key, None)
        if have == want and other.resolve() != run_dir.resolve() and finished(other):
            return other
    return None


def run_grid(task: str, base: list[dict], extra: list[str], cells: list[Cell], folder: Path) -> list[CellResult]:
    """Train or reuse every cell, in order; `extra` overrides (e.g. a --quick size) apply to all."""
    make_dir(folder)
    return [run_cell(task, base, extra, cell, folder) for cell in cells]
