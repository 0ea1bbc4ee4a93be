"""Subword vocabularies learned by merging, written out: byte-level BPE (GPT-2's) and WordPiece (BERT's).

**Training** (`learn_merges`) starts from the words of the training text with their counts, each word a
sequence of symbols: its bytes (BPE), or its characters with "##" before every one but the first (WordPiece,
so a piece knows whether it starts a word). Then, until the vocabulary is full: count every pair of
neighbouring symbols over all words, each word weighted by its count; merge the most frequent pair wherever
it occurs; the merged symbol joins the vocabulary. **Ties go to the pair whose (left, right) strings sort
first**, so the same text and size give the same vocabulary in any process, with any number of threads, on
any machine. (Hugging Face `tokenizers` breaks ties by the order in which its threads filled hash maps: four
runs on the play gave four WordPiece vocabularies.) The counts are kept up to date merge by merge, touching
only the words that hold the merged pair, so a vocabulary of 4,096 on Tiny Shakespeare takes seconds.

**Encoding** a word with a learned vocabulary (`bpe_word`, `wordpiece_word`):
- BPE applies the merges in the order they were learned: while two neighbours form a learned pair, merge the
  pair learned first, at every place it occurs, left to right.
- WordPiece takes the longest piece of the vocabulary that starts the rest of the word, again and again;
  a word with a part no piece covers is one [UNK].

The words themselves come from the tokenizer's own pre-tokenizer (Hugging Face's: GPT-2's regex for BPE,
BERT's whitespace and punctuation split after its normalizer for WordPiece), which is deterministic; the
tokenizers tinyformer trains are Hugging Face tokenizer.json files built from these vocabularies, and a test
holds `encode` / `decode` here equal to theirs on the play and on Chinese text.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable

PREFIX = "##"  # WordPiece: a piece that continues a word


def byte_symbols() -> list[str]:
    """GPT-2's 256 printable stand-ins for the bytes 0..255, in byte order: a printable Latin-1 byte stands for
    itself, every other byte for the next unused character from U+0100 on (so a space is "Ġ", U+0120)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def learn_merges(
    words: dict[tuple[str, ...], int],
    n: int,
    join: Callable[[str, str], str] = str.__add__,
    on_merge: Callable[[tuple[str, str], int], None] | None = None,
) -> list[tuple[str, str]]:
    """Up to `n` merges learned from `words` ({symbols: count}); `join` makes the merged symbol, `on_merge` sees
    each pair with its count as it is chosen (the guide prints the first ones)."""
    seqs = [list(w) for w in words]
    counts = list(words.values())
    pairs, holders = count_pairs(seqs, counts)
    heap = [(-c, pair) for pair, c in pairs.items()]  # most frequent first; equal counts: the smaller pair
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while heap and len(merges) < n:
        negative, pair = heapq.heappop(heap)
        count = pairs.get(pair, 0)
        if count <= 0:
            continue
        if -negative != count:  # counted again since it was pushed
            heapq.heappush(heap, (-count, pair))
            continue
        merges.append(pair)
        if on_merge:
            on_merge(pair, count)
        touched = merge_everywhere(pair, join(*pair), seqs, counts, pairs, holders)
        for t in touched - {pair}:
            if pairs[t] > 0:
                heapq.heappush(heap, (-pairs[t], t))
    return merges


Pair = tuple[str, str]


def count_pairs(seqs: list[list[str]], counts: list[int]) -> tuple[Counter[Pair], defaultdict[Pair, set[int]]]:
    """-> (each pair of neighbouring symbols with its count over the words, each weighted by its count; the words
    that hold each pair)."""
    pairs: Counter[Pair] = Counter()
    holders: defaultdict[Pair, set[int]] = defaultdict(set)  # pair -> words that held it once
    for i, (seq, c) in enumerate(zip(seqs, counts, strict=True)):
        for pair in zip(seq, seq[1:], strict=False):
            pairs[pair] += c
            holders[pair].add(i)
    return pairs, holders


def merge_everywhere(pair: Pair, merged: str, seqs, counts, pairs: Counter[Pair], holders) -> set[Pair]:
    """Merge `pair` in every word that holds it, keeping `pairs` and `holders` up to date (only those words are
    touched) -> the pairs whose counts changed."""
    touched: set[Pair] = set()
    for i in sorted(holders.pop(pair)):
        seq, c = seqs[i], counts[i]
        for old in zip(seq, seq[1:], strict=False):
            pairs[old] -= c
            touched.add(old)
        seq = merge_pair(seq, pair, merged)
        seqs[i] = seq
        for new in zip(seq, seq[1:], strict=False):
            pairs[new] += c
            holders[new].add(i)
            touched.add(new)
    pairs.pop(pair, None)
    return touched


def merge_pair(seq: list[str], pair: tuple[str, str], merged: str) -> list[str]:
    """`seq` with every occurrence of `pair`, from the left, replaced by `merged`."""
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == pair[0] and seq[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def word_counts(texts: Iterable[str], split: Callable[[str], list[str]]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(split(text))
    return counts


# ---- byte-level BPE ------------------------------------------------------------------------------------------
def train_bpe(
    words: Counter[str], vocab_size: int, specials: tuple[str, ...] = (), on_merge=None
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """`words`: pre-tokenized words in GPT-2's byte alphabet, with counts -> (vocab, merges): the specials, the
    256 bytes, then one token per merge, `vocab_size` in all (fewer when the text has no more pairs)."""
    alphabet = byte_symbols()
    merges = learn_merges(
        {tuple(w): c for w, c in sorted(words.items())}, vocab_size - len(specials) - 256, on_merge=on_merge
    )
    tokens = [*specials, *alphabet, *(a + b for a, b in merges)]
    return {t: i for i, t in enumerate(tokens)}, merges


def bpe_word(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """A word in GPT-2's byte alphabet -> its BPE tokens: the earliest-learned pair merged first, everywhere."""
    symbols = list(word)
    while len(symbols) > 1:
        rank, pair = min((ranks.get(p, len(ranks)), p) for p in zip(symbols, symbols[1:], strict=False))
        if rank == len(ranks):
            break
        symbols = merge_pair(symbols, pair, pair[0] + pair[1])
    return symbols


def bpe_decode(tokens: list[str]) -> str:
    """BPE tokens -> text: each symbol back to its byte, the bytes read as UTF-8 (a cut character: U+FFFD)."""
    byte_of = {s: b for b, s in enumerate(byte_symbols())}
    return bytes(byte_of[ch] for t in tokens for ch in t).decode("utf-8", errors="replace")


# ---- WordPiece -----------------------------------------------------------------------------------------------
def wordpiece_symbols(word: str) -> tuple[str, ...]:
    return (word[0], *(PREFIX + ch for ch in word[1:])) if word else ()


def join_pieces(left: str, right: str) -> str:
    return left + right.removeprefix(PREFIX)


def train_wordpiece(
    words: Counter[str], vocab_size: int, specials: tuple[str, ...] = (), on_merge=None
) -> dict[str, int]:
    """`words`: normalized, pre-tokenized words with counts -> the vocabulary: the specials, every character
    of the words both as a word's start and as a continuation ("e", "##e": any word made of them can be
    spelled), sorted, then one piece per merge, up to `vocab_size` in all."""
    start = {tuple(wordpiece_symbols(w)): c for w, c in sorted(words.items())}
    alphabet = sorted({form for w in words for ch in w for form in (ch, PREFIX + ch)})
    room = vocab_size - len(specials) - len(alphabet)
    merges = learn_merges(start, max(room, 0), join=join_pieces, on_merge=on_merge)
    tokens = [*specials, *alphabet]
    known = set(tokens)
    for pair in merges:
        piece = join_pieces(*pair)
        if piece not in known:  # a piece can be made by two merges ("a" "##bc", "ab" "##c")
            known.add(piece)
            tokens.append(piece)
    return {t: i for i, t in enumerate(tokens)}


def wordpiece_word(word: str, vocab: dict[str, int], unk: str = "[UNK]", max_chars: int = 100) -> list[str]:
    """A word -> its pieces, longest first from the left; [UNK] for a word no pieces spell, or a long one."""
    if len(word) > max_chars:
        return [unk]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and ((PREFIX if start else "") + word[start:end]) not in vocab:
            end -= 1
        if end == start:
            return [unk]
        pieces.append((PREFIX if start else "") + word[start:end])
        start = end
    return pieces


CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"))
CLEANUP += ((" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # BERT's decoder's


def wordpiece_decode(tokens: list[str]) -> str:
    """Pieces -> text: a "##" piece joins the one before it, other pieces start a new word after a space;
    then BERT's clean-up of the spaces its split put before punctuation, piece by piece."""
    out = []
    for i, t in enumerate(tokens):
        piece = t.removeprefix(PREFIX) if t.startswith(PREFIX) else (" " + t if i else t)
        for dirty, clean in CLEANUP:
            piece = piece.replace(dirty, clean)
        out.append(piece)
    return "".join(out)
