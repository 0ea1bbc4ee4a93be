"""Extractive question answering (SQuAD, Rajpurkar et al., 2016): the answer is a span of the context.

As in BERT (Devlin et al., 2019) a model gives each token a start and an end logit; this module holds
all around it. `read_squad` reads SQuAD v1.1 .json or flat .jsonl records (answers as a list of
{"text", "answer_start"} or in Hugging Face `datasets` form). `who_says` is the offline task from Tiny
Shakespeare ("Who says '<line>'?", answered by a speaker header), with its question-blind
`nearest_header_baseline`. `normalize_answer`, `exact_match` and `token_f1` are SQuAD v1.1's metrics.
`make_windows` cuts a long passage into overlapping windows `stride` tokens apart, as BERT's run_squad
does, and `decode` picks the best span over all of them.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from tinyformer.data.classification import _speeches
from tinyformer.errors import UserError
from tinyformer.files import input_file


@dataclass
class QAExample:
    id: str  # the record's id ("record 3" / the file's id / "window 12 line 1")
    question: str  # the question text
    context: str  # the passage that holds the answer
    answers: list[tuple[str, int]]  # (answer text, character offset in context); answers[0] is the training target
    where: int = 0  # position in its source (record number, or window index in the play) for splitting


# ---------------------------------------------------------------------------- SQuAD files


def read_squad(path: str | Path) -> list[QAExample]:
    """Every question of a SQuAD v1.1 .json or a .jsonl of flat records, checked; one UserError per bad record."""
    p = input_file(path, "SQuAD file")
    if p.suffix.lower() not in (".json", ".jsonl", ".ndjson"):
        raise UserError(f"{p}: unknown QA format {p.suffix or '(no suffix)'!r}; use .json (SQuAD v1.1) or .jsonl")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{p} is not UTF-8 text (bad byte at offset {e.start}); save it as UTF-8") from None
    records = _nested_records(p, text) if p.suffix.lower() == ".json" else _flat_records(p, text)
    examples = [_example(p, where, label, qa, context) for where, label, qa, context in records]
    if not examples:
        raise UserError(f"{p} holds no questions; it needs at least one question with an answer")
    return examples


def _nested_records(p: Path, text: str) -> list[tuple[int, str, dict, object]]:
    """(record number, its name for errors, the question's dict, its paragraph's context) in SQuAD's layout."""
    data = _json(p, text, "the file")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f'{p} is not in SQuAD layout: expected {{"data": [{{"paragraphs": [...]}}, ...]}} at the top')
    out = []
    for a, article in enumerate(data["data"], start=1):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise UserError(f'{p} article {a}: expected an object with a "paragraphs" list')
        for g, para in enumerate(article["paragraphs"], start=1):
            if not isinstance(para, dict) or not isinstance(para.get("qas"), list):
                raise UserError(f'{p} article {a} paragraph {g}: expected an object with "context" and a "qas" list')
            for qa in para["qas"]:
                out.append((len(out) + 1, f"record {len(out) + 1}", qa, para.get("context")))
    return out


def _flat_records(p: Path, text: str) -> list[tuple[int, str, dict, object]]:
    """(line number, "line N", the record, its context) for each non-blank line of a JSON Lines file."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            record = _json(p, line, f"line {n}")
            out.append((n, f"line {n}", record, record.get("context") if isinstance(record, dict) else None))
    return out


def _json(p: Path, text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{p} {what} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None


def _example(p: Path, where: int, label: str, qa: object, context: object) -> QAExample:
    """One checked question: its context and question are non-empty text and every answer sits where it says."""
    if not isinstance(qa, dict):
        raise UserError(f"{p} {label}: a question must be a JSON object, not a {type(qa).__name__}")
    qid = str(qa["id"]) if qa.get("id") is not None else label
    name = f"{p} {label}" + (f" (id {qid!r})" if qid != label else "")
    question = qa.get("question")
    if not isinstance(context, str) or not context.strip():
        raise UserError(f"{name}: empty or missing context; every question needs a passage to answer from")
    if not isinstance(question, str) or not question.strip():
        raise UserError(f"{name}: empty or missing question")
    if qa.get("is_impossible"):
        raise UserError(f"{name} is unanswerable (is_impossible); SQuAD 2.0 unanswerable questions are not supported")
    answers = [_answer(name, context, text, start) for text, start in _answer_pairs(name, qa.get("answers"))]
    if not answers:
        raise UserError(f"{name} has no answers; every question needs at least one (SQuAD 2.0 is not supported)")
    return QAExample(qid, question.strip(), context, answers, where)


def _answer_pairs(name: str, answers: object) -> list[tuple[object, object]]:
    """(text, answer_start) pairs from a list of objects or from {"text": [...], "answer_start": [...]}."""
    if answers is None:
        return []
    if isinstance(answers, dict) and isinstance(answers.get("text"), list):
        starts = answers.get("answer_start")
        if not isinstance(starts, list) or len(starts) != len(answers["text"]):
            raise UserError(f'{name}: "answers" needs as many "answer_start" values as "text" values')
        return list(zip(answers["text"], starts))
    if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
        raise UserError(f'{name}: "answers" must be a list of {{"text", "answer_start"}} objects')
    return [(a.get("text"), a.get("answer_start")) for a in answers]


def _answer(name: str, context: str, text: object, start: object) -> tuple[str, int]:
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{name}: an answer has empty, blank or missing text")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise UserError(f"{name}: answer {text!r} has answer_start={start!r}; it must be a character offset >= 0")
    found = context[start : start + len(text)]
    if found != text:
        raise UserError(f"{name}: answer {text!r} does not match the context at {start}, which reads {found!r}")
    return text, start


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


# ---------------------------------------------------------------------------- SQuAD v1.1 metrics


def normalize_answer(s: str) -> str:
    """Lower case, punctuation removed, the articles a/an/the removed as words, whitespace collapsed."""
    s = "".join(ch for ch in s.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def exact_match(prediction: str, golds: list[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer, else 0.0."""
    if not golds:
        raise ValueError("exact_match needs at least one gold answer")
    return max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)


def token_f1(prediction: str, golds: list[str]) -> float:
    """The best bag-of-tokens F1 between the normalised prediction and any normalised gold answer."""
    if not golds:
        raise ValueError("token_f1 needs at least one gold answer")
    return max(_f1(normalize_answer(prediction).split(), normalize_answer(g).split()) for g in golds)


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)  # both empty: 1.0; one empty: 0.0
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


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
) -> list[Window]:
    """Overlapping windows of the context, `stride` tokens apart, each with the question in front.

    `answer` is (first character, end character exclusive) in the context; it becomes token positions.
    """
    keep = min(max_question, seq_len - 3 - stride)  # a long question never leaves fewer than stride slots
    if keep < 1:
        raise UserError(f"seq_len={seq_len} with stride={stride} leaves no room for the question; raise seq_len")
    q_ids = tokenizer.hf.encode(question, add_special_tokens=False).ids[:keep]
    enc = tokenizer.hf.encode(context, add_special_tokens=False)
    c_ids, c_off = enc.ids, [tuple(o) for o in enc.offsets]
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
