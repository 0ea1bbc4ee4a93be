"""The seq2seq task on the user's own pairs: a run that learns them, its commands, and one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import user_error
from tests.conftest import SEQ2SEQ_TINY, upper_case_words, write_tsv
from tinyformer import config as cfg
from tinyformer.cli import main
from tinyformer.data.bpe import BPETokenizer
from tinyformer.data.pairs import SpecialCharTokenizer
from tinyformer.device import seed_everything
from tinyformer.errors import UserError
from tinyformer.runs import load_run
from tinyformer.tasks import get_task
from tinyformer.train.trainer import Trainer


def sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def training_words(run) -> list[str]:
    """The sources of the pairs the run trained on, from its own config (as `prepare` splits them)."""
    task = get_task("seq2seq").prepare(load_run(run, weights=None).config)
    return [task.pairs.sources[i] for i in task.index["train"]]


# ---- the must-hold: a tiny pairs file is learned -------------------------------------------------------------------
@pytest.mark.slow
def test_upper_casing_run_reaches_exact_match_1_on_its_training_pairs(seq2seq_run):
    scores = json.loads((seq2seq_run / "scores.json").read_text())
    assert scores["train"]["exact_match"] == 1.0 and scores["train"]["pairs"] == scores["train"]["of"] == 180
    assert scores["val"]["pairs"] == 20 and 0.0 <= scores["val"]["exact_match"] <= 1.0
    assert isinstance(load_run(seq2seq_run, weights=None).tokenizer, SpecialCharTokenizer)


@pytest.mark.slow
def test_translate_writes_the_upper_case_of_training_words(seq2seq_run, capsys):
    for word in training_words(seq2seq_run)[:5]:
        for beam in ("1", "3"):
            assert main(["translate", str(seq2seq_run), f"  {word} ", "--beam", beam]) == 0
            assert capsys.readouterr().out.strip() == word.upper()


@pytest.mark.slow
def test_eval_scores_the_held_out_pairs_as_the_run_did(seq2seq_run, capsys):
    assert main(["eval", str(seq2seq_run)]) == 0
    out = capsys.readouterr().out.splitlines()
    val = json.loads((seq2seq_run / "scores.json").read_text())["val"]
    assert out[0].startswith(f"20 held-out pairs, greedy: exact match {val['exact_match']:.4f}")
    missed = round(20 * (1 - val["exact_match"]))
    assert len(out) == 1 + min(missed, 3)
    table = Path(load_run(seq2seq_run, weights=None).config.data.path).read_text().splitlines()
    for line in out[1:]:  # '  row 7: 'abc' -> 'ABD' (expected 'ABC')': the row of the file, a wrong answer
        row, rest = line.removeprefix("  row ").split(": ", 1)
        source, output, expected = (part.strip("'") for part in re.split(r"' -> '|' \(expected '", rest[:-1]))
        assert table[int(row)].split("\t") == [source, expected] and output != expected


@pytest.mark.slow
def test_viz_draws_encoder_decoder_and_cross_attention_of_a_seq2seq_run(seq2seq_run, tmp_path, capsys):
    word = training_words(seq2seq_run)[0]
    assert main(["viz", "attention", str(seq2seq_run), "--text", word, "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == ["run-cross-L0-H0.png", "run-decoder-L0-H0.png", "run-encoder-L0-H0.png"]
    capsys.readouterr()
    assert main(["viz", "cross-attention", str(seq2seq_run), word, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"output: {word.upper()}" in out and "<eos>" in out and "alignment score" not in out


@pytest.mark.slow
def test_translate_and_eval_errors_are_one_line(seq2seq_run, capsys):
    run = str(seq2seq_run)
    assert "the input is empty" in user_error(capsys, "translate", run, "   ")
    assert "outside the vocabulary: '7'" in user_error(capsys, "translate", run, "ab7")
    assert "the input is 16 tokens; this model takes at most 15 (+ EOS)" in user_error(
        capsys, "translate", run, "a" * 16
    )
    assert "--beam 0 must be > 0" in user_error(capsys, "translate", run, "abc", "--beam", "0")
    assert "--n does not apply to a 'seq2seq' run" in user_error(capsys, "eval", run, "--n", "5")


# ---- user errors in the table: one line naming the row, and no run folder -----------------------------------------
@pytest.mark.parametrize(
    ("rows", "extra", "words"),
    [
        ([("abc", "ABC"), ("", "X")], [], "row 2: empty source in column 'src'"),
        ([("abc", "ABC"), ("xy", " ")], [], "row 2: empty target in column 'tgt'"),
        ([("abc", "ABC")], ["--target-col", "upper"], "has no column 'upper' (columns: src, tgt); pick one with"),
        ([("ab", "AB"), ("abcdefgh", "X")], sets("model.block_size=8"), "row 2: the pair is too long for model.block"),
    ],
)
def test_table_errors_name_the_row_and_leave_no_run_folder(tmp_path, capsys, rows, extra, words):
    data = write_tsv(tmp_path / "p.tsv", ("src", "tgt"), rows)
    args = ["train", "seq2seq", "--data", str(data), "--source-col", "src", "--target-col", "tgt", *extra]
    err = user_error(capsys, *args, "--device", "cpu", "--out", str(tmp_path / "run"))
    assert words in err and str(data) in err
    assert not (tmp_path / "run").exists()


def test_seq2seq_needs_a_table_and_reverse_has_no_columns(tmp_path, capsys):
    assert "train seq2seq needs a table of pairs: --data" in user_error(capsys, "train", "seq2seq", "--out", "x")
    err = user_error(capsys, "train", "reverse", "--source-col", "src", "--out", str(tmp_path / "r"))
    assert "--source-col is read by train seq2seq, not by train reverse" in err


# ---- the same task with a byte-level BPE vocabulary ---------------------------------------------------------------
def bpe_task(data, *overrides: str):
    base = [f"data.path={json.dumps(str(data))}", "data.source_col='src'", "data.target_col='tgt'"]
    base += ["data.tokenizer='bpe'", "data.vocab_size=300", "train.device='cpu'"]
    config = cfg.resolve(get_task("seq2seq").default_config(), [], [*base, *SEQ2SEQ_TINY, *overrides])
    seed_everything(0)
    return get_task("seq2seq").prepare(config)


@pytest.mark.slow
def test_a_bpe_vocabulary_trains_and_decodes_its_training_pairs(tmp_path):
    data = write_tsv(tmp_path / "p.tsv", ("src", "tgt"), [(w, w.upper()) for w in upper_case_words(60, seed=1)])
    task = bpe_task(data)
    assert isinstance(task.tokenizer, BPETokenizer) and task.config.model.vocab_size == task.tokenizer.vocab_size
    model = task.build_model()
    Trainer(model, task, task.config.train, tmp_path / "run", progress=False).fit()
    r = task.score(model, "train")
    assert r["exact_match"] == 1.0 and r["pairs"] == 54
    word = task.pairs.sources[task.index["train"][0]]
    assert task.predict(model, word) == word.upper()


def test_a_given_vocabulary_is_reused_and_gives_the_same_ids(tmp_path):
    data = write_tsv(tmp_path / "p.tsv", ("src", "tgt"), [(w, w.upper()) for w in upper_case_words(30)])
    first = bpe_task(data)
    again = get_task("seq2seq").prepare(first.config, first.tokenizer)  # what a resumed run does
    assert again.tokenizer is first.tokenizer
    assert all(torch.equal(a, b) for a, b in zip(first.train + first.val, again.train + again.val, strict=True))
    with pytest.raises(UserError, match="model.vocab_size=301 does not match what the data gives"):
        bpe_task(data, "model.vocab_size=301")
