"""The runs a playground serves: found under one root folder, named by their path relative to it, loaded
once and read-only.

Only a folder inside the root is ever reachable: a name is a relative path without `..`, and the folder it
names, symlinks resolved, must lie under the resolved root and be a tinyformer run. Nothing here writes
into a run folder or takes its lock, so a run still training can be served: each request sees the weights
of the last complete checkpoint (reloaded when a new one appears, or its config or tokenizer changes), and
a checkpoint being written is answered with "try again", never a lock.

Every call into torch (loading, each generation step, attention, an answer) runs on the store's one model
thread (`RunStore.call`). On a CPU each thread that calls torch brings its own OpenMP team, and two teams
spin against each other for the same cores: measured here, a second thread made every generated token two
to three times slower. One thread also serialises the model calls, so requests interleave step by step.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

from tinyformer import runfolder
from tinyformer.errors import UserError
from tinyformer.runs import Run, load_run

T = TypeVar("T")

MAX_DEPTH = 4  # folders below the root searched for runs
MAX_RUNS = 500  # runs listed at most


class NotFound(Exception):
    """A run name that is not a run folder under the root (or tries to leave it)."""


class Busy(Exception):
    """A run whose checkpoint is being written right now: try again in a moment."""


@dataclass
class Loaded:
    run: Run
    stamp: tuple  # the weights file's name, and the files it was loaded from as `file_stamp` saw them


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a rewritten file from the one loaded (modification time, size, inode); None: absent."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class RunStore:
    def __init__(self, root: str | Path, device: str = "cpu", keep: int = 4) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise UserError(f"{str(root)!r} is not a folder; give a run folder or a folder of runs (e.g. runs)")
        from tinyformer.device import pick_device

        pick_device(device)  # a device this machine lacks is one line at start, not a 409 for every request
        self.device, self.keep = device, keep
        self._loaded: OrderedDict[str, Loaded] = OrderedDict()  # least recently used first
        self._loading = threading.Lock()
        self._model = ThreadPoolExecutor(1, thread_name_prefix="tinyformer-model")  # every torch call (see above)

    def call(self, fn: Callable[..., T], *args) -> T:
        """fn(*args) on the model thread; its exception, if any, is raised here."""
        return self._model.submit(fn, *args).result()

    async def wait(self, fn: Callable[..., T], *args) -> T:
        """The same, awaited: the event loop serves other requests meanwhile."""
        return await asyncio.wrap_future(self._model.submit(fn, *args))

    def names(self) -> list[str]:
        """Every run folder under the root ("." for the root itself), sorted; symlinks are not followed."""
        found = []
        for folder, dirs, _ in os.walk(self.root, followlinks=False):
            here = Path(folder)
            depth = len(here.relative_to(self.root).parts)
            if runfolder.is_run(here):
                found.append(here.relative_to(self.root).as_posix())
                dirs[:] = []  # a run's subfolders (tensorboard logs) hold no runs
            dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < MAX_DEPTH else []
            if len(found) >= MAX_RUNS:
                break
        return sorted(found)

    def path(self, name: str) -> Path:
        """The run folder `name` names, or NotFound."""
        parts = PurePosixPath(name).parts
        if not name or "\\" in name or "\x00" in name or name.startswith("/") or ".." in parts:
            raise NotFound(name)
        try:
            p = (self.root / name).resolve()
            if not p.is_relative_to(self.root) or not runfolder.is_run(p):
                raise NotFound(name)
        except (OSError, RuntimeError):  # a name too long for the file system, a symlink loop
            raise NotFound(name) from None
        return p

    def get(self, name: str) -> Loaded:
        """The run loaded with the weights it names (`runfolder.weights_file`), loaded again when a file it was
        loaded from has changed since (a newer checkpoint, a config or tokenizer rewritten): every route then
        answers from what the folder holds now, or refuses it alike (a 409 where `/api/runs` lists it as unreadable)."""
        p = self.path(name)
        try:
            weights = runfolder.weights_file(p)  # the run's own choice (train.weights)
            w = weights.stat()  # none yet (a run's first checkpoint being written): Busy
            files = (file_stamp(p / runfolder.CONFIG), file_stamp(p / runfolder.TOKENIZER))
            stamp = (weights.name, w.st_mtime_ns, w.st_size, *files)
        except OSError:
            raise Busy(name) from None
        except UserError as e:  # config.json unreadable
            raise UserError(f"run {name!r} cannot be loaded: {e}") from None
        with self._loading:
            held = self._loaded.get(name)
            if held is None or held.stamp != stamp:
                try:
                    held = Loaded(self.call(load_run, p, "run", self.device), stamp)
                except (UserError, OSError, ValueError, RuntimeError) as e:
                    if (p / runfolder.LOCK).exists() or (p / runfolder.COMMIT).exists():
                        raise Busy(name) from None  # a checkpoint half written by the run training into it
                    raise UserError(f"run {name!r} cannot be loaded: {e}") from None
                self._loaded[name] = held
            self._loaded.move_to_end(name)
            while len(self._loaded) > self.keep:
                self._loaded.popitem(last=False)
            return held


def metrics(folder: Path) -> dict[str, list]:
    """The loss curves of metrics.jsonl: {"train": [[step, loss], ...], "val": [...]}; a line being written is
    skipped."""
    curves: dict[str, list] = {"train": [], "val": []}
    try:
        rows, _ = runfolder.metrics_rows(folder / runfolder.METRICS)
    except (UserError, OSError):  # unreadable, or too large to be one: the run is served without its curves
        rows = []
    for row in rows:
        if row.get("split") in curves and isinstance(row.get("loss"), (int, float)):
            curves[row["split"]].append([row["step"], row["loss"]])
    return curves
