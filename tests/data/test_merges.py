"""tinyformer's own subword trainers (`tinyformer.data.merges`): the same vocabulary in every process, the
merge counts kept right as they change, and encoding and decoding equal to Hugging Face `tokenizers`' given
the same vocabulary, on the play and on Chinese text."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tinyformer.data import merges as M

tokenizers = pytest.importorskip("tokenizers")

CHINESE = "天下大势，分久必合，合久必分。周末七国分争，并入于秦。 Café naïve — ☃ 🤖 o'er the hills, and far!"


@pytest.fixture(scope="module")
def play() -> str:
    src = os.environ.get("TINYFORMER_DATA")
    if src and Path(src).is_file():
        return Path(src).read_text(encoding="utf-8")[:300_000]
    from tests.conftest import SYNTHETIC

    return SYNTHETIC * 5


def naive_merges(words: dict[tuple[str, ...], int], n: int, join=str.__add__) -> list[tuple[str, str]]:
    """The rule as written: recount every pair from scratch, merge the most frequent (ties: the smaller pair)."""
    seqs = {tuple(w): c for w, c in words.items()}
    out = []
    for _ in range(n):
        pairs: Counter = Counter()
        for seq, c in seqs.items():
            for p in zip(seq, seq[1:], strict=False):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        out.append(best)
        merged: dict = {}
        for seq, c in seqs.items():
            new = tuple(M.merge_pair(list(seq), best, join(*best)))
            merged[new] = merged.get(new, 0) + c
        seqs = merged
    return out


def test_ties_go_to_the_pair_that_sorts_first_whatever_the_order_of_the_words():
    one = M.learn_merges({("c", "d"): 3, ("a", "b"): 3, ("x", "y", "x", "y"): 1}, 3)
    other = M.learn_merges({("x", "y", "x", "y"): 1, ("a", "b"): 3, ("c", "d"): 3}, 3)
    assert one == other == [("a", "b"), ("c", "d"), ("x", "y")]


def test_the_counts_kept_merge_by_merge_give_the_merges_of_counting_again_each_time():
    rng = random.Random(0)
    words = {}
    for _ in range(300):
        w = "".join(rng.choice("abcab d") for _ in range(rng.randint(1, 9)))
        words[tuple(w)] = words.get(tuple(w), 0) + rng.randint(1, 5)
    assert M.learn_merges(words, 60) == naive_merges(words, 60)
    pieces = {tuple(M.wordpiece_symbols(w)): c for w, c in Counter("".join(w) for w in words).items()}
    assert M.learn_merges(pieces, 60, M.join_pieces) == naive_merges(pieces, 60, M.join_pieces)


TRAIN = """
import hashlib, sys
from pathlib import Path
from tinyformer.data.bpe import BPETokenizer
from tinyformer.data.subword import SubwordTokenizer
text = Path(sys.argv[1]).read_text(encoding="utf-8").split("\\n\\n")
for tok, name in ((SubwordTokenizer.train(text, 800), "wp"), (BPETokenizer.train(text, 700), "bpe")):
    tok.save(Path(sys.argv[2]) / f"{name}.json")
    print(name, hashlib.sha256((Path(sys.argv[2]) / f"{name}.json").read_bytes()).hexdigest())
"""


def test_every_process_and_thread_count_trains_the_same_vocabulary(play, tmp_path):
    """Four fresh processes, one and two threads (Hugging Face's own trainer gave four vocabularies here)."""
    text = tmp_path / "play.txt"
    text.write_text(play[:150_000], encoding="utf-8")
    seen = set()
    for i, threads in enumerate(("1", "2", "1", "2")):
        env = {**os.environ, "RAYON_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "PYTHONHASHSEED": str(i)}
        (tmp_path / str(i)).mkdir()
        r = subprocess.run([sys.executable, "-c", TRAIN, str(text), str(tmp_path / str(i))], env=env, **TEXT)
        assert r.returncode == 0, r.stderr[-2000:]
        seen.add(r.stdout)
    assert len(seen) == 1, seen


TEXT = dict(capture_output=True, text=True, timeout=300)


def bpe_pair(play: str, hf_trained: bool):
    """(vocab, merges, Hugging Face tokenizer built on them): learned by ours, or by Hugging Face's trainer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    split = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if hf_trained:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = split
        trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=split.alphabet(), show_progress=False)
        tok.train_from_iterator(play.split("\n\n"), trainer=trainer)
        data = json.loads(tok.to_str())["model"]
        vocab, merges = data["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["merges"]]
    else:
        vocab, merges = M.train_bpe(M.word_counts(play.split("\n\n"), lambda t: words(split, t)), 600)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer, tok.decoder = split, decoders.ByteLevel()
    return vocab, merges, tok


def words(pre, text: str) -> list[str]:
    return [w for w, _ in pre.pre_tokenize_str(text)]


@pytest.mark.parametrize("hf_trained", [False, True], ids=["our vocabulary", "Hugging Face's vocabulary"])
def test_bpe_encodes_and_decodes_as_hugging_face_does(play, hf_trained):
    vocab, merges, tok = bpe_pair(play[:100_000], hf_trained)
    ranks = {p: i for i, p in enumerate(merges)}
    for text in (play[100_000:130_000], CHINESE):
        ours = [vocab[t] for w in words(tok.pre_tokenizer, text) for t in M.bpe_word(w, ranks)]
        theirs = tok.encode(text).ids
        assert ours == theirs
        tokens = [tok.id_to_token(i) for i in theirs]
        assert M.bpe_decode(tokens) == tok.decode(theirs) == text
        assert M.bpe_decode(tokens[:-1]) == tok.decode(theirs[:-1])  # a cut character: U+FFFD alike


def wordpiece_pair(play: str, hf_trained: bool):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    norm = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
    pre = pre_tokenizers.BertPreTokenizer()

    def split(text: str) -> list[str]:
        return words(pre, norm.normalize_str(text))

    if hf_trained:
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer, tok.pre_tokenizer = norm, pre
        trainer = trainers.WordPieceTrainer(vocab_size=900, special_tokens=list(specials), show_progress=False)
        tok.train_from_iterator(play.split("\n\n"), trainer=trainer)
        vocab = tok.get_vocab()
    else:
        vocab = M.train_wordpiece(M.word_counts(play.split("\n\n"), split), 900, specials)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = norm, pre, decoders.WordPiece(prefix="##")
    return vocab, split, tok


@pytest.mark.parametrize("hf_trained", [False, True], ids=["our vocabulary", "Hugging Face's vocabulary"])
def test_wordpiece_encodes_and_decodes_as_hugging_face_does(play, hf_trained):
    vocab, split, tok = wordpiece_pair(play[:100_000], hf_trained)
    for text in (play[100_000:130_000], CHINESE, "x" * 150 + " antidisestablishmentarianism"):
        ours = [vocab[t] for w in split(text) for t in M.wordpiece_word(w, vocab)]
        theirs = tok.encode(text).ids
        assert ours == theirs
        assert M.wordpiece_decode([tok.id_to_token(i) for i in theirs]) == tok.decode(theirs)


def test_a_vocabulary_has_the_size_asked_and_every_byte_or_character_of_the_text(play):
    bpe, merges = M.train_bpe(Counter({"Ġthe": 5, "Ġthee": 2, "hello": 1}), 262)
    assert len(bpe) == 262 and len(merges) == 6 and set(M.byte_symbols()) <= set(bpe)
    wp = M.train_wordpiece(Counter(["thee", "the", "the"]), 100, ("[UNK]",))
    assert {"t", "##t", "h", "##h", "e", "##e", "the", "[UNK]"} <= set(wp) and len(wp) < 100  # no more pairs
    digest = hashlib.sha256(json.dumps(wp).encode()).hexdigest()
    assert (
        digest
        == hashlib.sha256(
            json.dumps(M.train_wordpiece(Counter(["the", "thee", "the"]), 100, ("[UNK]",))).encode()
        ).hexdigest()
    )
