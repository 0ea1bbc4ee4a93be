"""`--set` overrides: the "section.key=value" text the command line takes, read (`parse_override`, values as TOML
literals, else strings) and written from Python values (`overrides`, for `api.train(set={...})`), so that a value
given from Python is stored as it is: the text `toml_value` writes reads back as the very same value.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from tinyformer.errors import UserError

Overrides = Mapping[str, Any] | Iterable[str]


def parse_override(text: str) -> tuple[list[str], Any]:
    """`"train.lr=1e-3"` -> (["train", "lr"], 0.001); values are TOML literals, else strings."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UserError(f"--set {text!r} is not of the form section.key=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word such as cpu or cosine
    return key.strip().split("."), value


def toml_value(value: Any) -> str | None:
    """A str, int, float or bool (a Path: its text) as the TOML literal that reads back as the very same value
    -> the text; None for a value of any other type. JSON's string escapes are TOML's, but for DEL, which TOML
    does not take unescaped; a float's repr is TOML's spelling too (nan, inf, 1e-05, 1e+16)."""
    if isinstance(value, PurePath):
        value = str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, str):
        return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")
    return None


def overrides(values: Overrides) -> list[str]:
    """`--set` overrides from a mapping ({"model.n_layer": 2}, values as Python values: a str, int, float, bool
    or Path, each stored as it is; any other type is a UserError naming the key) or from "section.key=value"
    strings as the command line takes them."""
    if isinstance(values, str):
        raise UserError(f"set={values!r}: give a list of 'section.key=value' strings or a dict, not one string")
    if not isinstance(values, Mapping):
        return [str(v) for v in values]
    for key, value in values.items():
        if not isinstance(key, str) or "=" in key or not key.strip():
            raise UserError(f"set key {key!r} is not a config key; give 'section.key' names, as in --set")
        if toml_value(value) is None:
            raise UserError(f"set[{key!r}] is a {type(value).__name__}; a value of set= is a str, int, float, bool "
                            "or Path")  # fmt: skip
    return [f"{key}={toml_value(value)}" for key, value in values.items()]
