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
- a folder that cannot be written (a read-only home) means no cache: one warning, and the run goes on.
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


def lookup(key: str) -> dict | None:
    """The cached entry for `key`, or None (no file, no entry, or a file that cannot be used: one warning)."""
    path = cache_file()
    entry = _read(path).get(key) if path is not None else None
    return entry if isinstance(entry, dict) and isinstance(entry.get("choice"), str) else None


def remember(key: str, entry: dict) -> None:
    """Store `entry` under `key`: atomically, under a lock; a folder that cannot be written is one warning."""
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
                    json.dump({"format": FORMAT, "entries": entries}, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
            finally:
                Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        warn(f"cannot write the speed-choice cache {path} ({e.strerror or e}); measuring again next time")


def measure(
    candidates: dict[str, Callable[[], int]],
    *,
    budget_s: float = 2.0,
    rounds: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, float], float]:
    """Time each candidate (a callable doing one unit of the real work -> how many items it processed).

    One warm-up each, then up to `rounds` timed rounds in alternation (A B A B ...), stopping after the
    round that passes `budget_s`. Steps so long that the warm-ups alone pass the budget (a big model) are
    judged by the warm-ups. -> ({name: median items per second}, seconds spent in all)."""
    start = clock()
    rates: dict[str, list[float]] = {name: [] for name in candidates}
    for name, run in candidates.items():
        t0 = clock()
        n = run()
        rates[name].append(n / max(clock() - t0, 1e-9))
    if clock() - start > budget_s:
        return {name: r[0] for name, r in rates.items()}, clock() - start
    rates = {name: [] for name in candidates}  # warm-ups pay for first-call allocations: not counted
    for _ in range(rounds):
        for name, run in candidates.items():
            t0 = clock()
            n = run()
            rates[name].append(n / max(clock() - t0, 1e-9))
        if clock() - start > budget_s:
            break
    return {name: statistics.median(r) for name, r in rates.items()}, clock() - start


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
