"""SQuAD v1.1 (Rajpurkar et al., 2016): its files and its metrics.

`read_squad` reads SQuAD v1.1 .json or flat .jsonl records (answers as a list of {"text", "answer_start"} or in
Hugging Face `datasets` form) into `QAExample`s, checking every record (one UserError per bad one).
`normalize_answer`, `exact_match` and `token_f1` are SQuAD v1.1's metrics.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from pathlib import Path

from tinyformer.data.qa import QAExample
from tinyformer.errors import UserError
from tinyformer.files import input_file

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
