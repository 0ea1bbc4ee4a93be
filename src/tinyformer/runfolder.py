"""The run folder: its file names, the readers of what a run wrote, and the lock of the process training into it.

A ground-floor module: anything may read a run (tasks that start from one, the playground, the studies, the
lab), so this imports nothing of the trainer, the tasks or the models. Writing a checkpoint is
`tinyformer.train.checkpoint`'s alone.

- **Names**: every file a run writes, and the temp name each is written under (`temp`).
- **Readers**: `is_run`, `never_saved`, `saved_config` (config.json as saved), `read_metrics` (metrics.jsonl's
  rows), `read_state` (trainer_state.pt as a `TrainerState`: optimizer, RNG and step state through
  `torch.load(weights_only=True)`, so no pickle code runs), and `plot_run` (loss.png drawn from the metrics).
  A missing, corrupt or mismatched file is a `UserError` naming it.
- **The lock**: one process at a time trains into a run folder. `run_lock` holds an exclusive lock (flock) on
  RUN/.lock for the whole run; the kernel releases it when the process ends, however it ends, so a stale lock
  file never blocks anyone. `lock_holder` names the process holding it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import pickle
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tinyformer.device import BackendChoice
from tinyformer.errors import UserError, first_line
from tinyformer.files import make_dir, parse_json, read_json, reason
from tinyformer.timeplan import Plan

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.safetensors"  # latest weights
BEST = "best.safetensors"  # weights at the best validation loss
STATE = "trainer_state.pt"  # optimizer, RNG states, step, best val loss: a `TrainerState`
METRICS = "metrics.jsonl"  # one row per logged step or evaluation (`tinyformer.train.metrics`)
LOSS_PNG = "loss.png"
SAMPLE = "sample.txt"
LOCK = ".lock"  # held by the process training into the folder
COMMIT = ".commit.json"  # a save complete in its temp files: whoever takes the lock next finishes it
PARTS = (WEIGHTS, STATE, BEST)  # what one checkpoint may write
WRITTEN = (*PARTS, COMMIT, METRICS, LOSS_PNG, CONFIG, TOKENIZER, SAMPLE)  # every file a run writes


def temp(run_dir: Path, name: str) -> Path:
    """The temp file a run writes `name` into before renaming it into place."""
    return Path(run_dir) / f".{name}.tmp"


def is_run(folder: str | Path) -> bool:
    """A tinyformer run folder with a checkpoint (what `train` writes), not a Hugging Face folder or an export."""
    return (Path(folder) / STATE).is_file() or (Path(folder) / COMMIT).is_file()


def never_saved(folder: str | Path) -> bool:
    """A tinyformer run folder whose run stopped before its first checkpoint was complete (nothing to resume),
    and that no process is training into now. A Hugging Face folder (no "task" in config.json) is not one."""
    p = Path(folder)
    if not (p / TOKENIZER).is_file() or is_run(p) or any((p / n).exists() for n in (WEIGHTS, BEST)):
        return False
    try:
        config = saved_config(p)
    except UserError:
        return False
    return isinstance(config, dict) and "task" in config and "train" in config and lock_holder(p) is None


def weights_file(run_dir: str | Path, choice: str = "run") -> Path:
    """The weights a command reads, the one rule: the run's own choice, `train.weights` in config.json (the
    course's recipes: "latest", the last step's, as the course samples and draws its final model; the presets and
    every other run: "best", the best evaluation's), unless the command names "best" or "latest" (`--checkpoint`).
    "best" falls back to the latest weights where no evaluation has improved on the untrained model yet."""
    p = Path(run_dir)
    if choice == "run":
        config = saved_config(p)
        train = config.get("train") if isinstance(config, dict) else None
        choice = train.get("weights", "best") if isinstance(train, dict) else "best"
    if choice not in ("best", "latest"):
        raise UserError(f"weights={choice!r} is not one of best, latest (or run: the run's train.weights)")
    return p / BEST if choice == "best" and (p / BEST).is_file() else p / WEIGHTS


def saved_config(run_dir: str | Path) -> Any:
    """RUN/config.json as saved (bounded size and depth: `tinyformer.files.read_json`); `runs.read_config`
    checks it is a run config and migrates old names."""
    return read_json(Path(run_dir) / CONFIG)


# ---- metrics.jsonl -------------------------------------------------------------------------------------------
MAX_METRICS_BYTES = 512 * 2**20  # a row is ~100 bytes: millions of steps


def read_metrics(path: Path) -> list[dict]:
    """The rows of metrics.jsonl (none if it does not exist); an unreadable line (a kill mid-append, or not a
    row at all) is skipped, with a note. A file too large to be one is a UserError naming it."""
    rows, bad = metrics_rows(path)
    if bad:
        print(f"note: skipped {bad} unreadable line(s) of {path}", file=sys.stderr)
    return rows


def metrics_rows(path: Path) -> tuple[list[dict], int]:
    """(the readable rows of metrics.jsonl, how many lines were not), quietly."""
    if not Path(path).is_file():
        return [], 0
    if Path(path).stat().st_size > MAX_METRICS_BYTES:
        raise UserError(f"{path} is larger than {MAX_METRICS_BYTES // 2**20} MB; no run writes that many rows")
    rows, bad = [], 0
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = parse_json(line, str(path)) if line.strip() else None
        except UserError:
            row = None
            bad += 1
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
        elif row is not None:
            bad += 1
    return rows, bad


def plot_run(run_dir: Path) -> Path:
    """Draw RUN/loss.png from RUN/metrics.jsonl -> its path (at the end of each fit, and by `info --plot`)."""
    from tinyformer.plots import plot_losses

    png = Path(run_dir) / LOSS_PNG
    plot_losses(read_metrics(Path(run_dir) / METRICS), png, Path(run_dir).resolve().name)
    return png


# ---- trainer_state.pt ----------------------------------------------------------------------------------------
KINDS = {  # trainer_state.pt's keys -> the types each accepts (never a bool)
    "step": (int,),
    "best_val": (float, int),
    "train_seconds": (float, int),
    "tokens_seen": (int,),
    "optimizer": (dict,),
    "rng": (dict,),
    "precision": (str,),
    "processes": (int,),
    "reached": (str,),
    "grad_scaler": (dict,),
}


@dataclass
class TrainerState:
    """Where a run stands and all an exact resume restores: what `Trainer.save` writes to trainer_state.pt,
    what a resume continues from and what `Run.state` is. The first six fields every state has; the others came
    later, so a folder written before them loads with their defaults. `attention`: a usable record or None (a
    broken one is measured again on resume, as a run without one); `budget`: a plan checked field by field."""

    step: int  # optimizer steps done
    best_val: float  # lowest validation score so far: the task's `select` key (inf before any)
    train_seconds: float  # time spent in training steps, evaluations excluded
    tokens_seen: int  # tokens trained on, every process's
    optimizer: dict  # the optimizer's state_dict ({} in `Run.state`: loading a run keeps none)
    rng: dict  # "torch", "data" (the batches' generator) and, on CUDA, "cuda": each generator's state
    precision: str | None = None  # what train.precision resolved to ("fp32", "bf16", "fp16"); None: not recorded
    processes: int = 1  # the global batch is processes x batch_size (a resume says if it changes)
    reached: str = ""  # "train.stop_at ... met at step N": the run finished before max_iters
    attention: BackendChoice | None = None  # the attention backend and why (info, resume and `load_run` use it)
    grad_scaler: dict | None = None  # fp16's gradient scaler
    budget: Plan | None = None  # train.time_budget: the schedule sized to it (`tinyformer.timeplan.Plan`)

    def __post_init__(self) -> None:
        fault = _fault({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in KINDS})
        for name, kind in (("attention", BackendChoice), ("budget", Plan)):  # in the file, dicts `from_dict` reads
            if fault is None and not isinstance(getattr(self, name), (kind, type(None))):
                fault = f"{name!r} is not a {kind.__name__}"
        if fault is not None:
            raise TypeError(f"TrainerState: {fault}")

    @classmethod
    def from_dict(cls, data: Any, where: str | Path) -> TrainerState:
        """The state in trainer_state.pt's dict; one of another shape is a UserError naming `where` (the file)
        and the bad key. Keys this version does not know are left out."""
        if not isinstance(data, dict):
            raise UserError(f"{where} does not hold a trainer state (a {type(data).__name__}, not a dict)")
        fault = _fault(data)
        if fault is not None:
            raise UserError(f"{where} does not hold a trainer state: {fault}")
        known = {k: v for k, v in data.items() if k in KINDS}
        plan = Plan.from_dict(data["budget"], where) if "budget" in data else None
        return cls(**known, attention=BackendChoice.from_record(data.get("attention")), budget=plan)

    def to_dict(self) -> dict:
        """trainer_state.pt's dict: every field in order, an optional one left out while it holds nothing."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        kept = {k: v for k, v in values.items() if k in REQUIRED or not (v is None or v == "")}
        return {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in kept.items()}


REQUIRED = tuple(f.name for f in dataclasses.fields(TrainerState) if f.default is dataclasses.MISSING)


def _fault(values: dict) -> str | None:
    """The first key of `values` (a required one: or its absence) whose type is not what a trainer state holds."""
    for key, kinds in KINDS.items():
        value = values.get(key)
        if value is None and key not in REQUIRED:  # an optional key left out, or holding its default None
            continue
        if isinstance(value, bool) or not isinstance(value, kinds):
            missing = "missing or " if key in REQUIRED else ""
            return f"{key!r} is {missing}not a {kinds[0].__name__}"
    return None


def read_state(path: Path) -> TrainerState:
    """trainer_state.pt, checked to hold what the Trainer writes (keys and types)."""
    if not Path(path).is_file():
        raise UserError(f"{path} is missing")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # a global that weights_only refuses: it was never run
        raise UserError(f"{path} holds Python objects a trainer state never has; refused (no code ran)") from None
    except Exception as e:  # truncated zip, wrong format
        raise UserError(f"{path} is corrupt: {type(e).__name__}: {first_line(e)}") from None
    return TrainerState.from_dict(data, path)


# ---- the lock --------------------------------------------------------------------------------------------------
def lock_holder(run_dir: Path) -> str | None:
    """The pid of the process training into `run_dir` now (None: no one holds its lock)."""
    import fcntl

    try:
        fd = os.open(Path(run_dir) / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.read(fd, 32).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)


def pending(run_dir: Path) -> bool:
    """A save a kill interrupted left its commit record or temp files (`checkpoint.recover`, under the lock,
    ends it)."""
    return (Path(run_dir) / COMMIT).exists() or any(temp(run_dir, n).exists() for n in WRITTEN)


def open_lock(path: Path) -> int:
    """RUN/.lock opened for writing: created if absent; never followed through a symlink (a planted link would
    have the pid written into the file it points to) and never anything but a regular file."""
    planted = f"{path} is not a regular file, so it is not a lock tinyformer made; remove it (rm {path}) and try again"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a symlink, a folder, a socket
            raise UserError(planted) from None
        raise UserError(f"cannot open the lock {path}: {reason(e)}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a named pipe or a device
        os.close(fd)
        raise UserError(planted)
    return fd


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold RUN/.lock for the block; another process holding it is a UserError naming its pid. A process that
    writes checkpoints takes it through `checkpoint.claim`, which also ends a save a kill interrupted.

    A folder this call created and nothing was written into is removed again on the way out.
    """
    import fcntl

    created = not Path(run_dir).exists()
    path = make_dir(run_dir) / LOCK
    while True:
        fd = open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(f"run folder {str(run_dir)!r} is in use: process {pid} is training into it") from None
        if path.exists() and os.stat(path).st_ino == os.fstat(fd).st_ino:
            break  # the lock file was not removed by its last holder while we opened it
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
        if created and not any(Path(run_dir).iterdir()):
            Path(run_dir).rmdir()
