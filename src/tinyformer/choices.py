"""Speed choices measured on the machine at hand, and remembered per machine, torch version, shapes and dtype.

A choice that changes only speed (today: the attention backend of `model.backend=auto`) is made by timing
each candidate on the real work, never by a rule tuned on another machine. `measure` runs the candidates
in alternation (a warm-up each, then rounds until a time budget is spent) and returns their rates; the
caller (`tinyformer.device.choose_backend`) keeps the fastest.

The cache is one JSON file, `choices.json`, in `$TINYFORMER_CACHE` (default `~/.cache/tinyformer`): a key
(a hash of what was measured and where) -> the choice and its rates. It never stops a run:

- a file that is corrupt, foreign or unreadable is ignored with a one-line warning and rewritten;
- a write goes to a temp file of its own, then replaces the file under a lock (`fcntl.flock`), so two runs
  starting at once never corrupt it (the later one's entry may be measured again, nothing worse);
- a folder that cannot be written (a read-only home) means no cache: one warning, and the run goes on;
  the process still remembers what it measured (a chat does not measure again at every message).

A candidate that fails for want of memory (the manual backend keeps (B, H, T, S) scores for backward) is
left out of the choice, and a choice made without all candidates is not cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

CACHE_ENV = "TINYFORMER_CACHE"  # the folder of choices.json (default ~/.cache/tinyformer)
FORMAT = "tinyformer-choices-1"  # the file's "format" field: anything else is foreign
_warned: set[str] = set()
_memo: dict[str, dict] = {}  # key -> entry, what this process measured or read


def cache_file() -> Path | None:
    """$TINYFORMER_CACHE/choices.json, else ($XDG_CACHE_HOME or ~/.cache)/tinyformer/choices.json; None when
    there is no home folder to put it in (then nothing is cached, with one warning)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / "choices.json"
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tinyformer" / "choices.json"
    except RuntimeError:  # Path.home(): no HOME and no user entry
        warn(f"no home folder for the speed-choice cache; set {CACHE_ENV}=DIR to keep measured choices")
        return None


def key_of(fields: dict) -> str:
    """A stable short key for `fields` (JSON-able): what was measured, on which machine, shapes and dtype."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:24]


def lookup(key: str, candidates: tuple[str, ...]) -> dict | None:
    """The cached entry for `key`, or None: no file, no entry, or one that cannot be used (one warning)."""
    if key in _memo:
        return _memo[key]
    path = cache_file()
    entry = _read(path).get(key) if path is not None else None
    if entry is None:
        return None
    rates = entry.get("rates") if isinstance(entry, dict) else None
    ok = isinstance(rates, dict) and all(isinstance(rates.get(c), (int, float)) for c in candidates)
    if not (ok and entry.get("choice") in candidates):
        warn(f"ignoring a malformed entry of the speed-choice cache {path}; measuring again")
        return None
    _memo[key] = entry
    return entry


def remember(key: str, entry: dict) -> None:
    """Store `entry` under `key`: atomically, under a lock; a folder that cannot be written is one warning."""
    _memo[key] = entry
    path = cache_file()
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            entries = _read(path, quiet=True)
            entries[key] = entry
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".choices.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"format": FORMAT, "entries": entries}, f, indent=1, sort_keys=True, default=str)
                os.replace(tmp, path)
            finally:
                Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        warn(f"cannot write the speed-choice cache {path} ({e.strerror or e}); the next run measures again")


def measure(
    candidates: dict[str, Callable[[], int]],
    *,
    budget_s: float = 2.0,
    rounds: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, float], float]:
    """Time each candidate (a callable doing one unit of the real work -> how many items it processed).

    One untimed warm-up each (the first calls pay for allocations), then timed rounds in alternation
    (A B A B ...): at least one, at most `rounds`, stopping after the round that passes `budget_s`. A
    candidate that runs out of memory is dropped (rate 0.0); if all do, the error is raised.
    -> ({name: median items per second}, seconds spent in all)."""
    start = clock()
    live = {name: run for name, run in candidates.items() if _runs(run)}
    if not live:
        raise MemoryError(f"every candidate ran out of memory: {', '.join(candidates)}")
    rates: dict[str, list[float]] = {name: [] for name in live}
    for _ in range(rounds):
        for name, run in live.items():
            t0 = clock()
            n = run()
            rates[name].append(n / max(clock() - t0, 1e-9))
        if clock() - start > budget_s:
            break
    return {name: statistics.median(rates[name]) if name in live else 0.0 for name in candidates}, clock() - start


def _runs(run: Callable[[], int]) -> bool:
    """Run once (the warm-up) -> False if it ran out of memory (the error is not ours to raise)."""
    try:
        run()
        return True
    except (MemoryError, RuntimeError) as e:  # torch.OutOfMemoryError is a RuntimeError
        if isinstance(e, RuntimeError) and "memory" not in str(e).lower():
            raise
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return False


def warn(message: str) -> None:
    """One line on stderr, once per message per process."""
    if message not in _warned:
        _warned.add(message)
        print(f"tinyformer: warning: {message}", file=sys.stderr)


def _read(path: Path, quiet: bool = False) -> dict:
    """The entries of choices.json; {} if it is missing or cannot be used (with a warning unless `quiet`)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("entries"), dict)):
            raise ValueError("not a tinyformer choices file")
        return data["entries"]
    except (FileNotFoundError, NotADirectoryError):  # no cache yet (or no folder for one: `remember` says so)
        return {}
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        if not quiet:
            warn(f"ignoring the speed-choice cache {path} ({type(e).__name__}: {e}); it will be rewritten")
        return {}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`.lock while the file is rewritten (no lock where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: the atomic replace alone still keeps the file whole
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
