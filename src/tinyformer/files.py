"""Writing files so that readers never see half of one: every write goes to a temp file, then a rename.

The lowest layer of the package: checkpoints, plots, reports and exports all write through `atomic_write`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` then rename tmp over `path`: readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> Path:
    """`text` as UTF-8 at `path`, atomically; returns the path."""
    atomic_write(Path(path), lambda t: t.write_text(text, encoding="utf-8"))
    return Path(path)
