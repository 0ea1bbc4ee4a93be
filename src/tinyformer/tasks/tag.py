"""Sequence labelling: a BIO tag for every word, on your own tagged file or on names in Tiny Shakespeare.

Data: `data.path` names a CoNLL-style file or a .jsonl file (`tinyformer.data.tagging`), split at random into
train / val / test by sentence; empty, or a play text, means the built-in task: character names mentioned in
speeches, with a share of the names held out so that the test split has a `seen` part (training names only, or
none) and an `unseen` part (held-out names only). A WordPiece tokenizer is learned from the training sentences,
or reused (`data.tokenizer`, or the masked-LM run or Hugging Face BERT of `model.init_from`, whose encoder then
starts the model).

Loss: cross-entropy at each word's first piece. Evaluation (val): loss, entity-level F1 with `seqeval`, token
accuracy. When the run finishes, the test split is scored once into test.json: entity precision / recall / F1,
token accuracy and a per-tag report, beside a gazetteer baseline (every word tagged as an entity in training,
looked up), for the seen and unseen parts separately on the built-in task.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tinyformer.config import RunConfig
from tinyformer.data.subword import SubwordTokenizer, pad_batch
from tinyformer.data.tagging import (
    TaggedSentences,
    align,
    looks_tagged,
    name_mentions,
    read_tagged,
    split_indices,
    split_words,
)
from tinyformer.data.tinyshakespeare import read_text, resolve_path
from tinyformer.data.tokenizers import IGNORE
from tinyformer.device import inference, model_device
from tinyformer.errors import UserError
from tinyformer.files import write_text
from tinyformer.models.token_heads import EncoderHeadConfig, TokenTagger
from tinyformer.tasks.base import panel
from tinyformer.tasks.cards import CARDS
from tinyformer.tasks.encoder import EncoderTask, check_splits, pretrained_config

TEST_JSON = "test.json"


@dataclass
class TagDataConfig:
    path: str = ""  # CoNLL-style file (any suffix) or .jsonl (tokens, tags); "" or a play .txt = names in the play
    val_fraction: float = 0.1  # share of sentences held out for validation
    test_fraction: float = 0.1  # share held out for the final test (built-in task: of the seen-names passages)
    unseen_fraction: float = 0.2  # built-in task: share of the names held out (only in the unseen test part)
    split_seed: int = 0  # seeds the split and the held-out names
    seq_len: int = 128  # pieces per row, [CLS] and [SEP] included; a longer sentence is cut between words
    vocab_size: int = 2000  # WordPiece vocabulary learned from the training sentences
    tokenizer: str = ""  # reuse this tokenizer.json (or run folder) instead of learning one

    def __post_init__(self) -> None:
        if self.seq_len < 3 or self.vocab_size < 100:
            raise UserError(f"data.seq_len={self.seq_len} must be >= 3 and data.vocab_size={self.vocab_size} >= 100")
        fractions = (self.val_fraction, self.test_fraction, self.unseen_fraction)
        if min(fractions) <= 0 or self.val_fraction + self.test_fraction >= 1 or self.unseen_fraction >= 1:
            raise UserError(
                f"data.val_fraction={self.val_fraction}, data.test_fraction={self.test_fraction} and "
                f"data.unseen_fraction={self.unseen_fraction} must be > 0, the first two with a sum < 1"
            )


def builtin(path: str) -> bool:
    """The built-in names task: no data.path, or a play (a .txt file that does not read as CoNLL)."""
    return not path or (Path(path).suffix.lower() in ("", ".txt") and not looks_tagged(path))


class TagTask(EncoderTask):
    card = CARDS["tag"]
    head = "tagging head"
    model_config = EncoderHeadConfig
    data_config = TagDataConfig

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: SubwordTokenizer | None = None) -> TagTask:
        """Read and split the sentences, learn or reuse the tokenizer, fix vocab_size and the tag set to them."""
        config, tokenizer = pretrained_config(config, tokenizer)
        d = config.data
        if builtin(d.path):
            m = name_mentions(read_text(resolve_path(d.path or None)), d.unseen_fraction, d.split_seed)
            data, split = m.sentences, split_indices(m.seen, d.val_fraction, d.test_fraction, d.split_seed)
            split["unseen"], unseen_names = m.unseen, m.unseen_names
        else:
            data, unseen_names = read_tagged(d.path), []
            split = split_indices(list(range(len(data))), d.val_fraction, d.test_fraction, d.split_seed)
        if len(data.labels) < 2:
            raise UserError(f"{d.path}: every tag is O; a tagger needs entities tagged B-<type> (and I-<type>)")
        advice = "give more sentences or change data.val_fraction / data.test_fraction"
        check_splits(split, len(data), "sentences", advice)
        splits = {name: data.subset(idx) for name, idx in split.items()}
        task = cls.fitted(config, tokenizer, [" ".join(w) for w in splits["train"].words], labels=data.labels)
        task.splits, task.unseen_names = splits, unseen_names
        task.rows = {name: task.encode(s) for name, s in splits.items()}
        return task

    def build_model(self) -> TokenTagger:
        return TokenTagger(self.config.model)

    # ---- data --------------------------------------------------------------------------------
    def encode(self, s: TaggedSentences) -> list[tuple[list[int], list[int], int]]:
        """Every sentence as rows of (piece ids, labels: the tag id at each word's first piece, sentence index)."""
        index = {t: i for i, t in enumerate(self.config.model.labels)}
        rows = []
        for i, (words, tags) in enumerate(zip(s.words, s.tags)):
            for r in align(self.tokenizer, words, self.config.data.seq_len):
                rows.append((r.ids, r.labels([index[t] for t in tags]), i))
        return rows

    def batch(self, rows: list[tuple[list[int], list[int], int]]) -> tuple[torch.Tensor, ...]:
        ids, mask = pad_batch([r[0] for r in rows], self.tokenizer.pad_id)  # (B, T) each
        labels, _ = pad_batch([r[1] for r in rows], IGNORE)  # (B, T)
        return ids, mask, labels

    def train_batch(self, batch_size: int, generator: torch.Generator):
        rows = self.rows["train"]
        return self.batch([rows[i] for i in torch.randint(len(rows), (batch_size,), generator=generator).tolist()])

    def training_step(self, model: nn.Module, batch) -> tuple[torch.Tensor, dict[str, float]]:
        ids, mask, labels = batch
        out = model(ids, mask, labels)
        chosen = labels != IGNORE
        return out.loss, {"acc": float((out.logits.argmax(-1)[chosen] == labels[chosen]).float().mean())}

    def batch_tokens(self, batch) -> int:
        return int(batch[1].sum())

    # ---- predictions and scores --------------------------------------------------------------
    def tag_rows(self, model: nn.Module, rows, chunk: int = 64) -> tuple[list[list[str]], float]:
        """(the predicted tag of every labelled position, row by row; mean loss over them)."""
        device, labels = model_device(model), self.config.model.labels
        tags, loss_sum, n = [], 0.0, 0
        with inference(model):
            for i in range(0, len(rows), chunk):
                ids, mask, gold = self.batch(rows[i : i + chunk])
                out = model(ids.to(device), mask.to(device), gold.to(device))
                chosen = gold != IGNORE  # (b, T)
                loss_sum, n = loss_sum + float(out.loss) * int(chosen.sum()), n + int(chosen.sum())
                pred = out.logits.argmax(-1).cpu()  # (b, T)
                tags += [[labels[int(t)] for t in pred[j][chosen[j]]] for j in range(len(pred))]
        return tags, loss_sum / max(n, 1)

    def predict_split(self, model: nn.Module, split: str) -> tuple[list[list[str]], float]:
        """One predicted tag per word for every sentence of `split` (rows of one sentence joined), and the loss."""
        s, rows = self.splits[split], self.rows[split]
        row_tags, loss = self.tag_rows(model, rows)
        out: list[list[str]] = [[] for _ in range(len(s))]
        for (_, _, i), tags in zip(rows, row_tags):
            out[i] += tags
        return out, loss

    def evaluate(self, model: nn.Module) -> dict:
        """Loss, entity F1 and token accuracy on val: what the Trainer logs and selects by (the precision, recall
        and per-type report of `scores`, which take seqeval six more passes, are for the test split)."""
        from seqeval.metrics import f1_score

        gold, (pred, loss) = self.splits["val"].tags, self.predict_split(model, "val")
        f1 = float(f1_score(gold, pred, zero_division=0))
        return {"loss": loss, "f1": f1, "token_acc": token_accuracy(gold, pred), "error": 1.0 - f1}

    def gazetteer(self, s: TaggedSentences) -> list[list[str]]:
        """The baseline: each word tagged as an entity anywhere in training gets that entity type, B- or I- as its
        left neighbour says; every other word O."""
        known = {}
        for words, tags in zip(self.splits["train"].words, self.splits["train"].tags):
            known |= {w: t[2:] for w, t in zip(words, tags) if t != "O"}
        out = []
        for words in s.words:
            types = [known.get(w) for w in words]
            prev = [None, *types[:-1]]
            out.append(["O" if t is None else ("I-" if p == t else "B-") + t for t, p in zip(types, prev)])
        return out

    def test_scores(self, model: nn.Module) -> dict:
        parts = [p for p in ("test", "unseen") if p in self.splits]
        out = {"unseen_names": self.unseen_names}
        for part in parts:
            s = self.splits[part]
            pred, loss = self.predict_split(model, part)
            out[part] = scores(s.tags, pred) | {
                "loss": loss,
                "n": len(s),
                "gazetteer": scores(s.tags, self.gazetteer(s)),
            }
            out[part]["examples"] = [
                {"words": w, "gold": g, "pred": p} for w, g, p in list(zip(s.words, s.tags, pred))[:200]
            ]
        return out

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        r = self.test_scores(model)
        write_text(run_dir / TEST_JSON, json.dumps(r, indent=1) + "\n")
        print(test_line(r) + f"; see {run_dir / TEST_JSON}")

    def held_out(self, model: nn.Module) -> str:
        """`tinyformer eval`: the test line, then the per-type report of each test part."""
        r = type(self).prepare(self.config, self.tokenizer).test_scores(model)
        return "\n".join([test_line(r), *(per_type_lines(part, r[part]) for part in ("test", "unseen") if part in r)])

    def tag_words(self, model: nn.Module, sentences: list[list[str]]) -> list[list[str]]:
        """One tag per word of each sentence (tinyformer's own splitting, or the words as given)."""
        rows = []
        for i, words in enumerate(sentences):
            rows += [
                (r.ids, r.labels([0] * len(words)), i) for r in align(self.tokenizer, words, self.config.data.seq_len)
            ]
        out: list[list[str]] = [[] for _ in sentences]
        for (_, _, i), tags in zip(rows, self.tag_rows(model, rows)[0]):
            out[i] += tags
        return out

    def tagged(self, model: nn.Module, text: str) -> tuple[list[str], list[str]]:
        """The text's words and one tag for each."""
        words = split_words(text)
        if not words:
            raise UserError("the text has no words; give the text to tag")
        return words, self.tag_words(model, [words])[0]

    def predict(self, model: nn.Module, text: str) -> str:
        """`tinyformer tag`: each word on its line with its tag."""
        words, tags = self.tagged(model, text)
        width = max(len(w) for w in words)
        return "\n".join(f"{w:<{width}}  {t}" for w, t in zip(words, tags))

    def play(self, model: nn.Module, text: str) -> list[dict]:
        words, tags = self.tagged(model, text)
        return [panel("tags", "a tag for each word", words=words, tags=tags)]


def scores(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Entity-level precision / recall / F1 (seqeval, CoNLL evaluation), token accuracy and a per-type report."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    return {
        "precision": float(precision_score(gold, pred, zero_division=0)),
        "recall": float(recall_score(gold, pred, zero_division=0)),
        "f1": float(f1_score(gold, pred, zero_division=0)),
        "token_acc": token_accuracy(gold, pred),
        "per_type": {k: {m: finite(v) for m, v in d.items()} for k, d in report.items()},
    }


def token_accuracy(gold: list[list[str]], pred: list[list[str]]) -> float:
    pairs = [(g, p) for gs, ps in zip(gold, pred) for g, p in zip(gs, ps)]
    return sum(g == p for g, p in pairs) / max(len(pairs), 1)


def finite(v: float) -> float | None:
    """seqeval's averages over no entity are NaN, which JSON cannot hold: None (null) instead."""
    return float(v) if math.isfinite(v) else None


def per_type_lines(part: str, x: dict) -> str:
    """seqeval's per-type report of one test part as a small table (precision, recall, F1, entities)."""
    rows = [f"{part}: {'type':<14} {'precision':>9} {'recall':>9} {'f1':>9} {'entities':>9}"]
    for name, m in x["per_type"].items():
        cells = [("-" if m.get(k) is None else f"{m[k]:.4f}") for k in ("precision", "recall", "f1-score")]
        rows.append(f"{part}: {name:<14} {cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {int(m.get('support') or 0):>9}")
    return "\n".join(rows)


def test_line(r: dict) -> str:
    parts = []
    for part, what in (("test", "test (seen names)" if "unseen" in r else "test"), ("unseen", "unseen names")):
        if part in r:
            x = r[part]
            parts.append(
                f"{what}: entity F1 {x['f1']:.4f} (P {x['precision']:.4f}, R {x['recall']:.4f}), token accuracy "
                f"{x['token_acc']:.4f} on {x['n']} sentences (gazetteer F1 {x['gazetteer']['f1']:.4f})"
            )
    return "; ".join(parts)
