"""Digit-sequence tasks for the encoder-decoder: reverse (or sort) 3-12 random digits.

Vocabulary of 13: PAD 0, BOS 1, EOS 2, digits 0-9 as ids 3-12.
Source: the digits then EOS, padded to `max_len + 2`; target: BOS, the digits
reversed (or sorted), EOS, padded to the same width. Teacher forcing feeds the decoder
the target without its last token and scores it against the target without BOS.
Every split is drawn from its own seed as chapter 20's `make_dataset` draws it, so seed 0
gives the chapter's training pairs and seed 1 its held-out pairs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from tinyformer.data.tokenizers import read_tokenizer
from tinyformer.errors import UserError
from tinyformer.files import write_text
from tinyformer.seeds import check_seed

PAD, BOS, EOS, DIGIT0 = 0, 1, 2, 3
VOCAB_SIZE = 13
LABELS = ["PAD", "BOS", "EOS", *"0123456789"]
VARIANTS = ("reverse", "sort")
SAMPLINGS = ("random", "epochs")


@dataclass
class ReversalConfig:
    variant: str = "reverse"  # "reverse" or "sort": what the target does to the digits
    min_len: int = 3  # shortest digit sequence
    max_len: int = 12  # longest digit sequence (training)
    n_train: int = 20_000  # training sequences
    n_val: int = 1_000  # held-out sequences (the first n of the held-out seed's stream)
    val_max_len: int = 0  # longest held-out sequence; 0 = max_len (raise it to test extrapolation)
    seed: int = 0  # the training set uses seed, the held-out set seed + 1
    sampling: str = "random"  # "random": each batch drawn with replacement; "epochs": shuffled epochs of whole
    # batches without replacement, the last partial batch dropped (the chapter's DataLoader)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise UserError(f"data.variant={self.variant!r} is not one of {', '.join(VARIANTS)}")
        if self.sampling not in SAMPLINGS:
            raise UserError(f"data.sampling={self.sampling!r} is not one of {', '.join(SAMPLINGS)}")
        if not 1 <= self.min_len <= self.max_len:
            raise UserError(f"data.min_len={self.min_len} and data.max_len={self.max_len} need 1 <= min <= max")
        if self.n_train <= 0 or self.n_val <= 0:
            raise UserError("data.n_train and data.n_val must be > 0")
        if self.val_max_len and self.val_max_len < self.min_len:
            raise UserError(f"data.val_max_len={self.val_max_len} is below data.min_len={self.min_len}")
        check_seed("data.seed", self.seed, least=0)  # numpy's generator (`make_split`) takes no negative seed

    @property
    def longest(self) -> int:
        return max(self.max_len, self.val_max_len)


def make_split(n: int, min_len: int, max_len: int, seed: int, variant: str = "reverse", width: int = 0):
    """-> src and tgt ids, (n, width + 2) each; width (the longest sequence padded for) defaults to max_len.

    Drawn as chapter 20's `make_dataset`: numpy's `default_rng(seed)`, then per pair its length in
    [min_len, max_len] and that many digits, so the first k pairs do not depend on n."""
    import numpy as np

    width = width or max_len
    rng = np.random.default_rng(seed)
    src, tgt = np.full((n, width + 2), PAD, dtype=np.int64), np.full((n, width + 2), PAD, dtype=np.int64)
    tgt[:, 0] = BOS
    for i in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        digits = rng.integers(0, 10, length)
        out = digits[::-1] if variant == "reverse" else np.sort(digits)
        src[i, :length], src[i, length] = digits + DIGIT0, EOS
        tgt[i, 1 : length + 1], tgt[i, length + 1] = out + DIGIT0, EOS
    return torch.from_numpy(src), torch.from_numpy(tgt)


class DigitTokenizer:
    """Text "7 3 0 9 5" <-> ids; also the label of every id for plots."""

    labels = LABELS
    vocab_size = VOCAB_SIZE

    def encode_source(self, text: str, max_len: int) -> torch.Tensor:
        """ "7 3 0 9 5" -> (1, n + 1) ids ending in EOS; user errors name the problem."""
        parts = text.replace(",", " ").split()
        if not parts:
            raise UserError('the input is empty; give digits separated by spaces, e.g. "7 3 0 9 5"')
        bad = [p for p in parts if p not in "0123456789" or len(p) != 1]
        if bad:
            raise UserError(f"the input may only hold the digits 0-9 separated by spaces; got {' '.join(bad)!r}")
        if len(parts) > max_len:
            raise UserError(f"the input has {len(parts)} digits; this model takes at most {max_len}")
        return torch.tensor([[int(p) + DIGIT0 for p in parts] + [EOS]])

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        """The label of every id ("PAD", "BOS", "EOS", "0"-"9"), for plots."""
        return [LABELS[i] for i in ids]

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Digits up to the first EOS, as "5 9 0 3 7"."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        out = []
        for i in ids:
            if i == EOS:
                break
            if i >= DIGIT0:
                out.append(str(i - DIGIT0))
        return " ".join(out)

    def save(self, path: str | Path) -> None:
        write_text(Path(path), json.dumps({"type": "digits", "labels": LABELS}))

    @classmethod
    def load(cls, path: str | Path) -> DigitTokenizer:
        if read_tokenizer(path, "digits").get("labels") != LABELS:
            raise UserError(f"{path} is not this digit tokenizer: its labels are not {' '.join(LABELS)}")
        return cls()
