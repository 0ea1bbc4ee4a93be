"""docs/source-map.md names real symbols: every torch / transformers / tinyformer path in its tables imports.

The map is written against particular torch and transformers versions; this test checks it against the
installed ones, one test per symbol, so an upgrade that moves a symbol fails with that symbol's name.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

MAP = Path(__file__).resolve().parents[1] / "docs" / "source-map.md"
PREFIXES = ("torch", "transformers", "tinyformer")
MIN_SYMBOLS = 250  # the map names 265; fewer means it was emptied or cut short
CODE = re.compile(r"`([^`]+)`")  # one backticked span
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # a.b.c, nothing else


def table_spans() -> list[str]:
    """Every backticked span in a table row that starts with one of PREFIXES and a dot."""
    rows = [line for line in MAP.read_text(encoding="utf-8").splitlines() if line.lstrip().startswith("|")]
    spans = (span.strip() for row in rows for span in CODE.findall(row))
    return [s for s in spans if s.startswith(tuple(p + "." for p in PREFIXES))]


SYMBOLS = sorted(set(table_spans()))


def resolve(path: str) -> object:
    """Import the longest importable module prefix of `path`, then getattr the rest, one name at a time."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name and not name.startswith(f"{e.name}."):  # an existing module lacks a dependency
                raise
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module of {path!r} imports")


def test_the_map_names_enough_symbols_under_every_prefix():
    assert len(SYMBOLS) >= MIN_SYMBOLS, f"{MAP.name} names {len(SYMBOLS)} symbols, expected at least {MIN_SYMBOLS}"
    for prefix in PREFIXES:
        assert any(s.startswith(prefix + ".") for s in SYMBOLS), f"{MAP.name} names no {prefix}. symbol"


def test_every_symbol_is_a_plain_dotted_path():
    bad = [s for s in table_spans() if not DOTTED.fullmatch(s)]
    assert not bad, f"write these as module.Class.attr, arguments outside the backticks: {bad}"


@pytest.mark.parametrize("path", SYMBOLS)
def test_symbol_exists(path):
    try:
        resolve(path)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{path} (named in {MAP.name}) does not resolve: {type(e).__name__}: {e}")
