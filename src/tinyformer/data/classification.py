"""Labelled texts for text classification, and a stratified train/val/test split.

Two sources: a table the user brings (CSV, TSV or JSON Lines with a text and a
label column), and speaker identification on Tiny Shakespeare, where each
speech is one example labelled by who speaks it. The split shuffles each class
on its own, so every class keeps its share in train, val and test
(stratification), and a given seed gives the same split in any process.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import input_file

SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson")
BOM = b"\xef\xbb\xbf"


@dataclass
class LabelledTexts:
    """Parallel lists: example i is texts[i] with labels[i], found at ids[i] in its source."""

    texts: list[str]  # one example's text
    labels: list[str]  # its label, as a string
    ids: list[int]  # where it came from: row number in the file (1-based) or speech index in the play

    def __post_init__(self) -> None:
        if not len(self.texts) == len(self.labels) == len(self.ids):
            raise ValueError(f"lengths differ: {len(self.texts)} texts, {len(self.labels)} labels, {len(self.ids)} ids")

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, idx: list[int]) -> LabelledTexts:
        """The examples at positions idx, in that order."""
        return LabelledTexts([self.texts[i] for i in idx], [self.labels[i] for i in idx], [self.ids[i] for i in idx])

    @property
    def classes(self) -> list[str]:
        """The distinct labels, sorted."""
        return sorted(set(self.labels))


# ---------------------------------------------------------------------------- tables


def read_table(path: str | Path, text_col: str = "text", label_col: str = "label") -> LabelledTexts:
    """Read a .csv / .tsv (header row) or .jsonl / .ndjson table of labelled texts; check every label can be split.

    A text that repeats an earlier row's text is dropped, so no text is in two splits.
    """
    p, rows = read_records(path, [(text_col, "--text-col"), (label_col, "--label-col")])
    texts, labels, ids, seen = [], [], [], set()
    for row_no, (t, y) in rows:
        if not t:
            raise UserError(f"{p} row {row_no}: empty text in column {text_col!r}; every row needs some text")
        if not y:
            raise UserError(f"{p} row {row_no}: missing label in column {label_col!r}; every row needs a label")
        if t in seen:
            continue  # a repeated text could land in train and test at once; the first row counts
        seen.add(t)
        texts.append(t), labels.append(y), ids.append(row_no)
    data = LabelledTexts(texts, labels, ids)
    check_labels(data, str(p))
    return data


def read_records(path: str | Path, columns: list[tuple[str, str]]) -> tuple[Path, list[tuple[int, list[str]]]]:
    """The table's path and, per row, (row number, the stripped cell of each column asked for, in order).

    `columns` holds (column, the flag that picks it) for each column the caller needs; a missing column is
    named with its flag. Row numbers are 1-based: data rows after the header (CSV/TSV), lines (JSON Lines).
    """
    p = input_file(path, "table")
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise UserError(f"{p}: unknown table format {p.suffix or '(no suffix)'!r}; use one of {', '.join(SUFFIXES)}")
    text = _decode(p)
    found, records = _json_rows(text, p) if suffix in (".jsonl", ".ndjson") else _delimited_rows(text, p, suffix)
    twice = [c for c, _ in columns if found.count(c) > 1]
    if twice:  # a row would keep the last of its cells and silently drop the others
        raise UserError(f"{p}: the header names column(s) {', '.join(map(repr, twice))} more than once")
    missing = [c for c, _ in columns if c not in found]
    if missing and found:
        _missing_columns(p, missing, found, columns)
    if not records:
        needed = " and ".join(repr(c) for c, _ in columns)
        raise UserError(f"{p} has no rows; it needs a header and at least one row with {needed}")
    return p, [(n, [_cell(record.get(c), p, n, c) for c, _ in columns]) for n, record in records]


def _decode(p: Path) -> str:
    raw = p.read_bytes()
    skip = len(BOM) if raw.startswith(BOM) else 0  # spreadsheets often write a byte-order mark
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{p} is not UTF-8 text (bad byte at offset {e.start + skip}); save it as UTF-8") from None


def _delimited_rows(text: str, p: Path, suffix: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """Header columns and (row number, record) pairs; blank lines are not rows."""
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if suffix == ".tsv" else ",")
    try:
        columns = [c.strip() for c in reader.fieldnames or []]
        reader.fieldnames = columns
        records = [(n, record) for n, record in enumerate(reader, start=1)]
    except csv.Error as e:
        raise UserError(f"{p} line {reader.line_num}: cannot parse {suffix[1:].upper()} ({e})") from None
    return columns, records


def _json_rows(text: str, p: Path) -> tuple[list[str], list[tuple[int, dict]]]:
    """Keys of the first object and (line number, object) pairs; blank lines are skipped."""
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{p} line {n} is not valid JSON ({e.msg}); each line must be one JSON object") from None
        if not isinstance(obj, dict):
            raise UserError(f"{p} line {n} is a JSON {type(obj).__name__}, not an object; each line must be one object")
        records.append((n, obj))
    return (list(records[0][1]) if records else []), records


def _missing_columns(p: Path, missing: list[str], columns: list[str], asked: list[tuple[str, str]]) -> None:
    flags = " / ".join(flag for c, flag in asked if c in missing)
    names = ", ".join(repr(c) for c in missing)
    noun, pronoun = ("column", "one") if len(missing) == 1 else ("columns", "them")
    raise UserError(f"{p} has no {noun} {names} (columns: {', '.join(columns)}); pick {pronoun} with {flags}")


def _cell(value: object, p: Path, row_no: int, col: str) -> str:
    """A text or label cell as a stripped string; None (absent) becomes ''; JSON numbers become their text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)):  # JSON numbers (and true/false) as labels
        return str(value)
    raise UserError(f"{p} row {row_no}: column {col!r} holds a {type(value).__name__}; use a string or a number")


def check_labels(data: LabelledTexts, source: str) -> None:
    """Refuse data a stratified split cannot handle: one class only, or a class with a single example."""
    counts = Counter(data.labels)
    if len(counts) < 2:
        found = ", ".join(repr(c) for c in counts) or "none"
        raise UserError(f"{source} has {len(counts)} distinct label(s) ({found}); classification needs at least 2")
    single = sorted(c for c, n in counts.items() if n == 1)
    if single:
        more = f" and {len(single) - 5} more" if len(single) > 5 else ""
        names = ", ".join(repr(c) for c in single[:5]) + more
        raise UserError(
            f"{source}: label(s) {names} have only 1 example; every label needs at least 2 for a stratified split"
        )


# ---------------------------------------------------------------------------- Tiny Shakespeare speakers


def speaker_speeches(text: str, k: int = 5) -> LabelledTexts:
    """Speeches of the k most frequent speakers (ties by name), labelled by speaker; repeated texts kept once."""
    if k < 2:
        raise UserError(f"k={k} speakers is too few; speaker identification needs k >= 2")
    seen: set[str] = set()
    speeches = []  # (speech index in the play, speaker, text), first occurrence of each text only
    for i, (speaker, speech) in enumerate(_speeches(text)):
        if speech not in seen:
            seen.add(speech)
            speeches.append((i, speaker, speech))
    counts = Counter(speaker for _, speaker, _ in speeches)
    if len(counts) < k:
        if len(counts) < 2:  # nothing to tell apart: no smaller k helps
            raise UserError(f"the text has {len(counts)} speaker(s) ('NAME:' headings); speaker identification needs 2")
        raise UserError(f"k={k} speakers asked for, but the text has only {len(counts)}; use k <= {len(counts)}")
    keep = {s for s, _ in sorted(counts.items(), key=lambda sn: (-sn[1], sn[0]))[:k]}
    kept = [(i, s, t) for i, s, t in speeches if s in keep]
    return LabelledTexts([t for _, _, t in kept], [s for _, s, _ in kept], [i for i, _, _ in kept])


def _speeches(text: str) -> list[tuple[str, str]]:
    """(speaker, speech) for each blank-line-separated paragraph whose first line is 'NAME:' with lines below."""
    out = []
    for para in _paragraphs(text):
        head, body = para[0].strip(), "\n".join(para[1:]).strip()
        if head.endswith(":") and head[:-1].strip() and body:
            out.append((head[:-1].strip(), body))
    return out


def _paragraphs(text: str) -> list[list[str]]:
    paras, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            paras.append(current)
            current = []
    return paras + [current] if current else paras


# ---------------------------------------------------------------------------- split


def stratified_split(labels: list[str], val_fraction: float, test_fraction: float, seed: int) -> dict[str, list[int]]:
    """Indices for train/val/test, each class shuffled on its own (seeded by seed and label) and cut by fraction."""
    if not (val_fraction >= 0 and test_fraction > 0 and val_fraction + test_fraction < 1):
        raise UserError(
            f"val_fraction={val_fraction}, test_fraction={test_fraction}: "
            "need 0 <= val_fraction, 0 < test_fraction and val_fraction + test_fraction < 1"
        )
    by_class: dict[str, list[int]] = {}
    for i, y in enumerate(labels):
        by_class.setdefault(y, []).append(i)
    split: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for y, idx in by_class.items():
        random.Random(f"{seed}:{y}").shuffle(idx)
        n = len(idx)
        n_test = min(max(round(n * test_fraction), 1 if n >= 2 else 0), n - 1)  # >= 1 test, >= 1 train
        n_val = min(round(n * val_fraction), n - 1 - n_test)  # val gives way first
        split["test"] += idx[:n_test]
        split["val"] += idx[n_test : n_test + n_val]
        split["train"] += idx[n_test + n_val :]
    return {name: sorted(idx) for name, idx in split.items()}
