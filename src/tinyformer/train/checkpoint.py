"""Checkpoint files of a run folder, written atomically (temp file + rename), and the folder's lock.

Weights go to safetensors; optimizer, RNG and step state go through
`torch.save` and come back with `weights_only=True` (no pickle code runs).
The latest weights and the trainer state both record their step, so a run
killed between the two writes is recognised on resume, naming the stale file.
A missing, corrupt or mismatched file is a `UserError` naming it.

One process at a time trains into a run folder: `run_lock` holds an exclusive
lock (flock) on RUN/.lock for the whole run; the kernel releases it when the
process ends, however it ends, so a stale lock file never blocks anyone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import re
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from tinyformer.device import model_device
from tinyformer.errors import UserError
from tinyformer.files import atomic_write, make_dir, parse_json, read_json, reason

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.safetensors"  # latest weights
BEST = "best.safetensors"  # weights at the best validation loss
STATE = "trainer_state.pt"  # optimizer, RNG states, step, best val loss
METRICS = "metrics.jsonl"  # see tinyformer.train.metrics
LOSS_PNG = "loss.png"
SAMPLE = "sample.txt"
LOCK = ".lock"  # held by the process training into the folder


COMMIT = ".commit.json"  # a save complete in its temp files: whoever takes the lock next finishes it (`recover`)
PARTS = (WEIGHTS, STATE, BEST)  # what one checkpoint may write
WRITTEN = (*PARTS, COMMIT, METRICS, LOSS_PNG, CONFIG, TOKENIZER, SAMPLE)  # every file a run writes


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
        config = read_json(p / CONFIG)
    except UserError:
        return False
    return isinstance(config, dict) and "task" in config and "train" in config and lock_holder(p) is None


STATE_KEYS = {  # what trainer_state.pt must hold: key -> accepted types
    "step": (int,),
    "best_val": (float, int),
    "train_seconds": (float, int),
    "tokens_seen": (int,),
    "optimizer": (dict,),
    "rng": (dict,),
}


def save_json(path: Path, data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write(path, lambda t: t.write_text(text, encoding="utf-8"))


MAX_METRICS_BYTES = 512 * 2**20  # a row is ~100 bytes: millions of steps


def read_metrics(path: Path) -> list[dict]:
    """The rows of metrics.jsonl (none if it does not exist); an unreadable line (a kill mid-append, or not a
    row at all) is skipped, with a note. A file too large to be one is a UserError naming it."""
    rows, bad = metrics_rows(path)
    if bad:
        print(f"note: skipped {bad} unreadable line(s) of {path}", file=sys.stderr)
    return rows


def plot_run(run_dir: Path) -> Path:
    """Draw RUN/loss.png from RUN/metrics.jsonl -> its path (at the end of each fit, and by `info --plot`)."""
    from tinyformer.plots import plot_losses

    png = Path(run_dir) / LOSS_PNG
    plot_losses(read_metrics(Path(run_dir) / METRICS), png, Path(run_dir).resolve().name)
    return png


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


def load_json(path: Path) -> Any:
    """A JSON file of a run folder (bounded size and depth; see `tinyformer.files.read_json`)."""
    return read_json(path)


def save_weights(model: nn.Module, path: Path, step: int | None = None) -> None:
    """Weights as safetensors; `step` goes into the file's metadata (checked against the trainer state)."""
    atomic_write(path, weights_writer(model, step))


def weights_writer(model: nn.Module, step: int | None = None) -> Callable[[Path], None]:
    meta = None if step is None else {"step": str(step)}

    def write(t: Path) -> None:
        save_model(model, str(t), metadata=meta)
        os.chmod(t, 0o666 & ~UMASK)  # safetensors creates its file 0600; every other file of a run is 0644

    return write


UMASK = os.umask(0o022)  # read once at import (os.umask can only be read by setting it), then put back
os.umask(UMASK)


def state_writer(state: dict) -> Callable[[Path], None]:
    return lambda t: torch.save(state, t)


# ---- a checkpoint is one unit ------------------------------------------------------------------------------
def _tmp(run_dir: Path, name: str) -> Path:
    return run_dir / f".{name}.tmp"


def _fsync(path: Path) -> None:
    """Flush a written file (or a folder's entries) to the disk, so a commit never names data still in memory."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(run_dir: Path, parts: dict[str, Callable[[Path], None]], step: int, last: int | None) -> None:
    """Save `parts` (file name -> writer) as one unit: each written to its temp file and flushed, then the commit
    record naming them (the moment the new checkpoint exists), then each renamed over its file. Before the record
    the folder holds the previous checkpoint untouched; after it, `recover` finishes the renames. A write that
    fails (a full disk) removes the temp files and is one line saying where the run can still resume (`last`)."""
    record = {"step": step, "files": list(parts)}
    written = [_tmp(run_dir, name) for name in [*parts, COMMIT]]
    failures = (OSError, RuntimeError, SafetensorError)  # torch.save and safetensors wrap a failed write
    try:
        for name, write in parts.items():
            write(_tmp(run_dir, name))
            _fsync(_tmp(run_dir, name))
        _tmp(run_dir, COMMIT).write_text(json.dumps(record), encoding="utf-8")
        _fsync(_tmp(run_dir, COMMIT))
        os.replace(_tmp(run_dir, COMMIT), run_dir / COMMIT)  # the commit point
    except failures as e:
        why = _why(e, run_dir)  # before the temp files go: they may be what filled the disk
        for tmp in written:
            tmp.unlink(missing_ok=True)
        where = f"the run is still resumable at step {last}" if last is not None else "no checkpoint was ever saved"
        raise UserError(f"cannot save step {step} into {str(run_dir)!r} ({why}); {where}") from None
    recover(run_dir)


def recover(run_dir: Path) -> None:
    """Finish a save that a kill interrupted after its commit (rename the temp files it names into place), then
    remove every temp file left behind by a killed write. Only the holder of the run's lock may call it."""
    commit = run_dir / COMMIT
    if commit.is_file():
        for name in commit_names(commit):
            if name in PARTS and _tmp(run_dir, name).is_file():  # never a path a crafted record names
                os.replace(_tmp(run_dir, name), run_dir / name)
        with contextlib.suppress(OSError):  # some file systems cannot flush a folder; the renames stand
            _fsync(run_dir)
        commit.unlink()
    for name in WRITTEN:  # the temp files of what a run writes, and nothing else
        _tmp(run_dir, name).unlink(missing_ok=True)


def commit_names(commit: Path) -> list[str]:
    """The files a commit record names. One of another shape (it is written whole, then renamed, so never by a
    save of ours) names none: it is then a torn save, and the previous checkpoint stands."""
    try:
        record = read_json(commit, max_bytes=2**16)
    except UserError:
        return []
    names = record.get("files") if isinstance(record, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _why(e: Exception, run_dir: Path) -> str:
    """The cause of a failed save in a few words: a full disk however the library reported it."""
    import shutil

    if isinstance(e, OSError):
        return reason(e)
    if any(words in str(e) for words in ("No space left", "StorageFull", "os error 28")):
        return "the disk is full"
    try:
        if shutil.disk_usage(run_dir).free < 16 * 2**20:
            return "the disk is full"
    except OSError:
        pass
    return _first(e)[:80]


def weights_step(path: Path) -> int | None:
    """The step recorded in a weights file (None for files written without one)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            step = (f.metadata() or {}).get("step")
    except Exception as e:  # safetensors raises its own error type for corrupt files
        raise UserError(f"{path} is not a readable safetensors file (corrupt or truncated): {_first(e)}") from None
    return int(step) if step is not None and step.isdigit() else None


def load_weights(model: nn.Module, path: Path) -> None:
    if not Path(path).is_file():
        raise UserError(f"{path} is missing")
    weights_step(path)  # an unreadable file says so, rather than "does not fit"
    try:
        load_model(model, str(path), device=str(model_device(model)))
    except Exception as e:
        raise UserError(f"{path} does not fit the model that config.json describes: {_first(e)}") from None


def save_state(state: dict, path: Path) -> None:
    atomic_write(path, lambda t: torch.save(state, t))


def load_state(path: Path) -> dict:
    """trainer_state.pt, checked to hold what the Trainer writes (keys and types)."""
    if not Path(path).is_file():
        raise UserError(f"{path} is missing")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # a global that weights_only refuses: it was never run
        raise UserError(f"{path} holds Python objects a trainer state never has; refused (no code ran)") from None
    except Exception as e:  # truncated zip, wrong format
        raise UserError(f"{path} is corrupt: {type(e).__name__}: {_first(e)}") from None
    if not isinstance(state, dict):
        raise UserError(f"{path} does not hold a trainer state (a {type(state).__name__}, not a dict)")
    for key, kinds in STATE_KEYS.items():
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise UserError(f"{path} does not hold a trainer state: {key!r} is missing or not a {kinds[0].__name__}")
    return state


class StaleCheckpoint(UserError):
    """The weights and the trainer state are from different steps (a folder saved by tinyformer before the
    checkpoint became one unit, stopped between its two files)."""


def load_trainer_state(run_dir: Path) -> dict:
    """The state a resume continues from, checked to be from the same step as model.safetensors."""
    state = load_state(run_dir / STATE)
    step = weights_step(run_dir / WEIGHTS)
    if step is not None and step != state["step"]:
        stale = STATE if step > state["step"] else WEIGHTS
        raise StaleCheckpoint(
            f"{run_dir / WEIGHTS} is from step {step} but {STATE} from step {state['step']}: the run stopped "
            f"while saving and {stale} is stale, so --resume cannot continue exactly (sample, eval, info still work); "
            f"--resume {run_dir} --inexact continues from the weights with a fresh optimizer state"
        )
    return state


def restore(path: Path, apply: Callable[[], Any]) -> None:
    """Apply one part of a saved state (optimizer, RNG); a part that does not fit is a UserError naming `path`."""
    try:
        apply()
    except (ValueError, RuntimeError, KeyError, TypeError, IndexError) as e:
        raise UserError(f"{path} holds a state that does not fit this run: {_first(e)}") from None


def _first(e: Exception) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()  # no terminal colour codes in a one-line error
    return text.splitlines()[0][:200] if text else type(e).__name__


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
    """A save a kill interrupted left its commit record or temp files (`recover`, under the lock, ends it)."""
    return (Path(run_dir) / COMMIT).exists() or any(_tmp(Path(run_dir), n).exists() for n in WRITTEN)


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
    """Hold RUN/.lock for the block; another process holding it is a UserError naming its pid.

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
        recover(Path(run_dir))  # a save a kill interrupted: finished if it was committed, else its files removed
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
        if created and not any(Path(run_dir).iterdir()):
            Path(run_dir).rmdir()
