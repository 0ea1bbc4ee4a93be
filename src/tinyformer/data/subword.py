"""A WordPiece subword tokenizer (Schuster & Nakajima, 2012; as in BERT, Devlin et al., 2019).

Two sources, one class and one file format (Hugging Face's own tokenizer.json, which
`tokenizers.Tokenizer.from_file` and `transformers.PreTrainedTokenizerFast` read as well):

- `train`: learned on the training split only by tinyformer's own trainer
  (`tinyformer.data.merges`: the same vocabulary in any process), lower-cased, with the
  five special tokens at ids 0-4: [PAD] [UNK] [CLS] [SEP] [MASK] (`PAD_ID` ... `MASK_ID`).
- `from_pretrained`: a Hugging Face BERT folder's tokenizer.json, or, when it has only
  vocab.txt, BERT's WordPiece rebuilt from it (lower-cased as tokenizer_config.json's
  do_lower_case says). Its special tokens keep their own ids (uncased BERT: [PAD]=0,
  [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103).

Special ids are therefore looked up by name: `pad_id`, `unk_id`, `cls_id`, `sep_id`,
`mask_id`, and `special_ids` (every special token). `encode` wraps a text as
[CLS] ... [SEP]; special tokens written in the text ("To be or not to [MASK]") stay
single tokens. Truncation and padding stored in a tokenizer.json are switched off:
`encode` cuts, `batch` pads.

`batch` pads a list of texts to the longest one and returns the padding as a
Hugging Face style attention mask (1 = real token, 0 = padding); models turn it
into tinyformer's mask convention at one boundary, `masks.from_hf_attention_mask`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

import torch

from tinyformer.data.hf_files import Key, check_tokenizer_json, json_object, read_keys
from tinyformer.data.tokenizers import pad_batch
from tinyformer.errors import UserError
from tinyformer.files import atomic_write, kind, read_text
from tinyformer.hub import MAX_TOKENIZER_BYTES, folder_file, folder_json

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIALS))  # the ids `train` gives them


class SubwordTokenizer:
    pad_token, unk_token, cls_token, sep_token, mask_token = SPECIALS  # the names Hugging Face tokenizers use

    def __init__(self, tokenizer, source: str = "the tokenizer") -> None:
        """Wrap a `tokenizers.Tokenizer` holding the five `SPECIALS` (at any ids) that wraps texts in [CLS] [SEP]."""
        ids = {name: tokenizer.token_to_id(name) for name in SPECIALS}
        missing = [name for name, i in ids.items() if i is None]
        if missing:
            raise UserError(f"{source} has no {', '.join(missing)} token; a BERT vocabulary has all of {SPECIALS}")
        tokenizer.add_special_tokens(list(SPECIALS))  # no-op when they are already special: one token in any text
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.hf = tokenizer
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids.values()
        added = tokenizer.get_added_tokens_decoder()  # {id: AddedToken}
        self.special_ids = sorted({*ids.values(), *(i for i, t in added.items() if t.special)})
        probe = tokenizer.encode("a").ids
        if probe[0] != self.cls_id or probe[-1] != self.sep_id:
            raise UserError(f"{source} does not wrap a text as [CLS] ... [SEP]; it needs BERT's post-processor")

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 2000) -> SubwordTokenizer:
        """Learn a WordPiece vocabulary of `vocab_size` tokens (specials included) from `texts`, the same in any
        process (`tinyformer.data.merges`: ties broken by a stated rule)."""
        from tokenizers import Tokenizer, models

        from tinyformer.data.merges import train_wordpiece, word_counts

        vocab = train_wordpiece(word_counts(texts, bert_words), vocab_size, SPECIALS)
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = trained_normalizer()
        _bert_pipeline(tok, CLS_ID, SEP_ID)
        return cls(tok)

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> SubwordTokenizer:
        """A Hugging Face BERT folder's tokenizer: its tokenizer.json, else a WordPiece built from its vocab.txt."""
        folder = Path(folder)
        if kind(folder / "tokenizer.json") is not None:
            return cls.load(folder / "tokenizer.json")
        if kind(folder / "vocab.txt") is None:
            raise UserError(f"{folder} has neither tokenizer.json nor vocab.txt; it holds no BERT tokenizer")
        return cls.from_vocab(folder / "vocab.txt", lowercase=_do_lower_case(folder))

    @classmethod
    def from_vocab(cls, path: Path, lowercase: bool = True) -> SubwordTokenizer:
        """BERT's tokenizer from a vocab.txt (one token a line, id = line number), as `BertTokenizerFast` builds it."""
        from tokenizers import Tokenizer, models, normalizers

        lines = read_text(folder_file(path, MAX_TOKENIZER_BYTES)).split("\n")
        vocab = {}
        for token in lines[:-1] if lines[-1] == "" else lines:  # the file ends in a newline
            vocab.setdefault(token, len(vocab))
        missing = [name for name in SPECIALS if name not in vocab]
        if missing:
            raise UserError(f"{path} has no {', '.join(missing)} token; a BERT vocabulary has all of {SPECIALS}")
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lowercase)
        _bert_pipeline(tok, vocab["[CLS]"], vocab["[SEP]"])
        return cls(tok, str(path))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str, max_len: int | None = None) -> list[int]:
        """[CLS] tokens [SEP]; with `max_len`, the tokens are cut so that the whole fits in it."""
        ids = self.hf.encode(text).ids
        if max_len is not None and len(ids) > max_len:
            ids = ids[: max_len - 1] + [self.sep_id]
        return ids

    def encode_plain(self, text: str) -> list[int]:
        """Word pieces only, no [CLS]/[SEP] (for cutting a long text into windows)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def batch(self, texts: list[str], max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> input_ids (B, T) padded with [PAD] and attention_mask (B, T), 1 = real, 0 = padding."""
        return pad_batch([self.encode(t, max_len) for t in texts], self.pad_id)

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
        """A tokenizer.json: one this class saved, or a Hugging Face BERT's."""
        from tokenizers import Tokenizer

        p = Path(path)
        data = folder_json(p)
        model = data.get("model") if isinstance(data, dict) else None
        if not isinstance(model, dict) or model.get("type") != "WordPiece":
            found = model.get("type") if isinstance(model, dict) else type(data).__name__
            raise UserError(f"{p} is not a WordPiece tokenizer.json (found {found!r})")
        check_tokenizer_json(data, str(p))
        try:
            tok = Tokenizer.from_str(json.dumps(data))
        except Exception as e:  # tokenizers raises its own exception type for a malformed file
            raise UserError(f"{p} is not a valid tokenizer.json: {str(e).splitlines()[0][:200]}") from None
        return cls(tok, str(p))


def trained_normalizer():
    """What `train` does to a text before splitting it: BERT's clean-up, lower case, accents stripped."""
    from tokenizers import normalizers

    return normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)


def bert_words(text: str) -> list[str]:
    """`text` as the words `train` learns from: normalized (`trained_normalizer`), then cut at whitespace and
    around every punctuation mark (BERT's pre-tokenizer)."""
    normalizer, split = _pipeline()
    return [w for w, _ in split.pre_tokenize_str(normalizer.normalize_str(text))]


@functools.cache
def _pipeline():
    from tokenizers import pre_tokenizers

    return trained_normalizer(), pre_tokenizers.BertPreTokenizer()


def _bert_pipeline(tok, cls_id: int, sep_id: int) -> None:
    """BERT's pre-tokenizer (whitespace and punctuation), ## decoder and [CLS] $A [SEP] template, on `tok`."""
    from tokenizers import decoders, pre_tokenizers, processors

    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )


def _do_lower_case(folder: Path) -> bool:
    """tokenizer_config.json's do_lower_case (BertTokenizer's default, True, when the file or the key is absent)."""
    path = folder / "tokenizer_config.json"
    if kind(path) is None:
        return True
    settings = json_object(folder_json(path), str(path))
    return read_keys(settings, (Key("do_lower_case", bool, True),), str(path))["do_lower_case"]
