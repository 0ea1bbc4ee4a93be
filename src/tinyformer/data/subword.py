"""A WordPiece subword tokenizer (Schuster & Nakajima, 2012; as in BERT, Devlin et al., 2019).

Trained with Hugging Face `tokenizers` on the training split only, lower-cased,
with five special tokens at fixed ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
`encode` wraps a text as [CLS] ... [SEP]; special tokens written in the text
("To be or not to [MASK]") stay single tokens. The file is Hugging Face's own
tokenizer.json, so `tokenizers.Tokenizer.from_file` and
`transformers.PreTrainedTokenizerFast(tokenizer_file=...)` read it as well.

`batch` pads a list of texts to the longest one and returns the padding as a
Hugging Face style attention mask (1 = real token, 0 = padding); models turn it
into tinyformer's mask convention at one boundary, `masks.from_hf_attention_mask`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import atomic_write

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIALS))


class SubwordTokenizer:
    pad_token, unk_token, cls_token, sep_token, mask_token = SPECIALS  # the names Hugging Face tokenizers use

    def __init__(self, tokenizer) -> None:
        """Wrap a `tokenizers.Tokenizer` whose first five ids are `SPECIALS`, in order."""
        for i, name in enumerate(SPECIALS):
            if tokenizer.token_to_id(name) != i:
                raise UserError(f"tokenizer has {name} at id {tokenizer.token_to_id(name)}, expected {i}")
        self.hf = tokenizer
        self.hf.no_truncation()
        self.hf.no_padding()

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 2000) -> SubwordTokenizer:
        """Learn a WordPiece vocabulary of about `vocab_size` tokens (specials included) from `texts`."""
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # split on whitespace and punctuation
        tok.decoder = decoders.WordPiece(prefix="##")
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)]
        )
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    @property
    def n_special(self) -> int:
        return len(SPECIALS)

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """[CLS] tokens [SEP]; with `max_len`, the tokens are cut so that the whole fits in it."""
        ids = self.hf.encode(text).ids
        if max_len is not None and len(ids) > max_len:
            ids = ids[: max_len - 1] + [SEP_ID]
        return ids

    def encode_plain(self, text: str) -> list[int]:
        """Word pieces only, no [CLS]/[SEP] (for cutting a long text into windows)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def batch(self, texts: list[str], max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> input_ids (B, T) padded with [PAD] and attention_mask (B, T), 1 = real, 0 = padding."""
        return pad_batch([self.encode(t, max_len) for t in texts])

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.hf.decode(ids, skip_special_tokens=True)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.hf.id_to_token(i) for i in ids]

    def save(self, path: str | Path) -> None:
        atomic_write(Path(path), lambda t: self.hf.save(str(t)))

    @classmethod
    def load(cls, path: str | Path) -> SubwordTokenizer:
        from tokenizers import Tokenizer

        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"cannot read tokenizer {str(p)!r}: {e}") from None
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "WordPiece":
            found = model.get("type") if isinstance(model, dict) else type(data).__name__
            raise UserError(f"{p} is not a WordPiece tokenizer.json (found {found!r})")
        try:
            return cls(Tokenizer.from_str(json.dumps(data)))
        except Exception as e:  # tokenizers raises its own exception type for a malformed file
            raise UserError(f"{p} is not a valid tokenizer.json: {str(e).splitlines()[0][:200]}") from None


def pad_batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists of different lengths -> (input_ids, attention_mask), both (B, max length), padded at the end."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask
