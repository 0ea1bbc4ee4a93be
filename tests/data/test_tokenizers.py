import pytest

from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError


def test_round_trip_and_sorted_vocabulary():
    tok = CharTokenizer.from_text("hello world\n")
    assert tok.chars == sorted(set("hello world\n"))
    ids = tok.encode("low\nword")
    assert tok.decode(ids) == "low\nword"
    assert max(ids) < tok.vocab_size


def test_unknown_characters_are_listed():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UserError) as e:
        tok.encode("abzxz€")
    msg = str(e.value)
    assert "'x'" in msg and "'z'" in msg and "'€'" in msg and "2 character" not in msg
    assert "3 character(s) outside the vocabulary" in msg and "\n" not in msg


def test_json_save_and_load(tmp_path):
    tok = CharTokenizer.from_text("To be, or not to be:\nthat")
    tok.save(tmp_path / "tokenizer.json")
    again = CharTokenizer.load(tmp_path / "tokenizer.json")
    assert again.chars == tok.chars
    assert again.encode("be not") == tok.encode("be not")
