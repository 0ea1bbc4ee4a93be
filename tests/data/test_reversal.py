import pytest
import torch

from tinyformer.data.reversal import BOS, EOS, PAD, DigitTokenizer, ReversalConfig, make_split
from tinyformer.errors import UserError


def digits_of(row: torch.Tensor) -> list[int]:
    return [int(i) - 3 for i in row if i >= 3]


def test_targets_are_the_reversed_sources():
    src, tgt = make_split(500, 3, 12, seed=0)
    assert src.shape == (500, 14) and tgt.shape == (500, 14)  # the chapter's SEQ_LEN = MAX_LEN + 2 for both
    for s, t in zip(src, tgt, strict=True):
        n = int((s >= 3).sum())
        assert 3 <= n <= 12
        assert s[n] == EOS and torch.all(s[n + 1 :] == PAD) and torch.all(s[:n] >= 3)
        assert t[0] == BOS and t[n + 1] == EOS and torch.all(t[n + 2 :] == PAD)
        assert digits_of(t) == digits_of(s)[::-1]


def test_sort_variant_and_seeds():
    src, tgt = make_split(200, 3, 12, seed=5, variant="sort")
    for s, t in zip(src, tgt, strict=True):
        assert digits_of(t) == sorted(digits_of(s))
    assert torch.equal(make_split(50, 3, 12, seed=1)[0], make_split(50, 3, 12, seed=1)[0])
    assert not torch.equal(make_split(50, 3, 12, seed=1)[0], make_split(50, 3, 12, seed=2)[0])
    lengths = (make_split(2000, 3, 12, seed=0)[0] >= 3).sum(1)
    assert set(lengths.tolist()) == set(range(3, 13))  # every length occurs


def test_the_pairs_are_the_chapters_make_dataset():
    """Chapter 20 draws numpy's default_rng(seed): per pair a length in [3, 12], then that many digits. Its
    printed example is the layout; its seed-0 stream gives the first training pairs below, and the first k
    held-out pairs do not depend on how many are drawn (the chapter scores the first 500 of 1,000)."""
    import numpy as np

    rng = np.random.default_rng(0)
    src, tgt = make_split(3, 3, 12, seed=0)
    for s, t in zip(src.tolist(), tgt.tolist(), strict=True):
        length = int(rng.integers(3, 13))
        digits = (rng.integers(0, 10, length) + 3).tolist()
        assert s == [*digits, EOS] + [PAD] * (13 - length)
        assert t == [BOS, *digits[::-1], EOS] + [PAD] * (12 - length)
    assert torch.equal(make_split(500, 3, 12, seed=1)[0], make_split(1000, 3, 12, seed=1)[0][:500])


def test_wider_split_for_length_extrapolation():
    src, tgt = make_split(100, 13, 20, seed=0, width=20)
    assert src.shape == (100, 22) and int((src >= 3).sum(1).min()) >= 13


def test_tokenizer_round_trip_and_user_errors():
    tok = DigitTokenizer()
    ids = tok.encode_source("7 3 0 9 5", max_len=12)
    assert ids.tolist() == [[10, 6, 3, 12, 8, EOS]]
    assert tok.decode(torch.tensor([8, 12, 3, 6, 10, EOS, PAD])) == "5 9 0 3 7"
    with pytest.raises(UserError, match="only hold the digits 0-9.*'x 12'"):
        tok.encode_source("7 x 12", max_len=12)
    with pytest.raises(UserError, match="has 13 digits; this model takes at most 12"):
        tok.encode_source(" ".join("1" * 13), max_len=12)
    with pytest.raises(UserError, match="empty"):
        tok.encode_source("   ", max_len=12)


def test_config_validation():
    with pytest.raises(UserError, match="data.variant='shuffle'"):
        ReversalConfig(variant="shuffle")
    with pytest.raises(UserError, match="min <= max"):
        ReversalConfig(min_len=5, max_len=4)
