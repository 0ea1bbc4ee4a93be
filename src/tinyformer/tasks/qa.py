"""Extractive question answering: the answer is a span of the passage, found by start and end logits.

Data: `data.path` names a SQuAD-style .json or a .jsonl file (`tinyformer.data.qa.read_squad`); empty, or a play
text, means the built-in task: "Who says '<a line>'?" over a window of consecutive speeches of Tiny Shakespeare,
answered by the header of the speech holding the line. Questions on one passage stay in one split (train / val /
test, seeded). Each question and its passage are packed as [CLS] question [SEP] passage [SEP] with segment ids 0
and 1; a passage longer than `data.seq_len` is cut into windows `data.stride` tokens apart, each one training row
(a window without the whole answer points at [CLS]). The tokenizer is learned from the training questions and
passages, or reused (`data.tokenizer`, or the masked-LM run or Hugging Face BERT of `model.init_from`).

Evaluation (val): the loss over windows, and SQuAD's exact match and token F1 of the best valid span across each
question's windows. When the run finishes, the test split is scored once into test.json (with the built-in task's
question-blind baseline: the header nearest before the passage midpoint), and span.png draws the start and end
probabilities along one test passage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tinyformer.config import RunConfig
from tinyformer.data.qa import (
    QAExample,
    Window,
    decode,
    first_per_passage,
    make_windows,
    nearest_header_baseline,
    span_distributions,
    span_probability,
    split_by_passage,
    who_says,
)
from tinyformer.data.squad import exact_match, read_squad, token_f1
from tinyformer.data.subword import SubwordTokenizer, pad_batch
from tinyformer.data.tinyshakespeare import read_text, resolve_path
from tinyformer.device import inference, model_device
from tinyformer.errors import UserError
from tinyformer.files import write_text
from tinyformer.models.token_heads import EncoderHeadConfig, SpanExtractor
from tinyformer.tasks.base import panel
from tinyformer.tasks.cards import CARDS
from tinyformer.tasks.encoder import EncoderTask, pretrained_config

TEST_JSON, SPAN_PNG = "test.json", "span.png"
EVAL_QUESTIONS = 2  # built-in task: questions per val / test passage (training passages have data.questions)


def builtin(path: str) -> bool:
    """The built-in "Who says ...?" task: no data.path, or a play text (SQuAD data is .json or .jsonl)."""
    return Path(path).suffix.lower() in ("", ".txt")


SMALL = ("stride", "max_question", "max_answer", "speeches", "questions")  # data fields that must be >= 1


@dataclass
class QADataConfig:
    path: str = ""  # SQuAD-style .json or .jsonl; "" (or a play .txt) = "Who says ...?" on Tiny Shakespeare
    val_fraction: float = 0.1  # share of passages held out for validation
    test_fraction: float = 0.1  # share of passages held out for the final test
    split_seed: int = 0  # seeds the split (and the built-in task's choice of lines)
    seq_len: int = 128  # pieces per window: [CLS] question [SEP] passage piece [SEP]
    stride: int = 64  # pieces between the starts of consecutive windows of a long passage
    max_question: int = 48  # question pieces kept
    max_answer: int = 30  # longest answer span, in pieces
    speeches: int = 4  # built-in task: consecutive speeches per passage
    questions: int = 8  # built-in task: questions per training passage, each on another line (val, test: 2)
    vocab_size: int = 2000  # WordPiece vocabulary learned from the training questions and passages
    tokenizer: str = ""  # reuse this tokenizer.json (or run folder) instead of learning one

    def __post_init__(self) -> None:
        for name, low in (("seq_len", 8), ("vocab_size", 100), *((k, 1) for k in SMALL)):
            if getattr(self, name) < low:
                raise UserError(f"data.{name}={getattr(self, name)} must be >= {low}")
        if min(self.val_fraction, self.test_fraction) <= 0 or self.val_fraction + self.test_fraction >= 1:
            raise UserError(
                f"data.val_fraction={self.val_fraction} and data.test_fraction={self.test_fraction} "
                "must both be > 0 with a sum < 1"
            )


# the budget `experiment qa` measures (the guide): a longer and faster schedule than classify's, which a
# 4-layer encoder needs before it does better than the question-blind baseline. 800 steps: run to 1,200 (the
# build of 2026-12-04), each small cell's held-out exact match at step 800 was within 0.023 of its value at 1,200.
QA_RECIPE = dict(max_iters=800, lr=1e-3, min_lr=1e-4, warmup_iters=100, eval_interval=200)


class QATask(EncoderTask):
    card = CARDS["qa"]
    head = "span head"
    model_config = EncoderHeadConfig
    data_config = QADataConfig
    train_changes = QA_RECIPE

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: SubwordTokenizer | None = None) -> QATask:
        config, tokenizer = pretrained_config(config, tokenizer)
        d = config.data
        if builtin(d.path):
            examples = who_says(
                read_text(resolve_path(d.path or None)), d.speeches, per_window=d.questions, seed=d.split_seed
            )
        else:
            examples = read_squad(d.path)
        if config.model.type_vocab_size < 2:
            raise UserError(
                f"model.type_vocab_size={config.model.type_vocab_size}: QA needs 2 segments (question, passage)"
            )
        splits = split_by_passage(examples, d.val_fraction, d.test_fraction, d.split_seed)
        if builtin(d.path):  # scoring asks fewer questions per passage: the same passages, a quarter of the time
            splits |= {s: first_per_passage(splits[s], EVAL_QUESTIONS) for s in ("val", "test")}
        texts = [t for e in splits["train"] for t in (e.question, e.context)]
        task = cls.fitted(config, tokenizer, list(dict.fromkeys(texts)))
        task.splits = splits
        seen: dict = {}  # each passage encoded once, however many questions it has
        task.windows = {s: [task.windows_of(e, where=d.path, encoded=seen) for e in ex] for s, ex in splits.items()}
        task.train_rows = [w for ws in task.windows["train"] for w in ws]
        return task

    def build_model(self) -> SpanExtractor:
        return SpanExtractor(self.config.model)

    # ---- data --------------------------------------------------------------------------------
    def windows_of(
        self, e: QAExample, answer: bool = True, where: str = "", encoded: dict | None = None
    ) -> list[Window]:
        """The model inputs of one question; `where` (its file) names the record in an error; `encoded`: the
        passages encoded so far (`make_windows`)."""
        d = self.config.data
        span = (e.answers[0][1], e.answers[0][1] + len(e.answers[0][0])) if answer else None
        try:
            return make_windows(
                self.tokenizer, e.question, e.context, d.seq_len, d.stride, span, d.max_question, encoded
            )
        except UserError as err:
            raise UserError(f"{where} {e.id}: {err}" if where else str(err)) from None

    def batch(self, windows: list) -> tuple[torch.Tensor, ...]:
        ids, mask = pad_batch([w.input_ids for w in windows], self.tokenizer.pad_id)  # (B, T) each
        segments, _ = pad_batch([w.token_type_ids for w in windows], 0)  # (B, T)
        start = torch.tensor([w.start for w in windows])  # (B,)
        end = torch.tensor([w.end for w in windows])  # (B,)
        return ids, mask, segments, start, end

    def train_batch(self, batch_size: int, generator: torch.Generator):
        idx = torch.randint(len(self.train_rows), (batch_size,), generator=generator).tolist()
        return self.batch([self.train_rows[i] for i in idx])

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        out = model(*batch)
        hit = (out.start_logits.argmax(-1) == batch[3]) & (out.end_logits.argmax(-1) == batch[4])
        return out.loss, {"span_acc": float(hit.float().mean())}

    def batch_tokens(self, batch) -> int:
        return int(batch[1].sum())

    # ---- answers and scores ------------------------------------------------------------------
    def logits(self, model: nn.Module, windows: list, chunk: int = 64):
        """(start logits per window, end logits per window, each (T_w,) without padding; summed loss, count)."""
        device, starts, ends, loss = model_device(model), [], [], 0.0
        with inference(model):
            for i in range(0, len(windows), chunk):
                part = windows[i : i + chunk]
                out = model(*(t.to(device) for t in self.batch(part)))
                loss += float(out.loss) * len(part)
                for j, w in enumerate(part):
                    starts.append(out.start_logits[j, : len(w.input_ids)].float().cpu())
                    ends.append(out.end_logits[j, : len(w.input_ids)].float().cpu())
        return starts, ends, loss

    def score(self, model: nn.Module, split: str) -> dict:
        examples, windows = self.splits[split], self.windows[split]
        flat = [w for ws in windows for w in ws]
        starts, ends, loss = self.logits(model, flat)
        em = f1 = 0.0
        preds, k = [], 0
        for e, ws in zip(examples, windows):
            a = decode(ws, starts[k : k + len(ws)], ends[k : k + len(ws)], e.context, self.config.data.max_answer)
            k += len(ws)
            golds = [t for t, _ in e.answers]
            em, f1 = em + exact_match(a.text, golds), f1 + token_f1(a.text, golds)
            preds.append(a.text)
        n = max(len(examples), 1)
        return {"loss": loss / max(len(flat), 1), "em": em / n, "f1": f1 / n, "predictions": preds}

    def evaluate(self, model: nn.Module) -> dict:
        r = self.score(model, "val")
        return {"loss": r["loss"], "em": r["em"], "f1": r["f1"], "error": 1.0 - r["f1"]}

    def baseline(self, split: str) -> dict | None:
        """The built-in task's question-blind baseline on `split`: exact match and F1 of the nearest header."""
        if not builtin(self.config.data.path):
            return None
        examples = self.splits[split]
        guesses = [nearest_header_baseline(e) for e in examples]
        golds = [[t for t, _ in e.answers] for e in examples]
        n = max(len(examples), 1)
        return {
            "em": sum(exact_match(p, g) for p, g in zip(guesses, golds)) / n,
            "f1": sum(token_f1(p, g) for p, g in zip(guesses, golds)) / n,
        }

    def test_scores(self, model: nn.Module) -> dict:
        r = self.score(model, "test")
        shown = [
            {"question": e.question, "gold": e.answers[0][0], "pred": p}
            for e, p in zip(self.splits["test"], r.pop("predictions"))
        ]
        return r | {"n": len(self.splits["test"]), "baseline": self.baseline("test"), "examples": shown[:100]}

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        r = self.test_scores(model)
        write_text(run_dir / TEST_JSON, json.dumps(r, indent=1) + "\n")
        e = self.splits["test"][0]
        plot_span(self, model, e, run_dir / SPAN_PNG)
        print(test_line(r) + f"; see {run_dir / TEST_JSON} and {run_dir / SPAN_PNG}")

    def held_out(self, model: nn.Module) -> str:
        return test_line(type(self).prepare(self.config, self.tokenizer).test_scores(model))

    def answer(self, model: nn.Module, question: str, context: str):
        """The best answer span in the passage text `context` and P(start) * P(end) of it."""
        if not question.strip():
            raise UserError("the question is empty; give a question about the passage")
        if not context.strip():
            raise UserError("the passage is empty; give the passage the answer is in")
        e = QAExample("input", question, context, [("", 0)])
        windows = self.windows_of(e, answer=False)
        starts, ends, _ = self.logits(model, windows)
        a = decode(windows, starts, ends, context, self.config.data.max_answer)
        return a, span_probability(windows[a.window], starts[a.window], ends[a.window], a)

    def predict(self, model: nn.Module, question: str, context: str | None = None) -> str:
        """`tinyformer qa`: the best answer span in the passage, its probability and where it lies."""
        a, p = self.answer(model, question, read_context(context))
        return f"{a.text}\n(probability {p:.4f}, score {a.score:.3f}; characters {a.start}-{a.end} of the passage)"

    def play(self, model: nn.Module, question: str, context: str = "") -> list[dict]:
        """The answer marked in the passage (`context` is the passage's text here, never a file)."""
        a, p = self.answer(model, question, context)
        note = f"P(start) x P(end) = {p:.4f}; characters {a.start}-{a.end}"
        return [panel("span", f"answer: {a.text}", note, text=context, start=a.start, end=a.end)]


def read_context(context: str | None) -> str:
    """--context: a file's text when it names a file, else the text itself."""
    if context is None:
        raise UserError("no passage: give --context FILE or --context 'the passage text'")
    if not context.strip():
        raise UserError("the passage is empty; give --context FILE or --context 'the passage text'")
    p = Path(context)
    try:
        kind = "dir" if p.is_dir() else "file" if p.is_file() else None
    except OSError:  # a passage longer than a file name may be (ENAMETOOLONG) is the text itself
        kind = None
    if kind == "dir":
        raise UserError(f"--context {context} is a folder; give a text file or the passage text")
    if kind is None and p.suffix in (".txt", ".md") and " " not in context:
        raise UserError(f"--context {context}: no such file")
    is_file = kind == "file"
    if is_file:
        try:
            context = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read --context {context!r}: {e}") from None
        if not context.strip():
            raise UserError(f"--context {p} is empty")
    return context


def plot_span(task: QATask, model: nn.Module, e: QAExample, png: Path) -> Path:
    """The start and end probabilities along the first window of one passage, with the gold answer marked."""
    from tinyformer.plots import plot_span_probabilities

    w = task.windows_of(e)[0]
    starts, ends, _ = task.logits(model, [w])
    tokens = task.tokenizer.hf.id_to_token
    ps, pe = span_distributions(w, starts[0], ends[0])
    labels = [tokens(i) for i in w.input_ids]
    title = f"{e.question}  (gold: {e.answers[0][0]})"
    return plot_span_probabilities(labels, ps.tolist(), pe.tolist(), (w.start, w.end), png, title)


def test_line(r: dict) -> str:
    base = r.get("baseline")
    extra = f" (baseline: exact match {base['em']:.4f}, F1 {base['f1']:.4f})" if base else ""
    return f"test: exact match {r['em']:.4f}, F1 {r['f1']:.4f} on {r['n']} questions{extra}"
