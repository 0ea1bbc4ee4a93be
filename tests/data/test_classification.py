import json
import os
from collections import Counter
from pathlib import Path

import pytest

from tinyformer.data.classification import (
    LabelledTexts,
    check_labels,
    read_table,
    speaker_speeches,
    stratified_split,
)
from tinyformer.errors import UserError

ROWS = [
    ("A fine, sunny day", "pos"),
    ("Rain again, all week", "neg"),
    ('Tab\tinside? no, a quote "here"', "pos"),
    ("Nothing works", "neg"),
    ("  padded text  ", " neu "),
    ("meh", "neu"),
]


def write_csv(path: Path, header: list[str], rows: list[tuple], sep: str = ",") -> Path:
    def cell(v: str) -> str:
        return '"' + v.replace('"', '""') + '"' if any(ch in v for ch in f'{sep}"\n') else v

    path.write_text("\n".join(sep.join(cell(v) for v in r) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


def write_jsonl(path: Path, objs: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(o) for o in objs) + "\n", encoding="utf-8")
    return path


def test_csv_tsv_and_jsonl_read_the_same_examples(tmp_path):
    a = read_table(write_csv(tmp_path / "d.csv", ["id", "text", "label"], [(str(i), *r) for i, r in enumerate(ROWS)]))
    b = read_table(write_csv(tmp_path / "d.tsv", ["text", "label"], ROWS, sep="\t"))
    c = read_table(write_jsonl(tmp_path / "d.jsonl", [{"label": y, "text": t, "extra": 1} for t, y in ROWS]))
    assert a.texts[4] == "padded text" and a.labels[4] == "neu"  # whitespace stripped
    assert a.texts[2] == 'Tab\tinside? no, a quote "here"'  # quoted cells survive
    assert a.texts == b.texts == c.texts
    assert a.labels == b.labels == c.labels == ["pos", "neg", "pos", "neg", "neu", "neu"]
    assert a.ids == b.ids == c.ids == [1, 2, 3, 4, 5, 6]
    assert a.classes == ["neg", "neu", "pos"] and len(a) == 6


def test_jsonl_skips_blank_lines_and_stringifies_numeric_labels(tmp_path):
    p = tmp_path / "d.ndjson"
    p.write_text(
        '{"text": "a", "label": 1}\n\n{"text": "b", "label": 0}\n{"text": "c", "label": 1}\n \n'
        '{"text": "d", "label": 0}\n',
        encoding="utf-8",
    )
    d = read_table(p)
    assert d.labels == ["1", "0", "1", "0"] and d.texts == ["a", "b", "c", "d"]
    assert d.ids == [1, 3, 4, 6]  # line numbers in the file


def test_subset_keeps_the_given_order():
    d = LabelledTexts(["a", "b", "c"], ["x", "y", "x"], [10, 20, 30])
    s = d.subset([2, 0])
    assert (s.texts, s.labels, s.ids) == (["c", "a"], ["x", "x"], [30, 10])


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"text_col": "body"}, ["'body'", "--text-col"]),
        ({"label_col": "label"}, ["'label'", "--label-col"]),
        ({"text_col": "body", "label_col": "label"}, ["'body'", "'label'", "--text-col", "--label-col"]),
    ],
)
def test_missing_columns_are_named_with_the_existing_ones(tmp_path, kwargs, named):
    p = write_csv(tmp_path / "data.csv", ["text", "sentiment"], [(t, y) for t, y in ROWS])
    kwargs.setdefault("label_col", "sentiment")
    with pytest.raises(UserError) as e:
        read_table(p, **kwargs)
    msg = str(e.value)
    assert "\n" not in msg and "(columns: text, sentiment)" in msg
    assert all(n in msg for n in named), msg


def test_a_label_with_one_example_is_named(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [{"text": t, "label": y} for t, y in ROWS] + [{"text": "z", "label": "odd"}])
    with pytest.raises(UserError, match=r"'odd'.*at least 2"):
        read_table(p)
    with pytest.raises(UserError, match="at least 2"):
        check_labels(LabelledTexts(["a", "b"], ["x", "x"], [1, 2]), "src")
    check_labels(LabelledTexts(["a", "b", "c", "d"], ["x", "y", "x", "y"], [1, 2, 3, 4]), "src")


@pytest.mark.parametrize(
    ("text", "label", "match"), [("   ", "pos", "row 3: empty text"), ("ok", " ", "row 3: missing label")]
)
def test_empty_text_or_label_names_the_row(tmp_path, text, label, match):
    rows = [(t, y) for t, y in ROWS]
    rows[2] = (text, label)
    p = write_csv(tmp_path / "d.csv", ["text", "label"], rows)
    with pytest.raises(UserError, match=match) as e:
        read_table(p)
    assert str(p) in str(e.value)


def test_bad_files_are_user_errors(tmp_path):
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\xe9,x\n".encode("latin-1"))
    with pytest.raises(UserError, match="not UTF-8.*offset 14"):
        read_table(latin)
    with pytest.raises(UserError, match="does not exist"):
        read_table(tmp_path / "nope.csv")
    with pytest.raises(UserError, match="is a folder, not a file"):
        read_table(tmp_path)  # a folder is not a table
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": "x"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(UserError, match="line 2 is a JSON list"):
        read_table(bad)
    bad.write_text('{"text": "a", "label": "x"}\n\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(UserError, match="line 3 is not valid JSON"):
        read_table(bad)
    txt = tmp_path / "d.txt"
    txt.write_text("text,label\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"\.csv, \.tsv, \.jsonl, \.ndjson"):
        read_table(txt)
    header_only = write_csv(tmp_path / "h.csv", ["text", "label"], [])
    with pytest.raises(UserError, match="no rows"):
        read_table(header_only)
    repeated = write_csv(tmp_path / "r.csv", ["text", "label", "text"], [("a", "x", "b"), ("c", "y", "d")])
    with pytest.raises(UserError, match="header names column\\(s\\) 'text' more than once"):
        read_table(repeated)
    rows = [(t, y, "", "") for t, y in (("a", "x"), ("b", "x"), ("c", "y"), ("d", "y"))]
    other = write_csv(tmp_path / "o.csv", ["text", "label", "note", "note"], rows)
    assert read_table(other).texts == ["a", "b", "c", "d"]  # a repeated column the task never reads is no harm


# ---------------------------------------------------------------------------- split


def test_stratified_split_is_a_partition_with_class_proportions():
    labels = ["a"] * 50 + ["b"] * 23 + ["c"] * 7 + ["d"] * 2
    s = stratified_split(labels, 0.1, 0.2, seed=3)
    parts = [set(s[k]) for k in ("train", "val", "test")]
    assert sum(map(len, parts)) == len(labels) and set.union(*parts) == set(range(len(labels)))
    assert all(s[k] == sorted(s[k]) for k in s)
    for y, n in Counter(labels).items():
        got = {k: sum(labels[i] == y for i in s[k]) for k in s}
        assert abs(got["test"] - n * 0.2) <= 1 and abs(got["val"] - n * 0.1) <= 1, (y, got)
        assert got["train"] >= 1 and got["test"] >= 1


def test_stratified_split_depends_on_the_seed_only():
    labels = [str(i % 3) for i in range(90)]
    assert stratified_split(labels, 0.1, 0.1, seed=0) == stratified_split(list(labels), 0.1, 0.1, seed=0)
    assert stratified_split(labels, 0.1, 0.1, seed=0)["test"] != stratified_split(labels, 0.1, 0.1, seed=1)["test"]


@pytest.mark.parametrize(("val", "test"), [(-0.1, 0.1), (0.1, 0.0), (0.5, 0.5), (float("nan"), 0.1)])
def test_stratified_split_rejects_bad_fractions(val, test):
    with pytest.raises(UserError, match=f"val_fraction={val}, test_fraction={test}"):
        stratified_split(["a", "b"] * 5, val, test, seed=0)


# ---------------------------------------------------------------------------- speakers

PLAY = """ACT I

ALICE:
Good morrow.

BOB:
Well enough,
and you?

ALICE:
Then let us go.

DAVE:
Adieu.

CAROL:
Farewell.

BOB:
Good morrow.

ALICE:

CAROL:
Farewell.

BOB:
Stay a while.

ALICE:
Once more.
"""


def test_speaker_speeches_on_a_small_play():
    # speeches (the title and the empty ALICE are not): 0 ALICE, 1 BOB, 2 ALICE, 3 DAVE, 4 CAROL,
    # 5 BOB (repeats ALICE's 0), 6 CAROL (repeats 4), 7 BOB, 8 ALICE
    d = speaker_speeches(PLAY, k=2)
    assert d.labels == ["ALICE", "BOB", "ALICE", "BOB", "ALICE"]
    assert d.texts == ["Good morrow.", "Well enough,\nand you?", "Then let us go.", "Stay a while.", "Once more."]
    assert d.ids == [0, 1, 2, 7, 8]


def test_speaker_speeches_ties_by_name_and_k_checks():
    # after dropping repeated texts: ALICE 3, BOB 2, DAVE 1, CAROL 1 -> CAROL beats DAVE by name, not by order
    assert speaker_speeches(PLAY, k=3).classes == ["ALICE", "BOB", "CAROL"]
    assert speaker_speeches(PLAY, k=4).ids == [0, 1, 2, 3, 4, 7, 8]
    with pytest.raises(UserError, match="k=1"):
        speaker_speeches(PLAY, k=1)
    with pytest.raises(UserError, match="k=5.*only 4"):
        speaker_speeches(PLAY, k=5)
    with pytest.raises(UserError, match="has 1 speaker\\(s\\) .*needs 2") as e:  # no k could help: none suggested
        speaker_speeches("ALICE:\nHello there.\n\nALICE:\nAgain.\n", k=2)
    assert "use k" not in str(e.value)


@pytest.fixture(scope="module")
def play() -> str:
    src = os.environ.get("TINYFORMER_DATA")
    if not src or not Path(src).is_file():
        pytest.skip("TINYFORMER_DATA is not set to the Tiny Shakespeare file")
    return Path(src).read_text(encoding="utf-8")


def test_real_play_speakers_never_share_a_speech_across_splits(play):
    d = speaker_speeches(play, k=5)
    counts = Counter(d.labels)
    assert len(counts) == 5 and min(counts.values()) > 100, counts
    assert len(set(d.ids)) == len(d) and len(set(d.texts)) == len(d)
    assert not any(f"{y}:" in t.splitlines() for t, y in zip(d.texts, d.labels))
    s = stratified_split(d.labels, 0.1, 0.1, seed=0)
    parts = {k: d.subset(v) for k, v in s.items()}
    for a, b in [("train", "val"), ("train", "test"), ("val", "test")]:
        assert not set(parts[a].ids) & set(parts[b].ids)
        assert not set(parts[a].texts) & set(parts[b].texts), (a, b)
    assert sum(len(p) for p in parts.values()) == len(d)
