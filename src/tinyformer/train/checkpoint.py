"""Writing a run folder's checkpoint: atomically (temp file + rename), as one unit, and finishing a save a kill
interrupted (`recover`). The folder's names, its readers and its lock are `tinyformer.runfolder`'s.

Weights go to safetensors; optimizer, RNG and step state (a `runfolder.TrainerState`) go through
`torch.save` and come back with `weights_only=True` (no pickle code runs).
The latest weights and the trainer state both record their step, so a run
killed between the two writes is recognised on resume, naming the stale file.
A missing, corrupt or mismatched file is a `UserError` naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model
from torch import nn

from tinyformer.device import model_device
from tinyformer.errors import UserError, first_line
from tinyformer.files import atomic_write, read_json, reason, utf8_path
from tinyformer.runfolder import COMMIT, PARTS, STATE, WEIGHTS, WRITTEN, TrainerState, read_state, run_lock, temp


def save_json(path: Path, data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write(path, lambda t: t.write_text(text, encoding="utf-8"))


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


def state_writer(state: TrainerState) -> Callable[[Path], None]:
    return lambda t: torch.save(state.to_dict(), t)


def save_state(state: TrainerState, path: Path) -> None:
    atomic_write(path, state_writer(state))


# ---- a checkpoint is one unit ------------------------------------------------------------------------------
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
    written = [temp(run_dir, name) for name in [*parts, COMMIT]]
    failures = (OSError, RuntimeError, SafetensorError)  # torch.save and safetensors wrap a failed write
    try:
        for name, write in parts.items():
            write(temp(run_dir, name))
            _fsync(temp(run_dir, name))
        temp(run_dir, COMMIT).write_text(json.dumps(record), encoding="utf-8")
        _fsync(temp(run_dir, COMMIT))
        os.replace(temp(run_dir, COMMIT), run_dir / COMMIT)  # the commit point
    except failures as e:
        why = _why(e, run_dir)  # before the temp files go: they may be what filled the disk
        for tmp in written:
            tmp.unlink(missing_ok=True)
        where = f"the run is still resumable at step {last}" if last is not None else "no checkpoint was ever saved"
        raise UserError(f"cannot save step {step} into {str(run_dir)!r} ({why}); {where}") from None
    recover(run_dir)


@contextlib.contextmanager
def claim(run_dir: Path) -> Iterator[None]:
    """Hold the run folder's lock (`runfolder.run_lock`) for the block, a save that a kill interrupted ended
    first (`recover`): how a process that writes checkpoints into a folder takes it."""
    with run_lock(run_dir):
        recover(Path(run_dir))  # finished if it was committed, else its files removed
        yield


def recover(run_dir: Path) -> None:
    """Finish a save that a kill interrupted after its commit (rename the temp files it names into place), then
    remove every temp file left behind by a killed write. Only the holder of the run's lock may call it."""
    commit = run_dir / COMMIT
    if commit.is_file():
        for name in commit_names(commit):
            if name in PARTS and temp(run_dir, name).is_file():  # never a path a crafted record names
                os.replace(temp(run_dir, name), run_dir / name)
        with contextlib.suppress(OSError):  # some file systems cannot flush a folder; the renames stand
            _fsync(run_dir)
        commit.unlink()
    for name in WRITTEN:  # the temp files of what a run writes, and nothing else
        temp(run_dir, name).unlink(missing_ok=True)


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
    return first_line(e)[:80]


def weights_step(path: Path) -> int | None:
    """The step recorded in a weights file (None for files written without one)."""
    from safetensors import safe_open

    name = utf8_path(path)
    try:
        with safe_open(name, "pt") as f:
            step = (f.metadata() or {}).get("step")
    except Exception as e:  # safetensors raises its own error type for corrupt files
        raise UserError(f"{path} is not a readable safetensors file (corrupt or truncated): {first_line(e)}") from None
    return int(step) if step is not None and step.isdigit() else None


def load_weights(model: nn.Module, path: Path) -> None:
    if not Path(path).is_file():
        raise UserError(f"{path} is missing")
    weights_step(path)  # an unreadable file says so, rather than "does not fit"
    try:
        load_model(model, utf8_path(path), device=str(model_device(model)))
    except Exception as e:
        raise UserError(f"{path} does not fit the model that config.json describes: {first_line(e)}") from None


class StaleCheckpoint(UserError):
    """The weights and the trainer state are from different steps (a folder saved by tinyformer before the
    checkpoint became one unit, stopped between its two files)."""


def load_trainer_state(run_dir: Path) -> TrainerState:
    """The state a resume continues from, checked to be from the same step as model.safetensors."""
    state = read_state(run_dir / STATE)
    step = weights_step(run_dir / WEIGHTS)
    if step is not None and step != state.step:
        stale = STATE if step > state.step else WEIGHTS
        raise StaleCheckpoint(
            f"{run_dir / WEIGHTS} is from step {step} but {STATE} from step {state.step}: the run stopped "
            f"while saving and {stale} is stale, so --resume cannot continue exactly (sample, eval, info still work); "
            f"--resume {run_dir} --inexact continues from the weights with a fresh optimizer state"
        )
    return state


def restore(path: Path, apply: Callable[[], Any]) -> None:
    """Apply one part of a saved state (optimizer, RNG); a part that does not fit is a UserError naming `path`."""
    try:
        apply()
    except (ValueError, RuntimeError, KeyError, TypeError, IndexError) as e:
        raise UserError(f"{path} holds a state that does not fit this run: {first_line(e)}") from None
