"""Pairs tables for seq2seq: reading, row-named errors, the seeded split, both vocabularies, ids and lengths."""

import json

import pytest
import torch

from tests.conftest import write_tsv
from tinyformer.data.bpe import BPETokenizer
from tinyformer.data.pairs import (
    SPECIALS,
    PairsConfig,
    SpecialCharTokenizer,
    encode_pairs,
    encode_text,
    fit_tokenizer,
    load_tokenizer,
    read_pairs,
    split_indices,
)
from tinyformer.data.reversal import BOS, EOS, PAD
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError

ROWS = [("cat", "CAT"), ("  dog ", "DOG"), ("cat", "KITTY"), ("émile", "ÉMILE")]


def test_csv_tsv_and_jsonl_read_the_same_pairs(tmp_path):
    tsv = write_tsv(tmp_path / "p.tsv", ("src", "tgt"), ROWS)
    csv = tmp_path / "p.csv"
    csv.write_text("src,tgt\n" + "".join(f'"{s}",{t}\n' for s, t in ROWS), encoding="utf-8")
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("".join(json.dumps({"src": s, "tgt": t}) + "\n" for s, t in ROWS), encoding="utf-8")
    for path in (tsv, csv, jsonl):
        p = read_pairs(path, "src", "tgt")
        assert p.sources == ["cat", "dog", "émile"] and p.targets == ["CAT", "DOG", "ÉMILE"]  # stripped
        assert p.rows == [1, 2, 4]  # row 3 repeats the source of row 1: the first row counts
        assert p.where == str(path)


@pytest.mark.parametrize(
    ("row", "words"), [(("  ", "X"), "row 2: empty source in column 'src'"), (("x", ""), "row 2: empty target")]
)
def test_an_empty_source_or_target_names_its_row(tmp_path, row, words):
    path = write_tsv(tmp_path / "p.tsv", ("src", "tgt"), [("a", "A"), row, ("b", "B")])
    with pytest.raises(UserError, match=words) as e:
        read_pairs(path, "src", "tgt")
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_missing_column_is_named_with_the_columns_present(tmp_path):
    path = write_tsv(tmp_path / "p.tsv", ("src", "target"), [("a", "A")])
    with pytest.raises(UserError) as e:
        read_pairs(path, "src", "tgt")
    assert "has no column 'tgt' (columns: src, target); pick one with --target-col" in str(e.value)


def test_the_split_is_a_seeded_partition_with_at_least_one_pair_each():
    train, val = split_indices(50, 0.1, seed=0)
    assert sorted(train + val) == list(range(50)) and len(val) == 5
    assert (train, val) == split_indices(50, 0.1, seed=0) and val != split_indices(50, 0.1, seed=1)[1]
    assert [len(x) for x in split_indices(3, 0.01, 0)] == [2, 1]  # val gets one even when the share rounds to 0
    assert [len(x) for x in split_indices(3, 0.99, 0)] == [1, 2]  # and train keeps one
    with pytest.raises(UserError, match="1 distinct pair"):
        split_indices(1, 0.1, 0)


def test_char_vocabulary_puts_the_specials_first_and_round_trips(tmp_path):
    tok = fit_tokenizer("char", ["abc", "ABC é"], vocab_size=0)
    assert isinstance(tok, SpecialCharTokenizer) and tok.vocab_size == 3 + 8
    assert tok.convert_ids_to_tokens([PAD, BOS, EOS]) == list(SPECIALS)
    ids = tok.encode("cab é")
    assert min(ids) >= 3 and tok.decode(ids) == "cab é"
    assert tok.decode([BOS, *ids, EOS, PAD], skip_special_tokens=True) == "cab é"
    assert tok.decode([*ids[:2], EOS]) == "ca<eos>"
    tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert isinstance(again, SpecialCharTokenizer) and again.encode("cab é") == ids
    with pytest.raises(UserError, match="outside the vocabulary: 'z'"):
        tok.encode("zab")


def test_bpe_vocabulary_puts_the_specials_first_and_round_trips(tmp_path):
    texts = ["the cat sat", "THE CAT SAT", "a dog", "A DOG"] * 20
    tok = fit_tokenizer("bpe", texts, vocab_size=300)
    assert isinstance(tok, BPETokenizer) and [tok.token_id(s) for s in SPECIALS] == [PAD, BOS, EOS]
    text = "the cat, naïve 🙂"  # characters never seen in training still encode: bytes
    ids = encode_text(tok, text)
    assert min(ids) >= 3 and tok.decode([BOS, *ids, EOS], skip_special_tokens=True) == text
    tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(tmp_path / "tokenizer.json")
    assert isinstance(again, BPETokenizer) and again.encode(text) == ids
    with pytest.raises(UserError, match="holds '<eos>', a special token"):
        encode_text(tok, "the <eos> cat")


def test_load_tokenizer_refuses_other_kinds(tmp_path):
    CharTokenizer(list("ab")).save(tmp_path / "gpt.json")  # a language model's characters: no specials
    with pytest.raises(UserError, match="not a char\\+specials tokenizer \\(found 'char'\\)"):
        load_tokenizer(tmp_path / "gpt.json")
    BPETokenizer.train(["ab ab"], 260).save(tmp_path / "plain_bpe.json")  # a BPE without the specials
    with pytest.raises(UserError, match="without <pad> <bos> <eos> at ids 0, 1, 2"):
        load_tokenizer(tmp_path / "plain_bpe.json")


def test_ids_follow_the_reversal_layout_and_a_long_pair_names_its_row(tmp_path):
    path = write_tsv(tmp_path / "p.tsv", ("source", "target"), [("ab", "BA"), ("abcd", "x")])
    pairs = read_pairs(path)
    tok = fit_tokenizer("char", pairs.sources + pairs.targets, 0)
    src, tgt = encode_pairs(tok, pairs, block_size=5)  # "abcd" + EOS is 5: just fits
    a, b = tok.encode("ab"), tok.encode("BA")
    assert src[0].tolist() == [*a, EOS, PAD, PAD] and tgt[0].tolist() == [BOS, *b, EOS]
    assert src.shape == (2, 5) and tgt.shape == (2, 4) and torch.all(tgt[1, 3:] == PAD)
    with pytest.raises(UserError) as e:
        encode_pairs(tok, pairs, block_size=4)
    assert f"{path} row 2: the pair is too long for model.block_size=4: its source is 4 tokens + EOS" in str(e.value)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"tokenizer": "word"}, "data.tokenizer='word' is not one of char, bpe"),
        ({"tokenizer": "bpe", "vocab_size": 100}, "data.vocab_size=100 must be >= 259"),
        ({"val_fraction": 0.0}, "data.val_fraction=0.0 must be in (0, 1)"),
    ],
)
def test_bad_data_settings_are_named(kw, words):
    with pytest.raises(UserError, match=words.replace("(", "\\(").replace(")", "\\)")):
        PairsConfig(**kw)
