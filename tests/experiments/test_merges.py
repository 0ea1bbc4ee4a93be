"""`experiment merges`: the merges the report shows are those the tokenizers learn, its token counts are what the
learned vocabulary encodes, and the report is the same in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tinyformer.experiments import merges as study
from tinyformer.results import table_facts

pytest.importorskip("tokenizers")


def test_the_first_merges_of_a_small_text_are_the_pairs_counted_by_hand():
    """ "low lower lowest": GPT-2's words are low, Ġlower, Ġlowest. (l, o) and (o, w) occur 3 times each: the tie
    goes to the pair that sorts first, (l, o); then (lo, w), 3 times. Then (Ġ, low) and (low, e) occur twice:
    "low" sorts before "Ġ" (U+0120), so (low, e). WordPiece spells the words l ##o ##w ...: "##o" sorts before
    "l", so its tie goes to (##o, ##w)."""
    assert study.bpe_merges("low lower lowest", 3) == [(("l", "o"), 3), (("lo", "w"), 3), (("low", "e"), 2)]
    assert study.wordpiece_merges("low lower lowest", 2) == [(("##o", "##w"), 3), (("l", "##ow"), 3)]


def test_a_token_is_shown_with_its_spaces_and_newlines_visible():
    assert study.readable("Ġt", byte_level=True) == "`␣t`"
    assert study.readable("ĊĊ", byte_level=True) == "`↵↵`"
    assert study.readable("Ã©", byte_level=True) == "`Ã©`"  # the two bytes of "é": no character alone
    assert study.readable("##a|b", byte_level=False) == "`##a¦b`"  # a bar would cut the table's cell


@pytest.fixture
def report(text_file, tmp_path) -> dict[str, str]:
    study.run(tmp_path / "merges", quick=True, data=str(text_file))
    return table_facts((tmp_path / "merges" / "report.md").read_text(encoding="utf-8"))


def test_the_report_counts_what_the_learned_tokenizers_encode(report, text_file):
    from tinyformer.data.bpe import BPETokenizer
    from tinyformer.data.subword import SPECIALS, SubwordTokenizer

    train, val = study.splits(text_file.read_text(encoding="utf-8"))
    rows = [n for n in study.GROWTH if f"table 3: {n} / val tokens" in report]
    assert rows[:2] == [0, 100], rows
    for n in rows:
        tok = BPETokenizer.train([train], 256 + n)
        assert report[f"table 3: {n} / val tokens"] == f"{len(tok.encode(val)):,}"
        assert float(report[f"table 3: {n} / tokens per character"]) == round(len(tok.encode(val)) / len(val), 4)
    merges = json.loads(tok.hf.to_str())["model"]["merges"]  # the file a run saves: "a b" or [a, b] by version
    tokens = ["".join(m.split(" ") if isinstance(m, str) else m) for m in merges[: study.FIRST]]
    shown = [report[f"table 2: {r} / token"] for r in range(1, study.FIRST + 1)]
    assert shown == [study.readable(t, byte_level=True) for t in tokens]
    wp = SubwordTokenizer.train(train.split("\n\n"), 1000).hf.get_vocab()
    grown = sorted((t for t in wp if t not in SPECIALS and len(t.removeprefix("##")) > 1), key=wp.get)
    shown = [report[f"table 4: {r} / piece"] for r in range(1, study.FIRST + 1)]
    assert shown == [study.readable(t, byte_level=False) for t in grown[: study.FIRST]]


def test_the_report_is_the_same_in_every_process(report, text_file, tmp_path):
    """Two fresh processes with other hash seeds write the same report as this one."""
    seen = set()
    for seed in ("1", "2"):
        out = tmp_path / f"again-{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        args = ["-m", "tinyformer", "experiment", "merges", "--quick", "--data", str(text_file), "--out", str(out)]
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        seen.add((out / "report.md").read_text(encoding="utf-8"))
    assert seen == {(tmp_path / "merges" / "report.md").read_text(encoding="utf-8")}
