"""A downloaded Hugging Face folder is untrusted input: every value its loaders use is read through one validator.

Each value is read through a `Key`: its type (an integer is never a bool, a float may be written as an
integer), its range, and what an absent or null key means. A bad value is one `UserError` line naming the file
and the key. The tables of keys live with what they describe: `tinyformer.models.hf_config` for config.json
(one table per model family), here for the tokenizer files (tokenizer.json's model section, vocab.json,
merges.txt), so every loader, whatever its family, reads the same way. The files themselves are opened by
`tinyformer.hub.folder_file`: regular files only (a named pipe would block its reader forever), their size
checked before a byte is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinyformer.errors import UserError
from tinyformer.files import read_text
from tinyformer.hub import MAX_TOKENIZER_BYTES, folder_file, folder_json

REQUIRED: Any = object()  # a Key's default when the key must be there
MAX_VOCAB = 2**24  # token ids: 16.7 million; the largest real vocabularies have about 260,000 tokens
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
TYPE_NAMES |= {dict: "an object", list: "a list"}


@dataclass(frozen=True)
class Key:
    """One key of a file: its type, its allowed range, and what an absent or null value means."""

    name: str  # the key; a dotted name reads inside an object ("rope_scaling.rope_type")
    kind: type  # int, float, bool, str, dict or list
    default: Any = REQUIRED  # what an absent (or null) key means; REQUIRED: it must be there
    low: float | None = None  # the smallest value allowed (numbers)
    high: float | None = None  # the largest value allowed (numbers)
    bounds: str = "[]"  # whether low and high themselves are allowed: "[]", "(]", "[)" or "()"
    field: str = ""  # the field of tinyformer's config that takes the value as it is, if one does

    def span(self) -> str:
        return f"{self.bounds[0]}{self.low:,}, {self.high:,}{self.bounds[1]}"


def shown(value: Any) -> str:
    """A value as an error line shows it: its JSON-ish repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + f"... ({len(text):,} characters)"


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    names = {bool: "a bool", int: "an integer", float: "a float", str: "a string", list: "a list"}
    return names.get(type(value), "an object")


def check_value(value: Any, key: Key, where: str, name: str | None = None) -> Any:
    """`value` if it is of `key`'s type and in its range (ints written for floats become floats); else a
    UserError naming `where` (the file) and the key."""
    name = name or key.name
    is_type = isinstance(value, key.kind) and not (key.kind is int and isinstance(value, bool))
    if key.kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, is_type = float(value), True
    if not is_type:
        raise UserError(f"{where}: {name}={shown(value)} is {type_name(value)}; it must be {TYPE_NAMES[key.kind]}")
    if key.kind is float and not math.isfinite(value):
        raise UserError(f"{where}: {name}={value} is not a finite number")
    if key.low is not None and not _within(value, key):
        raise UserError(f"{where}: {name}={value:,} is out of range; it must be in {key.span()}")
    return value


def _within(value: float, key: Key) -> bool:
    above = value > key.low if key.bounds[0] == "(" else value >= key.low
    below = value < key.high if key.bounds[1] == ")" else value <= key.high
    return above and below


def read_keys(data: dict, keys: tuple[Key, ...], where: str) -> dict[str, Any]:
    """Every key of `keys` read from `data` and checked -> {name: value} (the default where absent or null)."""
    out = {}
    for key in keys:
        parent, _, leaf = key.name.rpartition(".")
        holder = out.get(parent) if parent else data  # a dotted key's object was read (and checked) before it
        value = holder.get(leaf) if isinstance(holder, dict) else None
        if value is None:
            if key.default is REQUIRED:
                raise UserError(f"{where}: {key.name} is missing; it must be {TYPE_NAMES[key.kind]}")
            out[key.name] = key.default
        else:
            out[key.name] = check_value(value, key, where)
    return out


def json_object(value: Any, where: str, name: str = "the file") -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{where}: {name} is {type_name(value)}; it must be an object")
    return value


# ---- tokenizer files -------------------------------------------------------------------------------------------
TOKEN_ID = Key("id", int, low=0, high=MAX_VOCAB, bounds="[)")
MODEL = (Key("model", dict), Key("model.type", str), Key("model.vocab", dict, None))
MODEL += (Key("model.merges", list, None), Key("model.unk_token", str, None))
ADDED = (Key("id", int, low=0, high=MAX_VOCAB, bounds="[)"), Key("content", str))
MODEL_TYPES = ("BPE", "WordLevel", "WordPiece")


def check_vocab(vocab: dict, where: str, name: str) -> dict[str, int]:
    """A {token: id} table whose every id is an integer in [0, MAX_VOCAB)."""
    for token, i in vocab.items():
        check_value(i, TOKEN_ID, where, f"{name}[{shown(token)}]")
    return vocab


def check_merge(item: Any, vocab: dict[str, int], where: str, name: str, prefix: str = "") -> tuple[str, str]:
    """One BPE merge ("a b", or [a, b]) whose two parts and result are tokens of `vocab` (the tokenizers library
    panics on a result it lacks); `prefix`: the model's continuing_subword_prefix, which the result drops."""
    pair = item.split(" ") if isinstance(item, str) else item
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
        raise UserError(f"{where}: {name}={shown(item)} is not a merge of two tokens ('a b')")
    if not pair[1].startswith(prefix):
        raise UserError(f"{where}: {name}={shown(item)}: {shown(pair[1])} does not start with {shown(prefix)}")
    for token in (*pair, pair[0] + pair[1][len(prefix) :]):
        if token not in vocab:
            raise UserError(f"{where}: {name}={shown(item)}: {shown(token)} is not in the vocabulary")
    return pair[0], pair[1]


def check_tokenizer_json(data: Any, where: str) -> dict:
    """A Hugging Face tokenizer.json (as parsed): its model section, vocabulary, merges and added tokens checked
    -> `data`. The library that builds the tokenizer then reads only values that passed."""
    data = json_object(data, where)
    model = read_keys(data, MODEL, where)
    if model["model.type"] not in MODEL_TYPES:
        raise UserError(f"{where}: model.type={shown(model['model.type'])} is not one of {', '.join(MODEL_TYPES)}")
    vocab = model["model.vocab"]
    if vocab is None:
        raise UserError(f"{where}: model.vocab is missing; it must be an object of token: id")
    check_vocab(vocab, where, "model.vocab")
    if model["model.type"] == "BPE":
        prefix = data["model"].get("continuing_subword_prefix") or ""
        for n, item in enumerate(model["model.merges"] or []):
            check_merge(item, vocab, where, f"model.merges[{n}]", prefix if isinstance(prefix, str) else "")
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise UserError(f"{where}: added_tokens is {type_name(added)}; it must be a list")
    for n, token in enumerate(added):
        read_keys(json_object(token, where, f"added_tokens[{n}]"), ADDED, f"{where}: added_tokens[{n}]")
    return data


def read_vocab_and_merges(folder: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's vocab.json and merges.txt, checked: {token: id} and the merges in order."""
    vocab_file = folder / "vocab.json"
    vocab = check_vocab(json_object(folder_json(vocab_file), str(vocab_file)), str(vocab_file), "token")
    merges_file = folder_file(folder / "merges.txt", MAX_TOKENIZER_BYTES)
    lines = read_text(merges_file).splitlines()
    first = 1 if lines and lines[0].startswith("#version") else 0
    merges = [(n + first + 1, line) for n, line in enumerate(lines[first:]) if line.strip()]
    return vocab, [check_merge(line, vocab, str(merges_file), f"line {number}") for number, line in merges]
