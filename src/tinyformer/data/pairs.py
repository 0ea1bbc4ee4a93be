"""Pairs of texts for the encoder-decoder: a table the user brings, a seeded split, shared vocabularies.

A .csv / .tsv / .jsonl table (read by `tinyformer.data.classification.read_records`, which names a
missing column and the columns present) holds one (source, target) pair per row. The ids follow the
digit-reversal conventions (`tinyformer.data.reversal`): PAD 0, BOS 1, EOS 2; a source is its tokens
then EOS, a target is BOS, its tokens, EOS, each padded with PAD. One vocabulary serves source and
target, with those three specials first, in one of two kinds:

- "char": one id per character of the table (`SpecialCharTokenizer`, learned from every pair: there is
  no unknown token, so a character met only in a held-out pair still needs an id);
- "bpe": byte-level BPE (`tinyformer.data.bpe.BPETokenizer`), merges learned from the training pairs.

A pair that cannot be trained on (an empty cell, more tokens than the model's context) is refused with
one line naming its row, counted as the table reader counts rows.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from tinyformer.config import check_seed
from tinyformer.data.bpe import BPETokenizer
from tinyformer.data.classification import read_records
from tinyformer.data.reversal import BOS, EOS, PAD
from tinyformer.data.tokenizers import CharTokenizer, read_tokenizer, show_char
from tinyformer.errors import UserError
from tinyformer.files import read_json, write_text

SPECIALS = ("<pad>", "<bos>", "<eos>")  # at ids PAD, BOS, EOS in both kinds of vocabulary
TOKENIZERS = ("char", "bpe")
CHAR_KIND = "char+specials"  # the "type" of a SpecialCharTokenizer's tokenizer.json
assert (PAD, BOS, EOS) == (0, 1, 2)


@dataclass
class PairsConfig:
    path: str = ""  # .csv/.tsv/.jsonl table, one (source, target) pair per row (`--data`)
    source_col: str = "source"  # column holding the input text (`--source-col`)
    target_col: str = "target"  # column holding the text the model should write (`--target-col`)
    tokenizer: str = "char"  # "char" (one token per character) or "bpe" (byte-level BPE, learned)
    vocab_size: int = 1000  # bpe: tokens to learn, the 256 bytes and the 3 specials included
    val_fraction: float = 0.1  # share of the pairs held out (at least one), scored by `tinyformer eval`
    split_seed: int = 0  # seeds the train/val split (independent of train.seed)

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"data.tokenizer={self.tokenizer!r} is not one of {', '.join(TOKENIZERS)}")
        if self.tokenizer == "bpe" and self.vocab_size < 256 + len(SPECIALS):
            raise UserError(f"data.vocab_size={self.vocab_size} must be >= 259 for bpe (256 bytes + 3 specials)")
        if not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"data.val_fraction={self.val_fraction} must be in (0, 1)")
        check_seed("data.split_seed", self.split_seed)


# ---------------------------------------------------------------------------- the table


@dataclass
class Pairs:
    """Parallel lists: pair i is sources[i] -> targets[i], from row rows[i] of the table `where`."""

    sources: list[str]
    targets: list[str]
    rows: list[int]  # row number in the table (1-based, as `read_records` counts)
    where: str = ""  # the table's path, for messages

    def __len__(self) -> int:
        return len(self.sources)


def read_pairs(path: str | Path, source_col: str = "source", target_col: str = "target") -> Pairs:
    """Every (source, target) row of the table, stripped; a source repeated later is kept once (its first row),
    so that no source is both trained on and held out."""
    p, rows = read_records(path, [(source_col, "--source-col"), (target_col, "--target-col")])
    sources, targets, numbers, seen = [], [], [], set()
    for row, (source, target) in rows:
        for text, what, col in ((source, "source", source_col), (target, "target", target_col)):
            if not text:
                raise UserError(f"{p} row {row}: empty {what} in column {col!r}; every row needs a source and a target")
        if source in seen:
            continue
        seen.add(source)
        sources.append(source), targets.append(target), numbers.append(row)
    return Pairs(sources, targets, numbers, str(p))


def split_indices(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, val) positions of `n` pairs: a seeded shuffle, val = round(n * val_fraction), at least 1 each."""
    if n < 2:
        raise UserError(f"the table has {n} distinct pair(s); training and a held-out split need at least 2")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_val = min(max(round(n * val_fraction), 1), n - 1)
    return order[n_val:], order[:n_val]


# ---------------------------------------------------------------------------- vocabularies


class SpecialCharTokenizer:
    """One id per character, after the specials <pad> <bos> <eos> at ids 0, 1, 2.

    Saved as tokenizer.json `{"type": "char+specials", "specials": [...], "chars": [...]}`.
    """

    def __init__(self, chars: list[str]) -> None:
        self.char = CharTokenizer(chars)  # the characters' own ids, 0-based: shifted by the specials here

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> SpecialCharTokenizer:
        return cls(sorted(set().union(*(set(t) for t in texts))))

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + self.char.vocab_size

    def encode(self, text: str) -> list[int]:
        """Ids of the characters, no specials; a character outside the vocabulary is a UserError naming it."""
        return [i + len(SPECIALS) for i in self.char.encode(text)]

    def decode(self, ids: list[int] | torch.Tensor, skip_special_tokens: bool = False) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self._token(i, skip_special_tokens) for i in ids)

    def _token(self, i: int, skip_special: bool) -> str:
        if i < len(SPECIALS):
            return "" if skip_special else SPECIALS[i]
        return self.char.chars[i - len(SPECIALS)]

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        """A visible label per id for plots: the specials by name, blanks shown (see `show_char`)."""
        return [SPECIALS[i] if i < len(SPECIALS) else show_char(self._token(i, False)) for i in ids]

    def save(self, path: str | Path) -> None:
        data = {"type": CHAR_KIND, "specials": list(SPECIALS), "chars": self.char.chars}
        write_text(Path(path), json.dumps(data, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> SpecialCharTokenizer:
        data = read_tokenizer(path, CHAR_KIND)
        chars = data.get("chars")
        if data.get("specials") != list(SPECIALS) or not isinstance(chars, list) or not chars:
            raise UserError(f"{path} is not a {CHAR_KIND} tokenizer: it needs specials {list(SPECIALS)} and chars")
        try:
            return cls(chars)
        except ValueError as e:
            raise UserError(f"{path} is not a {CHAR_KIND} tokenizer: {e}") from None


def fit_tokenizer(kind: str, texts: list[str], vocab_size: int) -> SpecialCharTokenizer | BPETokenizer:
    """A vocabulary of `kind` ("char" or "bpe") learned from `texts`, the specials at ids 0, 1, 2."""
    if kind == "char":
        return SpecialCharTokenizer.from_texts(texts)
    return BPETokenizer.train(texts, vocab_size, specials=SPECIALS)


def load_tokenizer(path: str | Path) -> SpecialCharTokenizer | BPETokenizer:
    """A seq2seq run's tokenizer.json of either kind: Hugging Face's file (a "model" section) is the BPE one,
    anything else goes to the character loader, which names what is wrong with it."""
    try:
        data = read_json(path)
    except UserError:
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("model"), dict)):
        return SpecialCharTokenizer.load(path)
    tok = BPETokenizer.load(path)
    if [tok.token_id(s) for s in SPECIALS] != [PAD, BOS, EOS]:
        raise UserError(f"{path} is a BPE tokenizer without {' '.join(SPECIALS)} at ids 0, 1, 2")
    return tok


# ---------------------------------------------------------------------------- ids


def encode_text(tokenizer, text: str) -> list[int]:
    """The ids of `text`, no specials added; one that reads as a special token (BPE reads "<eos>" written in a
    text as EOS itself) or a character outside a character vocabulary is a UserError."""
    ids = tokenizer.encode(text)
    special = [SPECIALS[i] for i in ids if i < len(SPECIALS)]
    if special:
        raise UserError(f"text holds {special[0]!r}, a special token of the vocabulary; remove it")
    return ids


def encode_pairs(tokenizer, pairs: Pairs, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """-> source ids (N, S): tokens, EOS, PAD...; target ids (N, T): BOS, tokens, EOS, PAD...; each padded to its
    longest. A pair that does not fit `block_size` (source + EOS, or BOS + target) is refused, naming its row."""
    sources, targets = [], []
    for source, target, row in zip(pairs.sources, pairs.targets, pairs.rows, strict=True):
        src, tgt = (
            _encode_cell(tokenizer, source, pairs, row, "source"),
            _encode_cell(tokenizer, target, pairs, row, "target"),
        )
        if len(src) + 1 > block_size or len(tgt) + 1 > block_size:
            raise UserError(
                f"{pairs.where} row {row}: the pair is too long for model.block_size={block_size}: its source is "
                f"{len(src)} tokens + EOS and its target {len(tgt)} tokens + BOS (at most {block_size} each); "
                "raise model.block_size or shorten the row"
            )
        sources.append(src + [EOS]), targets.append([BOS, *tgt, EOS])
    return pad_rows(sources), pad_rows(targets)


def _encode_cell(tokenizer, text: str, pairs: Pairs, row: int, what: str) -> list[int]:
    try:
        return encode_text(tokenizer, text)
    except UserError as e:  # e.g. a resumed run's character vocabulary and a changed table
        raise UserError(f"{pairs.where} row {row}, {what}: {e}") from None


def pad_rows(rows: list[list[int]]) -> torch.Tensor:
    """Id lists -> (N, L) ids padded with PAD at the end, L = the longest."""
    out = torch.full((len(rows), max(map(len, rows), default=0)), PAD, dtype=torch.long)  # (N, L)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out
