"""Tagged sentences for sequence labelling (BIO tags, Ramshaw & Marcus, 1995) and their sub-word alignment.

Two sources:

- a file the user brings: CoNLL style (one token per line with its tag in the
  last column, a blank line between sentences, `-DOCSTART-` lines skipped) or
  JSON Lines with `tokens` and `tags` lists;
- the built-in task, character names mentioned inside the speeches of Tiny
  Shakespeare (`name_mentions`). The speaker headers give the list of names;
  a mention is tagged B-PER (I-PER for a name word right after another). A
  share of the names is held out: passages that mention them form the
  `unseen` test set and never occur in training, so a model that only
  memorised the training names scores 0 there and one that reads the context
  does not.

A word may become several WordPiece pieces. Its tag goes on its first piece and
the other pieces get `IGNORE` (no loss), as in BERT's NER fine-tuning; reading
the tag at the first piece turns the model's output back into one tag per word
(`align`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from tinyformer.data.classification import _json_rows, _paragraphs
from tinyformer.data.tokenizers import IGNORE
from tinyformer.errors import UserError, quoted
from tinyformer.files import input_file

JSONL = (".jsonl", ".ndjson")
ROLES = {  # header words that pass the lower-case test but are roles, titles or peoples, not names
    *("Aedile", "Archbishop", "Chorus", "Conspirators", "Gardener", "Haberdasher", "Huntsman", "Mariner"),
    *("Player", "Roman", "Servingman", "Seventh", "Sheriff", "Sixth", "Volsce", "Watchman"),
}
WORD = re.compile(r"\w+(?:'(?!s\b)\w+)*|'s\b|[^\w\s]")  # a word ("o'er" too), a possessive 's, or a punctuation mark


@dataclass
class TaggedSentences:
    """Parallel lists: sentence i is words[i] with tags[i] (one tag per word), found at where[i] in its source."""

    words: list[list[str]] = field(default_factory=list)
    tags: list[list[str]] = field(default_factory=list)
    where: list[int] = field(default_factory=list)  # line number of its first token, or passage index in the play

    def __len__(self) -> int:
        return len(self.words)

    def add(self, words: list[str], tags: list[str], where: int) -> None:
        self.words.append(words)
        self.tags.append(tags)
        self.where.append(where)

    def subset(self, idx: list[int]) -> TaggedSentences:
        return TaggedSentences([self.words[i] for i in idx], [self.tags[i] for i in idx], [self.where[i] for i in idx])

    @property
    def labels(self) -> list[str]:
        """Every tag that occurs, "O" first, then sorted (B-X before I-X)."""
        found = {t for tags in self.tags for t in tags}
        return ["O", *sorted(found - {"O"}, key=lambda t: (t[2:], t[0]))]


def split_words(text: str) -> list[str]:
    """A text as the words a tagger labels: words and punctuation marks."""
    return WORD.findall(text)


# ---------------------------------------------------------------------------- files


def check_tag(tag: str, where: str) -> str:
    if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
        raise UserError(f"{where}: tag {quoted(tag)} is not BIO; use O, B-<type> or I-<type> (e.g. B-PER)")
    return tag


def read_tagged(path: str | Path) -> TaggedSentences:
    """A CoNLL-style file or a .jsonl file of tagged sentences; every bad line is a UserError naming it."""
    p = input_file(path, "tagged data file")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{p} is not UTF-8 text (bad byte at offset {e.start}); save it as UTF-8") from None
    data = _read_jsonl(text, p) if p.suffix.lower() in JSONL else _read_conll(text, p)
    if not data.words:
        raise UserError(f"{p} holds no tagged sentence")
    return data


def looks_tagged(path: str | Path, lines: int = 50) -> bool:
    """Whether a file reads as CoNLL (most of its first non-blank lines end in a BIO tag) rather than as a play."""
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            head = [line.split() for line in (next(f, "") for _ in range(4 * lines)) if line.strip()][:lines]
    except OSError:
        return False  # read_tagged names the problem
    tagged = sum(len(cols) >= 2 and (cols[-1] == "O" or cols[-1][:2] in ("B-", "I-")) for cols in head)
    return bool(head) and tagged >= len(head) / 2


def _read_conll(text: str, p: Path) -> TaggedSentences:
    data, words, tags, first = TaggedSentences(), [], [], 0
    for n, line in enumerate(text.splitlines(), start=1):
        cols = line.split()
        if not cols or cols[0] == "-DOCSTART-":
            if words:
                data.add(words, tags, first)
            words, tags = [], []
            continue
        if len(cols) < 2:
            raise UserError(f"{p} line {n}: {quoted(line.strip())} has no tag; write the token, a space, then its tag")
        words.append(cols[0])
        tags.append(check_tag(cols[-1], f"{p} line {n}"))
        first = first if len(words) > 1 else n
    if words:
        data.add(words, tags, first)
    return data


def _read_jsonl(text: str, p: Path) -> TaggedSentences:
    data = TaggedSentences()
    for n, obj in _json_rows(text, p)[1]:  # (line number, object); invalid JSON and non-objects are refused there
        words, tags = obj.get("tokens"), obj.get("tags")
        if not (isinstance(words, list) and isinstance(tags, list) and words):
            raise UserError(f"{p} line {n}: needs an object with non-empty lists 'tokens' and 'tags'")
        if len(words) != len(tags):
            raise UserError(f"{p} line {n}: {len(words)} tokens but {len(tags)} tags; give one tag per token")
        if not all(isinstance(x, str) and x.strip() for x in words + tags):
            raise UserError(f"{p} line {n}: every token and tag must be a non-empty string")
        data.add(words, [check_tag(t, f"{p} line {n}") for t in tags], n)
    return data


# ---------------------------------------------------------------------------- the built-in task


def play_names(text: str) -> list[str]:
    """Names from the speaker headers ("KING RICHARD III:" gives "Richard"): each header word of 3+ letters, in
    title case, whose lower-case form is never a word of the play (that drops KING, LADY, First, Citizen...), and
    not one of the few `ROLES` that pass that test."""
    lower = set(re.findall(r"\b[a-z]+\b", text))
    names = set()
    for para in _paragraphs(text):
        head = para[0].strip()
        if head.endswith(":") and len(para) > 1:
            for w in head[:-1].split():
                if w.isalpha() and len(w) >= 3 and w.lower() not in lower and set(w.upper()) - set("IVXLC"):
                    names.add(w.title())
    return sorted(names - ROLES)


def tag_names(words: list[str], names: set[str]) -> list[str]:
    """B-PER on a name, I-PER on a name right after another ("Lady Capulet" is one mention), O elsewhere."""
    tags = []
    for i, w in enumerate(words):
        tags.append("O" if w not in names else "I-PER" if i and words[i - 1] in names else "B-PER")
    return tags


def passages(text: str, max_words: int = 40) -> list[list[str]]:
    """Each speech's lines (its header left out) grouped into passages of up to `max_words` words."""
    out = []
    for para in _paragraphs(text):
        if not (para[0].strip().endswith(":") and len(para) > 1):
            continue
        current: list[str] = []
        for line in para[1:]:
            words = split_words(line)
            if current and len(current) + len(words) > max_words:
                out.append(current)
                current = []
            current += words
        if current:
            out.append(current)
    return out


@dataclass
class NameMentions:
    sentences: TaggedSentences  # every kept passage, tagged with all the names
    unseen_names: list[str]  # the held-out names: none of them occurs in train or val
    unseen: list[int]  # passages mentioning held-out names only (the `unseen` test set)
    seen: list[int]  # every other kept passage: training names only, or none (split into train / val / test)


def name_mentions(text: str, unseen_fraction: float = 0.2, seed: int = 0) -> NameMentions:
    """The built-in tagging task: passages mentioning names, as many without any, names held out by `seed`.

    A passage mentioning both a held-out and a training name is dropped (it would belong to neither test set).
    """
    names = play_names(text)
    rng = random.Random(f"names:{seed}")
    shuffled = rng.sample(names, len(names))
    unseen_names = set(shuffled[: max(1, round(unseen_fraction * len(names)))])
    known = set(names)  # looked up for every word of the play
    data, seen, unseen, empty = TaggedSentences(), [], [], []
    for i, words in enumerate(passages(text)):
        mentioned = {w for w in words if w in known}
        if mentioned and mentioned <= unseen_names:
            unseen.append(len(data))
        elif mentioned and not mentioned & unseen_names:
            seen.append(len(data))
        elif not mentioned:
            empty.append((i, words))
            continue
        else:
            continue
        data.add(words, tag_names(words, known), i)
    keep = sorted(rng.sample(empty, min(len(empty), len(seen) + len(unseen))))  # as many passages without a name
    for i, words in keep:
        seen.append(len(data))
        data.add(words, ["O"] * len(words), i)
    return NameMentions(data, sorted(unseen_names), unseen, seen)


def split_indices(idx: list[int], val_fraction: float, test_fraction: float, seed: int) -> dict[str, list[int]]:
    """A seeded shuffle of `idx` cut into train / val / test by fraction (each at least 1 when possible)."""
    idx = random.Random(f"split:{seed}").sample(idx, len(idx))
    n_test = max(1, round(test_fraction * len(idx)))
    n_val = max(1, round(val_fraction * len(idx)))
    return {"test": sorted(idx[:n_test]), "val": sorted(idx[n_test : n_test + n_val]), "train": idx[n_test + n_val :]}


# ---------------------------------------------------------------------------- sub-word alignment


@dataclass
class Aligned:
    """One model input for the words words[start : start + len(first)] of a sentence."""

    ids: list[int]  # [CLS] pieces [SEP]
    first: list[int]  # position of each word's first piece in ids
    start: int  # index of the row's first word in the sentence

    def labels(self, tag_ids: list[int]) -> list[int]:
        """Per position: the word's tag id at its first piece, IGNORE everywhere else ([CLS], [SEP], later pieces)."""
        out = [IGNORE] * len(self.ids)
        for k, pos in enumerate(self.first):
            out[pos] = tag_ids[self.start + k]
        return out


def word_pieces(tokenizer, words: list[str]) -> list[list[int]]:
    """The WordPiece ids of each word; a word the normaliser erases entirely becomes [UNK], so it keeps a tag."""
    enc = tokenizer.hf.encode(words, is_pretokenized=True, add_special_tokens=False)
    pieces: list[list[int]] = [[] for _ in words]
    for token, w in zip(enc.ids, enc.word_ids):
        pieces[w].append(token)
    return [p or [tokenizer.unk_id] for p in pieces]


def align(tokenizer, words: list[str], seq_len: int) -> list[Aligned]:
    """A sentence as rows of [CLS] pieces [SEP] of at most `seq_len` ids; a sentence too long for one row is cut
    between words into several, so every word has exactly one first piece in exactly one row."""
    rows, ids, first, start = [], [tokenizer.cls_id], [], 0
    for k, p in enumerate(word_pieces(tokenizer, words)):
        p = p[: seq_len - 2]  # a single word longer than a row keeps its first pieces
        if len(ids) + len(p) + 1 > seq_len:
            rows.append(Aligned([*ids, tokenizer.sep_id], first, start))
            ids, first, start = [tokenizer.cls_id], [], k
        first.append(len(ids))
        ids += p
    rows.append(Aligned([*ids, tokenizer.sep_id], first, start))
    return rows
