"""docs/lab/facts.json as every reader reads it: the guide's build and check (tools/lab/), the notebooks' `Guide`
and `tinyformer lab facts`. The build writes it; a file of another shape (edited by hand, merged with conflict
markers resolved wrongly, cut short) is one line naming the file and the key, never a traceback from the code
that walks it.

    {"values": {placeholder: text}, "machines": {source: text}, "stamps": {source: stamp}, "stale": {source:
     [file]}, "missing": [source], "measured": [placeholder], "build": {...}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinyformer.errors import UserError
from tinyformer.files import read_json

NUMBER = (int, float)
SECTIONS: dict[str, tuple[type, Any]] = {  # section -> (its type, the type of each entry; None: any)
    "values": (dict, str),
    "machines": (dict, str),
    "stamps": (dict, dict),
    "stale": (dict, list),
    "missing": (list, str),
    "measured": (list, str),
    "build": (dict, None),
}
STAMP = {  # a stamp's fields (`tools/lab/stamps.py`) -> their types; others are kept as they are
    "commit": str,
    "date": str,
    "dirty": bool,
    "machine": str,
    "calibration": str,
    "speed": NUMBER,
    "wall_s": NUMBER,
    "checked": dict,
    "fingerprints": dict,
}
CHECKED = {"commit": str, "date": str, "kind": str, "moved": list}  # a stamp's last check by behaviour
JSON_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null"}


def read_facts(path: str | Path) -> dict:
    """The guide's facts in `path`, every field the readers use of the type they use it as; else a UserError."""
    facts = read_json(path)
    expect(path, "the file", facts, dict)
    for section, (outer, inner) in SECTIONS.items():
        if section in facts:
            entries(path, section, facts[section], outer, inner)
    for name, files in facts.get("stale", {}).items():
        entries(path, f"stale.{name}", files, list, str)
    for name, stamp in facts.get("stamps", {}).items():
        fields(path, f"stamps.{name}", stamp, STAMP)
        fields(path, f"stamps.{name}.checked", stamp.get("checked", {}), CHECKED)
        entries(path, f"stamps.{name}.checked.moved", stamp.get("checked", {}).get("moved", []), list, str)
        entries(path, f"stamps.{name}.fingerprints", stamp.get("fingerprints", {}), dict, dict)
        for kind, fingerprint in stamp.get("fingerprints", {}).items():
            fields(path, f"stamps.{name}.fingerprints.{kind}", fingerprint, {"seconds": NUMBER})
    return facts


def entries(path, key: str, value, outer: type, inner) -> None:
    """`value` (at `key`) is an `outer` (dict or list) whose every entry is an `inner` (None: anything)."""
    expect(path, key, value, outer)
    items = value.items() if outer is dict else enumerate(value)
    for name, entry in items:
        if inner is not None:
            expect(path, f"{key}.{name}" if outer is dict else f"{key}[{name}]", entry, inner)


def fields(path, key: str, record: dict, types: dict[str, Any]) -> None:
    for name, kind in types.items():
        if name in record:
            expect(path, f"{key}.{name}", record[name], kind)


def expect(path, key: str, value, kind) -> None:
    if not isinstance(value, kind) or (kind is NUMBER and isinstance(value, bool)):
        wanted = "a number" if kind is NUMBER else JSON_NAMES[kind]
        got = "a number" if isinstance(value, NUMBER) and not isinstance(value, bool) else JSON_NAMES[type(value)]
        raise UserError(
            f"{path}: {key} is {got}, where the guide's build writes {wanted}: restore the file "
            "(git checkout docs/lab/facts.json) or build the guide again"
        )
