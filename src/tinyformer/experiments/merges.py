"""BPE and WordPiece written out: the merges tinyformer's own trainers learn on the play, one by one.

No model is trained. The study runs the trainers of `tinyformer.data.merges` on the training split exactly as
the runs do: byte-level BPE over GPT-2's words of the split as one text (`train gpt --set data.tokenizer=bpe`),
WordPiece over BERT's lower-cased words, paragraph by paragraph (`train mlm` and the classifiers). It reports
the first merges of each with the count each pair had when it was merged, and how the held-out split's length
in tokens falls as BPE merges are added. Ties go to the pair that sorts first, so the report is the same in
any process, on any machine.

    tinyformer experiment merges [--quick] [--out DIR] [--data PATH]
"""

from __future__ import annotations

from pathlib import Path

from tinyformer.config import DataConfig
from tinyformer.data import merges as M
from tinyformer.data.bpe import byte_words
from tinyformer.data.subword import bert_words
from tinyformer.data.tinyshakespeare import read_text, resolve_path
from tinyformer.data.tokenizers import show_char
from tinyformer.experiments.report import figure, markdown_table, study_folder, write_report

FIRST = 20  # merges shown of each trainer
VOCAB = DataConfig().vocab_size  # the BPE GPT's vocabulary: its merges are the growth table's last row
GROWTH = (0, 100, 500, 1000, 2000, VOCAB - 256)  # merges at which the held-out split is counted
QUICK = 60_000  # CI: the characters of the play read (the same merges and rows, counted on less text)
EVERY = 100  # the plot's step, in merges

Pair = tuple[str, str]
BYTE = {s: b for b, s in enumerate(M.byte_symbols())}


def splits(text: str) -> tuple[str, str]:
    """(train, val): the play cut where the runs cut it (the last `data.val_fraction` held out)."""
    cut = int(len(text) * (1 - DataConfig().val_fraction))
    return text[:cut], text[cut:]


def learned(words: dict[tuple[str, ...], int], n: int, join=str.__add__) -> list[tuple[Pair, int]]:
    """The first `n` merges learned from `words`, each with its count when it was merged."""
    seen: list[tuple[Pair, int]] = []
    M.learn_merges(words, n, join, on_merge=lambda pair, count: seen.append((pair, count)))
    return seen


def bpe_merges(train: str, n: int) -> list[tuple[Pair, int]]:
    """The first `n` byte-level BPE merges of `train` (one text, as `train gpt` learns them), with counts."""
    seen: list[tuple[Pair, int]] = []
    M.train_bpe(M.word_counts([train], byte_words), 256 + n, on_merge=lambda p, c: seen.append((p, c)))
    return seen


def wordpiece_merges(train: str, n: int) -> list[tuple[Pair, int]]:
    """The first `n` WordPiece merges of `train` (its paragraphs, as `train mlm` learns them), with counts."""
    words = M.word_counts(train.split("\n\n"), bert_words)
    return learned({M.wordpiece_symbols(w): c for w, c in sorted(words.items())}, n, M.join_pieces)


def tokens(words: dict[str, int], merges: list[Pair], n: int) -> int:
    """How many tokens the text of `words` ({word: count}, `byte_words`) is with the first `n` BPE merges, each
    word encoded as `BPETokenizer` encodes it."""
    ranks = {pair: i for i, pair in enumerate(merges[:n])}
    return sum(c * len(M.bpe_word(w, ranks)) for w, c in words.items())


def readable(symbol: str, byte_level: bool) -> str:
    """A token as a code span whose spaces and newlines can be seen ("␣t"): a BPE symbol is read back from
    the byte alphabet (a byte that is no printable character keeps its stand-in)."""
    if byte_level:
        symbol = "".join(chr(BYTE[ch]) if 32 <= BYTE[ch] < 127 or BYTE[ch] in (9, 10) else ch for ch in symbol)
    shown = "".join(show_char(ch) for ch in symbol).replace("|", "¦")  # a bar would split the table's cell
    return f"`` {shown} ``" if "`" in shown else f"`{shown}`"


def merge_rows(merges: list[tuple[Pair, int]], join, byte_level: bool) -> list[list]:
    return [
        [rank, f"{readable(a, byte_level)} + {readable(b, byte_level)}", readable(join(a, b), byte_level), f"{c:,}"]
        for rank, ((a, b), c) in enumerate(merges, start=1)
    ]


def growth_rows(val: str, merges: list[Pair], points: tuple[int, ...]) -> list[list]:
    words, rows = M.word_counts([val], byte_words), []
    for n in points:
        count = tokens(words, merges, n)
        rows.append([n, f"{256 + n:,}", f"{count:,}", f"{count / len(val):.4f}", f"{len(val) / count:.2f}"])
    return rows


def plot(val: str, merges: list[Pair], png: Path) -> None:
    from tinyformer.plots import plot_series

    words, points = M.word_counts([val], byte_words), sorted({*range(0, len(merges) + 1, EVERY), len(merges)})
    curve = [(n, tokens(words, merges, n) / len(val)) for n in points]
    title = "Byte-level BPE: the held-out split gets shorter as merges are added"
    plot_series({"BPE": curve}, png, "merges learned", "tokens per character (val split)", title)


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    text = read_text(resolve_path(data))  # before the folder is made: a refused --data leaves nothing
    folder = study_folder("merges", out, quick)
    train, val = splits(text[:QUICK] if quick else text)
    bpe = bpe_merges(train, max(GROWTH))
    merges = [pair for pair, _ in bpe]
    plot(val, merges, folder / "tokens_per_char.png")
    parts = body(train, val, bpe, tuple(n for n in GROWTH if n <= len(merges)))  # a short text runs out of pairs
    return write_report(folder, "BPE and WordPiece, merge by merge, on the play", quick, parts, from_runs=False)


def body(train: str, val: str, bpe: list[tuple[Pair, int]], growth: tuple[int, ...]) -> list[str]:
    merges, wordpiece = [pair for pair, _ in bpe], wordpiece_merges(train, FIRST)
    texts = [
        ["train (BPE)", f"{len(train):,}", *word_figures(M.word_counts([train], byte_words))],
        ["train (WordPiece)", f"{len(train):,}", *word_figures(M.word_counts(train.split("\n\n"), bert_words))],
        ["val (BPE)", f"{len(val):,}", *word_figures(M.word_counts([val], byte_words))],
    ]
    return [
        "## The texts",
        "",
        markdown_table(["text", "characters", "words", "distinct words"], texts),
        "",
        f"## Byte-level BPE: the first {FIRST} merges (count: the pair's occurrences when it was merged)",
        "",
        markdown_table(["rank", "pair", "token", "count"], merge_rows(bpe[:FIRST], str.__add__, True)),
        "",
        "## Byte-level BPE: the held-out split in tokens as merges are added (vocabulary: 256 bytes + merges)",
        "",
        markdown_table(
            ["merges", "vocabulary", "val tokens", "tokens per character", "characters per token"],
            growth_rows(val, merges, growth),
        ),
        "",
        figure("tokens_per_char.png", "tokens per character of the val split against merges"),
        "",
        f"## WordPiece: the first {FIRST} merges (## marks a piece that continues a word)",
        "",
        markdown_table(["rank", "pair", "piece", "count"], merge_rows(wordpiece, M.join_pieces, False)),
    ]


def word_figures(words: dict[str, int]) -> list[str]:
    return [f"{sum(words.values()):,}", f"{len(words):,}"]
