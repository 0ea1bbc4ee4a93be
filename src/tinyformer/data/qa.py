"""Extractive question answering (SQuAD, Rajpurkar et al., 2016): the answer is a span of the context.

As in BERT (Devlin et al., 2019) a model gives each token a start and an end logit; this module holds
all around it. `QAExample` is one question with its passage and answers (`tinyformer.data.squad` reads them
from SQuAD files, and holds SQuAD's metrics). `who_says` is the offline task from Tiny Shakespeare ("Who says
'<line>'?", answered by a speaker header), with its question-blind `nearest_header_baseline`;
`split_by_passage` keeps each passage's questions in one split. `make_windows` cuts a long passage into
overlapping windows `stride` tokens apart, as BERT's run_squad does, and `decode` picks the best span over
all of them.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch

from tinyformer.data.classification import _speeches
from tinyformer.errors import UserError


@dataclass
class QAExample:
    id: str  # the record's id ("record 3" / the file's id / "window 12 line 1")
    question: str  # the question text
    context: str  # the passage that holds the answer
    answers: list[tuple[str, int]]  # (answer text, character offset in context); answers[0] is the training target
    where: int = 0  # position in its source (record number, or window index in the play) for splitting


# ---------------------------------------------------------------------------- who says? (Tiny Shakespeare)


def who_says(text: str, speeches: int = 4, max_lines: int = 3, per_window: int = 2, seed: int = 0) -> list[QAExample]:
    """Questions "Who says '<line>'?" over non-overlapping windows of `speeches` consecutive speeches.

    Each speech keeps its first `max_lines` lines; a window that is not full (the play's end) is dropped.
    """
    for flag, value in (("speeches", speeches), ("max_lines", max_lines), ("per_window", per_window)):
        if value < 1:
            raise UserError(f"{flag}={value}: who_says needs {flag} >= 1")
    found = [(name, [ln.strip() for ln in body.split("\n")][:max_lines]) for name, body in _speeches(text)]
    if len(found) < speeches:
        raise UserError(f"the text has {len(found)} speeches ('NAME:' paragraphs); who_says needs >= {speeches}")
    examples = []
    for w in range(len(found) // speeches):
        examples += _window_questions(found[w * speeches : (w + 1) * speeches], w, per_window, seed)
    return examples


def _window_questions(group: list[tuple[str, list[str]]], w: int, per_window: int, seed: int) -> list[QAExample]:
    """Up to `per_window` questions on lines of >= 3 words that occur once in the window's context."""
    blocks = [f"{name}:\n" + "\n".join(lines) for name, lines in group]
    context = "\n\n".join(blocks)
    lines, at = [], 0  # (line index in the window, line, speaker, header offset)
    for (name, speech), block in zip(group, blocks):
        lines += [(len(lines) + i, line, name, at) for i, line in enumerate(speech)]
        at += len(block) + 2
    fit = [c for c in lines if len(c[1].split()) >= 3 and _occurs_once(c[1], context)]
    chosen = random.Random(f"{seed}:{w}").sample(fit, min(per_window, len(fit)))
    return [
        QAExample(f"window {w} line {k}", f"Who says '{line}'?", context, [(name, at)], w)
        for k, line, name, at in chosen
    ]


def _occurs_once(part: str, text: str) -> bool:
    first = text.find(part)
    return first >= 0 and text.find(part, first + 1) < 0  # overlapping occurrences count too


def nearest_header_baseline(example: QAExample) -> str:
    """The speaker header nearest before the context's middle character: it never reads the question."""
    middle = len(example.context) // 2
    headers = [(m.start(1), m.group(1)) for m in re.finditer(r"(?:^|\n\n)([^\n]+):\n", example.context)]
    before = [name for at, name in headers if at <= middle]
    return before[-1] if before else (headers[0][1] if headers else "")


# ---------------------------------------------------------------------------- splits


def split_by_passage(examples: list[QAExample], val: float, test: float, seed: int) -> dict[str, list[QAExample]]:
    """Questions on one passage stay together; passages are shuffled (seeded) and cut by fraction."""
    contexts = list(dict.fromkeys(e.context for e in examples))
    random.Random(f"qa:{seed}").shuffle(contexts)
    n_test, n_val = max(1, round(test * len(contexts))), max(1, round(val * len(contexts)))
    if n_test + n_val >= len(contexts):
        raise UserError(
            f"{len(contexts)} distinct passages leave no training passage with data.val_fraction={val} and "
            f"data.test_fraction={test}; give more passages or lower the fractions"
        )
    part = {c: "test" if i < n_test else "val" if i < n_test + n_val else "train" for i, c in enumerate(contexts)}
    return {s: [e for e in examples if part[e.context] == s] for s in ("train", "val", "test")}


def first_per_passage(examples: list[QAExample], k: int) -> list[QAExample]:
    """The first k questions on each passage, in order."""
    seen: dict[str, int] = {}
    out = []
    for e in examples:
        seen[e.context] = seen.get(e.context, 0) + 1
        if seen[e.context] <= k:
            out.append(e)
    return out


# ---------------------------------------------------------------------------- windows and span decoding


@dataclass
class Window:
    input_ids: list[int]  # [CLS] question [SEP] context-piece [SEP]
    token_type_ids: list[int]  # 0 for [CLS] q [SEP], 1 for the context piece and the last [SEP]
    offsets: list[tuple[int, int] | None]  # per position: (start, end) characters in the context; None elsewhere
    start: int  # token position of the gold answer's first token here; 0 ([CLS]) when not wholly inside
    end: int  # token position of its last token; 0 when not wholly inside


def make_windows(
    tokenizer,
    question: str,
    context: str,
    seq_len: int,
    stride: int,
    answer: tuple[int, int] | None = None,
    max_question: int = 64,
    encoded: dict | None = None,
) -> list[Window]:
    """Overlapping windows of the context, `stride` tokens apart, each with the question in front.

    `answer` is (first character, end character exclusive) in the context; it becomes token positions.
    `encoded`: {context: its pieces and offsets}, filled here, for callers that ask several questions on one
    passage (the built-in task asks up to 8): each passage is then encoded once.
    """
    keep = min(max_question, seq_len - 3 - stride)  # a long question never leaves fewer than stride slots
    if keep < 1:
        raise UserError(f"seq_len={seq_len} with stride={stride} leaves no room for the question; raise seq_len")
    q_ids = tokenizer.hf.encode(question, add_special_tokens=False).ids[:keep]
    c_ids, c_off = encoded[context] if encoded is not None and context in encoded else _pieces(tokenizer, context)
    if encoded is not None:
        encoded[context] = (c_ids, c_off)
    if not c_ids:
        raise UserError("the context has no tokens (is it empty?); every question needs a passage")
    n = seq_len - len(q_ids) - 3  # context tokens per window
    if n < 1:
        raise UserError(
            f"seq_len={seq_len} leaves no room for the context after a {len(q_ids)}-token question and 3 special "
            f"tokens; raise seq_len above {len(q_ids) + 3} or lower max_question"
        )
    if not 1 <= stride <= n:
        raise UserError(f"stride={stride}: use 1 <= stride <= {n} (the context tokens in one window), or raise seq_len")
    gold = _gold_tokens(c_off, answer) if answer is not None else None
    starts = [0]
    while starts[-1] + n < len(c_ids):
        starts.append(starts[-1] + stride)
    return [_window(tokenizer, q_ids, c_ids[s : s + n], c_off[s : s + n], s, gold) for s in starts]


def _pieces(tokenizer, context: str) -> tuple[list[int], list[tuple[int, int]]]:
    """The context's WordPiece ids and the character span of each."""
    enc = tokenizer.hf.encode(context, add_special_tokens=False)
    return enc.ids, [tuple(o) for o in enc.offsets]


def _window(tokenizer, q_ids: list[int], piece: list[int], offsets: list, s: int, gold: tuple | None) -> Window:
    """[CLS] q [SEP] piece [SEP] for the piece starting at context token s; gold = answer tokens in the context."""
    head = len(q_ids) + 2  # [CLS] question [SEP]
    inside = gold is not None and s <= gold[0] and gold[1] < s + len(piece)
    return Window(
        [tokenizer.cls_id, *q_ids, tokenizer.sep_id, *piece, tokenizer.sep_id],
        [0] * head + [1] * (len(piece) + 1),
        [None] * head + offsets + [None],
        head + gold[0] - s if inside else 0,
        head + gold[1] - s if inside else 0,
    )


def _gold_tokens(offsets: list[tuple[int, int]], answer: tuple[int, int]) -> tuple[int, int]:
    """First token ending after the answer's start, last token starting before its end."""
    a, b = answer
    first = next((i for i, (_, end) in enumerate(offsets) if end > a), None)
    last = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < b), None)
    if first is None or last is None or last < first:
        raise UserError(f"the answer at characters {a}:{b} covers no token of the context")
    return first, last


def best_span(
    start_logits: torch.Tensor, end_logits: torch.Tensor, valid: torch.Tensor, max_len: int
) -> tuple[float, int, int]:
    """(score, s, e) maximising start_logits[s] + end_logits[e] over valid s <= e < s + max_len."""
    if not bool(valid.any()) or max_len < 1:
        raise ValueError(f"no span to choose: {int(valid.sum())} valid positions, max_len={max_len}")
    T = start_logits.shape[0]
    scores = start_logits[:, None] + end_logits[None, :]  # (T, T): row = start, column = end
    pos = torch.arange(T, device=start_logits.device)
    length = pos[None, :] - pos[:, None]  # (T, T): e - s
    ok = (length >= 0) & (length < max_len) & valid[:, None] & valid[None, :]  # (T, T)
    scores = scores.masked_fill(~ok, float("-inf"))  # an argmax, not a softmax: -inf is safe here
    best = int(scores.argmax())
    return float(scores.view(-1)[best]), best // T, best % T


@dataclass
class Answer:
    text: str  # the answer span's text
    score: float  # start logit + end logit
    start: int  # first character in the context
    end: int  # end character in the context (exclusive)
    window: int  # which window it came from


def decode(
    windows: list[Window],
    start_logits: list[torch.Tensor],
    end_logits: list[torch.Tensor],
    context: str,
    max_len: int = 30,
) -> Answer:
    """The best span over all windows; logits may be longer than a window (padding), the extra is ignored."""
    if not len(windows) == len(start_logits) == len(end_logits) > 0:
        raise ValueError(f"{len(windows)} windows, {len(start_logits)} start and {len(end_logits)} end logits")
    best = None
    for w, (win, sl, el) in enumerate(zip(windows, start_logits, end_logits)):
        T = len(win.input_ids)
        valid = torch.tensor([o is not None for o in win.offsets], device=sl.device)  # (T,)
        score, s, e = best_span(sl[:T].float(), el[:T].float(), valid, max_len)
        if best is None or score > best.score:
            a, b = win.offsets[s][0], win.offsets[e][1]
            best = Answer(context[a:b], score, a, b, w)
    return best


def span_distributions(window: Window, start: torch.Tensor, end: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P(start) and P(end), each a softmax over the window's passage positions (fp32 under any autocast): (T,)."""
    valid = torch.tensor([o is not None for o in window.offsets])  # (T,)
    ps = start.float().masked_fill(~valid, float("-inf")).softmax(-1)  # (T,)
    pe = end.float().masked_fill(~valid, float("-inf")).softmax(-1)  # (T,)
    return ps, pe


def span_probability(window: Window, start: torch.Tensor, end: torch.Tensor, a: Answer) -> float:
    """P(start) * P(end) of the chosen span `a`, within its window."""
    s = next(i for i, o in enumerate(window.offsets) if o is not None and o[0] == a.start)
    e = next(i for i, o in enumerate(window.offsets) if o is not None and o[1] == a.end and i >= s)
    ps, pe = span_distributions(window, start, end)
    return float(ps[s] * pe[e])
