"""Character tokenizer: one id per distinct character of the training text.

Saved as JSON (`{"type": "char", "chars": [...]}`) in every run folder, so a
run can be sampled with nothing but its path.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import read_json, write_text

IGNORE = -100  # the label of a position that no loss counts (cross-entropy's ignore_index)


class CharTokenizer:
    def __init__(self, chars: list[str]) -> None:
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("chars must be distinct single characters")
        self.chars = list(chars)
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            shown = " ".join(repr(c) for c in unknown)
            vocab = "".join(self.chars).encode("unicode_escape").decode()
            raise UserError(
                f"text has {len(unknown)} character(s) outside the vocabulary: {shown}; "
                f"the {self.vocab_size} known characters are: {vocab}"
            )
        return [self.stoi[c] for c in text]

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)

    def batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> ids (B, T) padded at the end with id 0, and the mask (B, T), 1 = real, 0 = padding."""
        return pad_batch([self.encode(t) for t in texts])

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        """A visible label per id for plots (newline, space and tab would vanish on an axis)."""
        return [show_char(self.chars[i]) for i in ids]

    def to_dict(self) -> dict:
        return {"type": "char", "chars": self.chars}

    def to_hf(self):
        """The same vocabulary as a Hugging Face `tokenizers.Tokenizer` (what `AutoTokenizer` loads from a
        tokenizer.json): every character is its own token (a word-level vocabulary after a split at every
        character), and decoding joins them with nothing between."""
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel(dict(self.stoi), unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")  # one piece per character
        tok.decoder = decoders.Fuse()
        return tok

    @classmethod
    def from_hf(cls, data: dict) -> CharTokenizer | None:
        """The character vocabulary of a Hugging Face tokenizer.json that `to_hf` wrote; None for any other."""
        model = data.get("model") if isinstance(data, dict) else None
        vocab = model.get("vocab") if isinstance(model, dict) and model.get("type") == "WordLevel" else None
        if not isinstance(vocab, dict) or not all(isinstance(c, str) and len(c) == 1 for c in vocab):
            return None
        if not all(type(i) is int for i in vocab.values()):  # a string or a bool id: not a vocabulary `to_hf` wrote
            return None
        chars = sorted(vocab, key=vocab.get)
        return cls(chars) if [vocab[c] for c in chars] == list(range(len(chars))) else None

    def save(self, path: str | Path) -> None:
        write_text(Path(path), json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        chars = read_tokenizer(path, "char").get("chars")
        if not isinstance(chars, list) or not chars:
            raise UserError(f"{path} is not a character tokenizer: 'chars' is not a non-empty list")
        try:
            return cls(chars)
        except ValueError as e:
            raise UserError(f"{path} is not a character tokenizer: {e}") from None


def read_tokenizer(path: str | Path, kind: str) -> dict:
    """A tinyformer tokenizer.json of type `kind`, as a dict; anything else is a UserError naming the file."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("type") != kind:
        found = data.get("type") if isinstance(data, dict) else type(data).__name__
        raise UserError(f"{path} is not a {kind} tokenizer (found {found!r})")
    return data


def pad_batch(rows: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists of different lengths -> (input_ids, attention_mask), both (B, max length), padded at the end
    with `pad_id`; the mask is Hugging Face's: 1 = real token, 0 = padding."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def show_char(ch: str) -> str:
    """A visible label for a character token."""
    return {"\n": "↵", " ": "␣", "\t": "⇥"}.get(ch, ch)
