"""Tagged sentences: sub-word alignment (one first piece per word), CoNLL / JSONL reading and its errors, the
built-in names task (held-out names never leak into training passages), and seqeval's entity scores by hand."""

from __future__ import annotations

import json
import os
import random
import re
import string
from pathlib import Path

import pytest

from tinyformer.data.subword import SubwordTokenizer
from tinyformer.data.tagging import (
    align,
    name_mentions,
    passages,
    play_names,
    read_tagged,
    split_words,
    tag_names,
    word_pieces,
)
from tinyformer.data.tokenizers import IGNORE
from tinyformer.errors import UserError

# ---------------------------------------------------------------------------- sub-word alignment

COMMON = "the a of and to my lord is in it you that he was for on with his".split()
LONG = ["antidisestablishment", "understanding", "extraordinarily", "Gloucestershire", "unquestionable"]
PUNCT = [",", ".", "!", "?", ";", "'", "--", "o'er", "e'en"]
ERASED = ["\u200b", "\x07", "\u200b\u200b", "\x00"]  # the BERT normaliser removes these entirely
ODD = ["\u00e9t\u00e9", "na\u00efve", "1597", "caf\u00e9s", "\u0416\u0443\u043a"]  # accents, digits, unseen letters


@pytest.fixture(scope="module")
def tok() -> SubwordTokenizer:
    corpus = [" ".join(COMMON), " ".join(LONG[:2]), "romeo juliet tybalt mercutio verona", "o'er the hills, and far!"]
    return SubwordTokenizer.train(corpus * 20, vocab_size=120)  # small: long and rare words need many pieces


def random_word(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(COMMON)
    if kind < 0.5:
        return rng.choice(LONG)
    if kind < 0.65:  # a rare word: random letters, often several pieces or [UNK]
        return "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(1, 14)))
    if kind < 0.8:
        return rng.choice(PUNCT)
    if kind < 0.9:
        return rng.choice(ERASED)
    return rng.choice(ODD)


def random_sentences(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[random_word(rng) for _ in range(rng.randint(1, 30))] for _ in range(n)]


def test_word_pieces_are_each_words_own_pieces_and_erased_words_become_unk(tok):
    for words in random_sentences(50, seed=1):
        pieces = word_pieces(tok, words)
        assert len(pieces) == len(words)
        for w, p in zip(words, pieces):
            alone = tok.hf.encode(w, add_special_tokens=False).ids  # the word tokenised on its own
            assert p == (alone or [tok.unk_id]), w
    assert word_pieces(tok, ["the", "\u200b", "\x07", "lord"])[1:3] == [[tok.unk_id], [tok.unk_id]]
    assert max(len(p) for p in word_pieces(tok, LONG)) >= 4  # the vocabulary is small enough to split words


@pytest.mark.parametrize("seq_len", [512, 12, 6])
def test_align_gives_every_word_exactly_one_first_piece(tok, seq_len):
    rng = random.Random(seq_len)
    for words in random_sentences(200, seed=seq_len):
        pieces = word_pieces(tok, words)
        rows = align(tok, words, seq_len)
        tag_ids = [rng.randrange(5) for _ in words]
        firsts: list[int] = []
        for r, row in enumerate(rows):
            assert len(row.ids) <= seq_len
            assert row.ids[0] == tok.cls_id and row.ids[-1] == tok.sep_id
            assert row.first and row.start == len(firsts)  # rows follow each other, no word skipped or repeated
            assert row.first[0] == 1 and row.first == sorted(set(row.first))
            bounds = [*row.first, len(row.ids) - 1]  # the last word ends at [SEP]
            for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
                want = pieces[row.start + k][: seq_len - 2]  # only a word longer than a row is cut
                assert row.ids[a:b] == want, (words, row)
            labels = row.labels(tag_ids)
            assert len(labels) == len(row.ids)
            for pos, label in enumerate(labels):
                if pos in row.first:
                    assert label == tag_ids[row.start + row.first.index(pos)]
                else:
                    assert label == IGNORE
            if r + 1 < len(rows):  # a cut is made only when the next word does not fit
                nxt = pieces[rows[r + 1].start][: seq_len - 2]
                assert len(row.ids) + len(nxt) > seq_len
            firsts += row.first
        assert len(firsts) == len(words)
        if seq_len == 512:
            assert len(rows) == 1


def test_long_sentences_are_cut_between_words_into_several_rows(tok):
    words = ["the", *LONG, "lord", *LONG, "."]
    rows = align(tok, words, 8)
    assert len(rows) > 3 and all(len(r.ids) <= 8 for r in rows)
    assert [r.start for r in rows][1:] == [r.start + len(r.first) for r in rows][:-1]
    assert sum(len(r.first) for r in rows) == len(words)


# ---------------------------------------------------------------------------- reading files

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O


Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
-DOCSTART- -X- -X- O
BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O"""


def test_read_conll_takes_the_last_column_and_skips_docstart(tmp_path):
    p = tmp_path / "train.conll"
    p.write_text(CONLL, encoding="utf-8")
    s = read_tagged(p)
    assert s.words == [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"], ["BRUSSELS", "1996-08-22"]]
    assert s.tags == [["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER"], ["B-LOC", "O"]]
    assert s.where == [3, 10, 13]  # the line of each sentence's first token
    assert s.labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]  # O first, then by type, B before I


def test_read_two_column_conll_with_a_bom_and_crlf(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes("\ufeffRomeo B-PER\r\nloves O\r\n\r\nJuliet B-PER\r\n".encode())
    s = read_tagged(p)
    assert s.words == [["Romeo", "loves"], ["Juliet"]] and s.tags == [["B-PER", "O"], ["B-PER"]]


def test_read_jsonl(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [
        {"tokens": ["Romeo", "Montague", "sighs"], "tags": ["B-PER", "I-PER", "O"]},
        {"tokens": ["."], "tags": ["O"]},
    ]
    p.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    s = read_tagged(p)
    assert s.words == [r["tokens"] for r in rows] and s.tags == [r["tags"] for r in rows]
    assert s.where == [1, 3]


@pytest.mark.parametrize(
    ("name", "text", "line", "says"),
    [
        ("a.conll", "Romeo B-PER\nloves O\n\nJuliet\n", 4, "'Juliet' has no tag"),
        ("a.conll", "Romeo X-PER\n", 1, "'X-PER' is not BIO"),
        ("a.conll", "Romeo O\nloves O\n\nJuliet PER\n", 4, "'PER' is not BIO"),
        ("a.conll", "Romeo B-\n", 1, "'B-' is not BIO"),
        ("a.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["a", "b"], "tags": ["O"]}\n', 2, "2 tokens but 1"),
        ("a.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n\n{"tokens": ["a"], "tags": ["O"]\n', 3, "not valid JSON"),
        ("a.jsonl", '{"tokens": ["a"], "tags": ["S-PER"]}\n', 1, "'S-PER' is not BIO"),
        ("a.jsonl", '{"tokens": [], "tags": []}\n', 1, "non-empty lists"),
        ("a.jsonl", '["a", "O"]\n', 1, "not an object"),
        ("a.jsonl", '{"tokens": ["a", " "], "tags": ["O", "O"]}\n', 1, "non-empty string"),
        ("a.conll", "Romeo O\n" + "x" * 5_000_000 + "\n", 2, "'" + "x" * 80 + "'... (5,000,000 characters) has no"),
    ],
)
def test_bad_lines_name_the_file_and_the_line(tmp_path, name, text, line, says):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as e:
        read_tagged(p)
    assert f"{p} line {line}" in str(e.value) and says in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize(("name", "text"), [("e.conll", ""), ("e.conll", "-DOCSTART- O\n\n\n"), ("e.jsonl", "\n \n")])
def test_files_without_a_sentence_are_refused(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(f"{p} holds no tagged sentence")):
        read_tagged(p)


def test_unreadable_files_are_user_errors(tmp_path):
    p = tmp_path / "latin1.conll"
    p.write_bytes("caf\u00e9 O\n".encode("latin-1"))
    with pytest.raises(UserError, match="not UTF-8"):
        read_tagged(p)
    with pytest.raises(UserError, match="does not exist"):
        read_tagged(tmp_path / "missing.conll")


# ---------------------------------------------------------------------------- the built-in names task

PLAY = """KING RICHARD III:
Where is Romeo? Bring me Romeo Montague, said the king.

ROMEO:
Good Juliet, the king is angry with Tybalt.

JULIET:
Tybalt is slain, and Mercutio too.
I weep for Mercutio.

FIRST CITIZEN:
The first citizen of the town salutes the king.

CHORUS:
Two households, both alike in dignity.

FRIAR LAURENCE:
Benvolio, go; the friar bids you go.

TYBALT:
Mercutio, thou consort'st with Romeo.

BENVOLIO:
Laurence, good friar, come.

MONTAGUE:
Richard is the king, and Richard rules.

MERCUTIO:
A plague on both your houses, Tybalt.

ROMEO:
Juliet is the sun, and Juliet the day.

LAURENCE:
Montague, thy son is banished.

BENVOLIO:
The day is hot, and the citizen is abroad.

JULIET:
O gentle night, come soon.

ROMEO:
Benvolio, fetch the friar and the first of the watch.

MERCUTIO:
Romeo, Juliet and Tybalt are all here.
"""
NAMES = ["Benvolio", "Juliet", "Laurence", "Mercutio", "Montague", "Richard", "Romeo", "Tybalt"]


def mentions(words: list[str]) -> set[str]:
    return set(words) & set(NAMES)


def test_play_names_are_headers_that_never_occur_in_lower_case():
    names = play_names(PLAY)
    assert names == NAMES  # KING, FIRST, CITIZEN, FRIAR are words of the play; III is a numeral; CHORUS a role
    lower = set(re.findall(r"\b[a-z]+\b", PLAY))
    assert {"king", "first", "citizen", "friar"} <= lower


def test_tags_mark_names_and_follow_on_names():
    words = split_words("Where is Romeo? Bring me Romeo Montague, said the king.")
    assert words == ["Where", "is", "Romeo", "?", "Bring", "me", "Romeo", "Montague", ",", "said", "the", "king", "."]
    assert tag_names(words, set(NAMES)) == ["O", "O", "B-PER", "O", "O", "O", "B-PER", "I-PER"] + ["O"] * 5


@pytest.mark.parametrize("seed", range(5))
def test_held_out_names_never_occur_in_seen_passages(seed):
    m = name_mentions(PLAY, unseen_fraction=0.25, seed=seed)
    s, every = m.sentences, passages(PLAY)
    assert len(m.unseen_names) == 2 and set(m.unseen_names) <= set(NAMES)
    assert m.unseen and sorted(m.seen + m.unseen) == list(range(len(s)))  # each kept passage in one part
    for i in m.seen:
        assert not mentions(s.words[i]) & set(m.unseen_names), s.words[i]
    for i in m.unseen:
        assert mentions(s.words[i]) and mentions(s.words[i]) <= set(m.unseen_names), s.words[i]
    for words, tags, where in zip(s.words, s.tags, s.where):
        assert words == every[where]
        for k, (w, t) in enumerate(zip(words, tags)):
            want = "O" if w not in NAMES else "I-PER" if k and words[k - 1] in NAMES else "B-PER"
            assert t == want, (words, tags)
        assert not any(t != "O" for w, t in zip(words, tags) if w.lower() in ("king", "friar", "first", "citizen"))
    # a passage naming both a held-out and a training name is in neither part; every other one with names is kept
    mixed = [i for i, w in enumerate(every) if mentions(w) & set(m.unseen_names) and mentions(w) - set(m.unseen_names)]
    named = [i for i, w in enumerate(every) if mentions(w) and i not in mixed]
    assert not set(mixed) & set(s.where) and set(named) <= set(s.where)
    empty = [i for i, w in enumerate(every) if not mentions(w)]
    assert sum(1 for i in s.where if i in empty) == min(len(empty), len(named))


def test_name_mentions_is_seeded():
    a, b = name_mentions(PLAY, 0.25, seed=3), name_mentions(PLAY, 0.25, seed=3)
    assert a == b
    assert len({tuple(name_mentions(PLAY, 0.25, seed=s).unseen_names) for s in range(6)}) > 1


def test_real_play_keeps_held_out_names_out_of_seen_passages():
    path = os.environ.get("TINYFORMER_DATA")
    if not path or not Path(path).is_file():
        pytest.skip("TINYFORMER_DATA is not set")
    text = Path(path).read_text(encoding="utf-8")
    m = name_mentions(text)
    names, unseen = set(play_names(text)), set(m.unseen_names)
    assert len(names) > 50 and {"Romeo", "Juliet", "Richard"} <= names and not {"King", "Lady", "First"} & names
    assert len(m.unseen) > 50 and len(m.seen) > 5 * len(m.unseen)
    for i in m.seen:
        assert not set(m.sentences.words[i]) & unseen
    for i in m.unseen:
        found = set(m.sentences.words[i]) & names
        assert found and found <= unseen


# ---------------------------------------------------------------------------- entity scores


def test_entity_scores_by_hand():
    from tinyformer.tasks.tag import scores

    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-PER", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["O", "B-PER", "B-PER"]]
    # gold entities: PER(0-1), LOC(3), PER(1); predicted: PER(0) (half of a two-word entity: wrong), LOC(3) and
    # PER(1) right, PER(2) wrong -> 2 right of 4 predicted and of 3 gold: P = 1/2, R = 2/3, F1 = 4/7
    r = scores(gold, pred)
    assert r["precision"] == pytest.approx(1 / 2) and r["recall"] == pytest.approx(2 / 3)
    assert r["f1"] == pytest.approx(4 / 7)
    assert r["token_acc"] == pytest.approx(5 / 7)  # the I-PER and the last O are the two wrong tags of 7
    per = r["per_type"]
    assert per["PER"]["precision"] == pytest.approx(1 / 3) and per["PER"]["recall"] == pytest.approx(1 / 2)
    assert per["LOC"]["f1-score"] == 1.0 and per["PER"]["support"] == 2


def test_entity_scores_of_perfect_and_of_empty_predictions():
    from tinyformer.tasks.tag import scores

    gold = [["B-PER", "I-PER", "O"], ["O", "O"]]
    perfect = scores(gold, gold)
    assert (perfect["precision"], perfect["recall"], perfect["f1"], perfect["token_acc"]) == (1.0, 1.0, 1.0, 1.0)
    none = scores(gold, [["O", "O", "O"], ["O", "O"]])
    assert (none["precision"], none["recall"], none["f1"]) == (0.0, 0.0, 0.0) and none["token_acc"] == 3 / 5
