"""Seq2seq on the user's own pairs: a table of (source, target) texts, learned by the encoder-decoder.

`tinyformer train seq2seq --data pairs.tsv --source-col src --target-col tgt` reads the table
(`tinyformer.data.pairs`), holds out a seeded `data.val_fraction` of the pairs, fits one vocabulary for
source and target (characters or byte-level BPE, with PAD 0, BOS 1, EOS 2 as in digit reversal) and
trains `Seq2SeqTransformer` exactly as the reversal task does: the same teacher-forced batches (trimmed
to their longest pair), loss, token accuracy, exact match and greedy / beam decoding, inherited from
`ReverseTask`. What differs is the data, the vocabulary and the text in and out.

When the run finishes, exact match is scored on the training pairs and on the held-out ones (scores.json).
`tinyformer translate RUN "text" [--beam K]` answers one input, `tinyformer eval RUN` scores the held-out
pairs, `tinyformer viz attention RUN --text ...` draws encoder, decoder and cross-attention.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tinyformer.config import RunConfig, TrainConfig, cosine
from tinyformer.data.pairs import (
    SPECIALS,
    PairsConfig,
    encode_pairs,
    encode_text,
    fit_tokenizer,
    load_tokenizer,
    read_pairs,
    split_indices,
)
from tinyformer.data.reversal import EOS
from tinyformer.errors import UserError
from tinyformer.files import write_text
from tinyformer.models.seq2seq import Seq2SeqConfig
from tinyformer.tasks.base import fit_model
from tinyformer.tasks.cards import CARDS
from tinyformer.tasks.reverse import ReverseTask, evaluate_split

SCORES_JSON = "scores.json"
TRAIN_SCORED = 2000  # at the end, the training split is scored on at most this many pairs (a random sample)
SHOWN_MISSES = 3  # `tinyformer eval` shows this many held-out pairs the model gets wrong


@dataclass
class PairsModelConfig(Seq2SeqConfig):
    vocab_size: int = 0  # 0 = the vocabulary's size (one vocabulary for source and target), fitted to the data

    def __post_init__(self) -> None:
        if self.vocab_size:
            super().__post_init__()
        else:  # not fitted yet: every other field is checked as the fitted config will be
            Seq2SeqConfig(**(dataclasses.asdict(self) | {"vocab_size": len(SPECIALS)}))


def recipe() -> TrainConfig:
    """Adam with betas 0.9/0.98, a short warmup then cosine decay; the whole val split scored every 200 steps."""
    return cosine(
        2000, 1e-3, 100, batch_size=64, beta2=0.98, weight_decay=0.0, eval_interval=200, eval_iters=1, log_interval=50
    )


class Seq2SeqTask(ReverseTask):
    card = CARDS["seq2seq"]

    @classmethod
    def default_config(cls) -> RunConfig:
        return RunConfig(task=cls.name, model=PairsModelConfig(), data=PairsConfig(), train=recipe())

    @classmethod
    def load_tokenizer(cls, path: Path):
        return load_tokenizer(path)

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer=None) -> Seq2SeqTask:
        """Read the pairs, split them, fit (or reuse) the vocabulary, encode every pair (checking its length)."""
        d = config.data
        if not d.path:
            raise UserError("train seq2seq needs a table of pairs: --data PAIRS.tsv (.csv, .tsv or .jsonl)")
        pairs = read_pairs(d.path, d.source_col, d.target_col)
        train, val = split_indices(len(pairs), d.val_fraction, d.split_seed)
        if tokenizer is None:  # characters: from every pair (no unknown token); BPE merges: training pairs only
            fit_on = range(len(pairs)) if d.tokenizer == "char" else train
            texts = [text for i in fit_on for text in (pairs.sources[i], pairs.targets[i])]
            tokenizer = fit_tokenizer(d.tokenizer, texts, d.vocab_size)
        task = cls(fit_model(config, vocab_size=tokenizer.vocab_size), tokenizer)
        src, tgt = encode_pairs(tokenizer, pairs, config.model.block_size)  # (N, S), (N, T); in file order
        task.pairs, task.index = pairs, {"train": train, "val": val}  # split -> positions in task.pairs
        task.train = src[train], tgt[train]
        task.val = src[val], tgt[val]
        return task

    # ---- after training ------------------------------------------------------------------------
    def score(self, model: nn.Module, split: str, beam: int = 1, limit: int | None = None) -> dict:
        """Exact match, token accuracy and loss on (the first `limit` pairs of) `split`; `missed`: the positions in
        `self.pairs` of the pairs not matched."""
        src, tgt = getattr(self, split)
        n = len(src) if limit is None else min(limit, len(src))
        r = evaluate_split(model, src[:n], tgt[:n], beam=beam)
        missed = [self.index[split][i] for i in (~r["correct"]).nonzero().flatten().tolist()]
        scores = {k: r[k] for k in ("exact_match", "token_acc", "loss")}
        return scores | {"pairs": n, "of": len(src), "missed": missed}

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        """scores.json: exact match on the training pairs (up to TRAIN_SCORED) and the held-out ones; a line printed."""
        scores = {"train": self.score(model, "train", limit=TRAIN_SCORED), "val": self.score(model, "val")}
        saved = {split: {k: v for k, v in r.items() if k != "missed"} for split, r in scores.items()}
        write_text(run_dir / SCORES_JSON, json.dumps(saved, indent=1) + "\n")
        shown = ", ".join(f"{split} {r['exact_match']:.4f} ({_count(r)})" for split, r in scores.items())
        print(f"exact match (greedy): {shown}; see {run_dir / SCORES_JSON}")

    def held_out(self, model: nn.Module, beam: int = 1) -> str:
        """Exact match, token accuracy and loss on the held-out pairs, and a few pairs the model gets wrong."""
        if beam <= 0:
            raise UserError(f"--beam {beam} must be > 0")
        task = type(self).prepare(self.config, self.tokenizer)
        r = task.score(model, "val", beam=beam)
        how = "greedy" if beam == 1 else f"beam {beam}"
        lines = [
            f"{r['pairs']} held-out pairs, {how}: exact match {r['exact_match']:.4f}, "
            f"token accuracy {r['token_acc']:.4f}, loss {r['loss']:.4f}"
        ]
        return "\n".join(lines + [task.miss_line(model, i, beam) for i in r["missed"][:SHOWN_MISSES]])

    def miss_line(self, model: nn.Module, i: int, beam: int) -> str:
        """Pair `i`, which the model gets wrong: its row in the table, the source, the model's output, the target."""
        source, target = self.pairs.sources[i], self.pairs.targets[i]
        return f"  row {self.pairs.rows[i]}: {source!r} -> {self.predict(model, source, beam)!r} (expected {target!r})"

    def source_ids(self, text: str) -> torch.Tensor:
        """The input text (stripped, as the table's cells are) as source ids (1, S), EOS last."""
        text = text.strip()
        if not text:
            raise UserError("the input is empty; give the text to translate")
        ids = encode_text(self.tokenizer, text)
        most = self.config.model.block_size - 1
        if len(ids) > most:
            raise UserError(f"the input is {len(ids)} tokens; this model takes at most {most} (+ EOS)")
        return torch.tensor([ids + [EOS]])  # (1, S)

    def output_text(self, ids: torch.Tensor) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)  # EOS and the padding after it dropped

    def alignment(self, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        """No expected alignment for arbitrary pairs: `viz cross-attention` draws the weights without a score."""
        return None


def _count(r: dict) -> str:
    return f"{r['pairs']} pairs" if r["pairs"] == r["of"] else f"{r['pairs']} of {r['of']} pairs"
