"""Byte-level BPE: exact round trips of any Unicode, merges learned from the training split only, one file."""

from __future__ import annotations

import random

import pytest

from tests.conftest import SYNTHETIC
from tinyformer.data.bpe import BPETokenizer, load_text_tokenizer
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError


@pytest.fixture(scope="module")
def tok() -> BPETokenizer:
    return BPETokenizer.train([SYNTHETIC], 400)


def random_text(rng: random.Random, n: int) -> str:
    """Code points from every plane that has characters (surrogates excluded: they are not text)."""
    ranges = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    out = []
    for _ in range(n):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def test_any_unicode_round_trips_exactly_including_unseen_characters(tok):
    rng = random.Random(0)
    for _ in range(200):
        text = random_text(rng, rng.randint(0, 40))
        assert tok.decode(tok.encode(text)) == text
    for text in ("  two  spaces\r\n\ttab", "日本語のテキスト", "emoji 🎉👩‍👩‍👧 zwj", "\x00nul", "ﬁ ligature é é"):
        assert tok.decode(tok.encode(text)) == text  # no normalisation: NFC and NFD stay apart


def test_merges_make_tokens_longer_than_bytes_and_the_size_is_at_most_what_was_asked(tok):
    assert 300 < tok.vocab_size <= 400  # a small text runs out of pairs worth merging before 400
    text = SYNTHETIC[:2000]
    assert len(tok.encode(text)) < len(text.encode("utf-8")) / 2  # seen words compress well


def test_merges_come_from_the_given_texts_only():
    a = BPETokenizer.train(["banana bandana " * 200], 300)
    b = BPETokenizer.train(["xylophone zephyr " * 200], 300)
    assert len(a.encode("bandana")) < len(b.encode("bandana"))


def test_specials_take_the_first_ids_and_stay_single_tokens():
    tok = BPETokenizer.train([SYNTHETIC], 300, specials=("<pad>", "<bos>", "<eos>"))
    assert [tok.token_id(s) for s in ("<pad>", "<bos>", "<eos>")] == [0, 1, 2]
    assert tok.decode([1, *tok.encode("ROMEO"), 2], skip_special_tokens=True) == "ROMEO"


def test_save_load_and_the_loader_tells_the_kinds_apart(tok, tmp_path):
    tok.save(tmp_path / "bpe.json")
    again = load_text_tokenizer(tmp_path / "bpe.json")
    assert isinstance(again, BPETokenizer) and again.encode("ROMEO: soft") == tok.encode("ROMEO: soft")
    CharTokenizer.from_text("abc").save(tmp_path / "char.json")
    assert isinstance(load_text_tokenizer(tmp_path / "char.json"), CharTokenizer)
    (tmp_path / "bad.json").write_text('{"type": "digits"}')
    with pytest.raises(UserError, match="not a char tokenizer"):
        load_text_tokenizer(tmp_path / "bad.json")


def test_too_small_a_vocabulary_is_one_line():
    with pytest.raises(UserError, match="vocab_size >= 256"):
        BPETokenizer.train(["abc"], 100)


def test_labels_for_plots_are_the_token_text_made_visible(tok):
    labels = tok.convert_ids_to_tokens(tok.encode("ROMEO:\nBut"))
    assert "".join(labels) == "ROMEO:↵But"
