"""Byte-level BPE (Sennrich et al., 2016; byte-level as in GPT-2, Radford et al., 2019).

Text is first turned into UTF-8 bytes, each byte shown as one of 256 printable characters, so the base
alphabet is every byte: any text, in any script, including characters never seen in training, encodes
without an unknown token and decodes back to exactly the same string. Merges of frequent neighbouring
pieces are learned by tinyformer's own trainer (`tinyformer.data.merges`: the same merges in any process)
from the training split only; `vocab_size` counts the 256 bytes, the merges and any special tokens.

The same class holds GPT-2's own tokenizer (`from_folder`: a Hugging Face folder's tokenizer.json, or
vocab.json + merges.txt), so a model imported from GPT-2 reads and writes text exactly as GPT-2 does. The
file format is Hugging Face's tokenizer.json, which `tokenizers.Tokenizer.from_file` reads as well.

A token may end in the middle of a character (a 4-byte emoji can be two tokens): `decode` of such a
prefix ends in U+FFFD; decode whole sequences, or see `tinyformer.generate.sampling` for streaming.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

import torch

from tinyformer.data.hf_files import check_tokenizer_json, read_vocab_and_merges
from tinyformer.data.tokenizers import CharTokenizer, pad_batch, show_char
from tinyformer.errors import UserError
from tinyformer.files import atomic_write, kind
from tinyformer.hub import folder_json

DEFAULT_VOCAB = 4096


class BPETokenizer:
    def __init__(self, tokenizer) -> None:
        """Wrap a `tokenizers.Tokenizer` with a BPE model (byte-level pre-tokenizer and decoder)."""
        self.hf = tokenizer
        self.hf.no_truncation()
        self.hf.no_padding()

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB, specials: tuple[str, ...] = ()):
        """Learn merges up to `vocab_size` tokens from `texts`; `specials` get the first ids, in order. The same
        merges in any process (`tinyformer.data.merges`: ties broken by a stated rule)."""
        from tokenizers import Tokenizer, decoders, models

        from tinyformer.data.merges import train_bpe, word_counts

        if vocab_size < 256 + len(specials):
            raise UserError(f"a byte-level BPE needs vocab_size >= {256 + len(specials)} (256 bytes), got {vocab_size}")
        vocab, merges = train_bpe(word_counts(texts, byte_words), vocab_size, specials)
        tok = Tokenizer(models.BPE(vocab, merges))
        tok.pre_tokenizer = byte_split()
        tok.decoder = decoders.ByteLevel()
        if specials:
            tok.add_special_tokens(list(specials))
        return cls(tok)

    @classmethod
    def from_folder(cls, folder: Path) -> BPETokenizer:
        """GPT-2's tokenizer from a Hugging Face folder: tokenizer.json, else vocab.json + merges.txt (every
        entry of either checked first: `tinyformer.data.hf_files`)."""
        if kind(folder / "tokenizer.json") is not None:
            return cls.load(folder / "tokenizer.json")
        if kind(folder / "vocab.json") is None or kind(folder / "merges.txt") is None:
            raise UserError(f"{folder} has no tokenizer: neither tokenizer.json nor vocab.json + merges.txt")
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        tok = Tokenizer(models.BPE(*read_vocab_and_merges(folder)))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def token_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int] | torch.Tensor, skip_special_tokens: bool = False) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def batch(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> ids (B, T) padded at the end with id 0, and the mask (B, T), 1 = real, 0 = padding."""
        return pad_batch([self.encode(t) for t in texts])

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        """A readable label per id for plots: the token's own text, spaces and newlines made visible."""
        return ["".join(show_char(c) for c in self.decode([i])) for i in ids]

    def save(self, path: str | Path) -> None:
        atomic_write(Path(path), lambda t: self.hf.save(str(t)))

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        from tokenizers import Tokenizer

        data = read_hf_tokenizer(path)
        if data["model"].get("type") != "BPE":
            raise UserError(f"{path} is not a BPE tokenizer.json (found {data['model'].get('type')!r})")
        try:
            return cls(Tokenizer.from_str(json.dumps(data)))
        except Exception as e:  # tokenizers raises its own exception type for a malformed file
            raise UserError(f"{path} is not a valid tokenizer.json: {str(e).splitlines()[0][:200]}") from None


def byte_split():
    """GPT-2's pre-tokenizer (Hugging Face's `ByteLevel`): words, numbers, punctuation runs and spaces apart, a
    word keeping the space before it, each shown in the 256-symbol byte alphabet (a space is "Ġ")."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel(add_prefix_space=False)


def byte_words(text: str) -> list[str]:
    """`text` cut into the words a byte-level BPE learns from and encodes, one at a time (`byte_split`)."""
    return [w for w, _ in _split().pre_tokenize_str(text)]


@functools.cache
def _split():
    return byte_split()


def read_hf_tokenizer(path: str | Path) -> dict:
    """A Hugging Face tokenizer.json as a dict, its model section checked (`hf_files.check_tokenizer_json`);
    UserError naming the file (and the key) when it is not one."""
    data = folder_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise UserError(f"{path} is not a Hugging Face tokenizer.json (no 'model' section)")
    return check_tokenizer_json(data, str(path))


def load_text_tokenizer(path: str | Path):
    """A language model's tokenizer.json: a Hugging Face byte-level BPE (it has a "model" section), else
    tinyformer's character vocabulary (whose loader names what is wrong with any other file)."""
    try:
        data = folder_json(path)
    except UserError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        return CharTokenizer.from_hf(check_tokenizer_json(data, str(path))) or BPETokenizer.load(path)
    return CharTokenizer.load(path)


def folder_tokenizer(folder: Path):
    """A Hugging Face model folder's tokenizer: the characters of a tinyformer export, else GPT-2's BPE."""
    if kind(folder / "tokenizer.json") is not None:
        return load_text_tokenizer(folder / "tokenizer.json")
    return BPETokenizer.from_folder(folder)
