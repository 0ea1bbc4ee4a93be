"""The task contract: all that the trainer, run folders and the CLI know about a task.

A task ties one kind of data and tokenizer to one model family, a loss, an
evaluation and an inference command. Nothing outside `tinyformer.tasks` names a
task: the CLI reads the registry `TASKS`, the Trainer calls the training
methods, `load_run` calls `load_tokenizer` and `build_model`.

Two ways to make one:

- `Task(config, tokenizer)` reads no data. It is enough to build the model, load
  a run folder, predict and draw attention.
- `Task.prepare(config, tokenizer=None)` reads the data and fits the tokenizer
  (or reuses the one given, e.g. a resumed run's), and returns a task whose
  `config` is the fitted copy (vocabulary size, labels): the config passed in is
  never changed.

Required: `default_config`, `load_tokenizer`, `prepare`, `build_model`,
`train_batch`, `training_step`, `batch_tokens`, `evaluate`. Every other part has
a default, documented where it is defined below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from tinyformer.config import RunConfig
from tinyformer.errors import UserError
from tinyformer.models.protocols import Attentive
from tinyformer.tasks.cards import Arg, Card


class Task:
    # What the command line knows of the task (`tinyformer.tasks.cards.Card`): its name, verb, options, data.
    # A class that sets `card` takes each of these from it; one registered by hand may set them itself.
    card: ClassVar[Card | None] = None
    name: ClassVar[str]  # the name on the command line: `tinyformer train <name>`
    command: ClassVar[str | None] = None  # inference verb: `tinyformer <command> RUN ...` calls predict()
    command_help: ClassVar[str] = ""  # one line for `tinyformer --help`
    predict_args: ClassVar[tuple[Arg, ...]] = ()  # the options of that command
    eval_args: ClassVar[tuple[Arg, ...]] = ()  # the options `tinyformer eval` accepts for this task
    data_format: ClassVar[str] = ""  # what `train --data` names for this task ("": it makes its own data)
    data_args: ClassVar[tuple[Arg, ...]] = ()  # `train` options that set data.<name>, e.g. a table's columns
    select: ClassVar[str] = "loss"  # the evaluate() key (lower is better) that picks best.safetensors
    views: ClassVar[tuple[str, ...]] = ("predict", "attention")  # what `tinyformer serve` shows for a run (VIEWS)
    # The interfaces its model offers (`tinyformer.models.protocols`): CausalLM for "generate", Attentive for
    # "attention", EncoderDecoder for decoding. A test builds each registered task's model and checks them.
    protocols: ClassVar[tuple[type, ...]] = (Attentive,)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "card" in cls.__dict__ and cls.card is not None:
            for f in dataclasses.fields(cls.card):
                if f.name != "where":
                    setattr(cls, f.name, getattr(cls.card, f.name))

    def __init__(self, config: RunConfig, tokenizer: Any) -> None:
        self.config, self.tokenizer = config, tokenizer

    # ---- building: config, tokenizer, data, model ---------------------------------------------
    @classmethod
    def default_config(cls) -> RunConfig:
        """The full default config; its model and data sections give the config types."""
        raise NotImplementedError

    @classmethod
    def load_tokenizer(cls, path: Path) -> Any:
        raise NotImplementedError

    @classmethod
    def prepare(cls, config: RunConfig, tokenizer: Any = None) -> Task:
        """Read the data, fit or reuse the tokenizer -> a task with data and the fitted config."""
        raise NotImplementedError

    def build_model(self) -> nn.Module:
        """A freshly initialised model for `self.config.model` (which must be fitted)."""
        raise NotImplementedError

    def init_from(self) -> str:
        """What a new run starts from (`init_model`): a run folder, a Hugging Face model folder or hub id;
        "" = random init (default). `prepare` reads the source's config and tokenizer (the architecture and
        vocabulary come from it); `init_model` copies its weights. Default: the model section's `init_from`
        field, where it has one."""
        return getattr(self.config.model, "init_from", "")

    def init_model(self, model: nn.Module, source: Any) -> None:
        """Start `model` from `source`: the loaded `Run` when `init_from()` is a run folder, else the local
        Hugging Face folder (`tinyformer.runs.load_source`). Default: not supported."""
        raise UserError(f"a {self.name!r} run cannot start from another run")

    # ---- training (called by the Trainer) ------------------------------------------------------
    def train_batch(self, batch_size: int, generator: torch.Generator) -> Any:
        raise NotImplementedError

    def training_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """-> (loss to minimise, metrics to log as floats)."""
        raise NotImplementedError

    def batch_tokens(self, batch: Any) -> int:
        """Tokens in `batch` that count for throughput (tokens/s)."""
        raise NotImplementedError

    def seek(self, batches: int) -> None:
        """Where training stands: the Trainer calls it before it trains with the number of micro-batches already
        drawn, so a task whose batches follow one another (epochs without replacement) continues a resumed run
        where it stopped. Default: nothing (batches don't follow each other: each is drawn from the Trainer's
        generator alone)."""

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation scores, "loss" among them, the same data every call (the Trainer sets eval mode)."""
        raise NotImplementedError

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        """What a finished run writes with its weights (`train.weights`): sample.txt, test scores. Default: nothing."""

    # ---- after training: info, eval, inference, views ------------------------------------------
    def param_breakdown(self) -> list[tuple[str, str, int, int]] | None:
        """(part, formula, per copy, copies) rows that `tinyformer info` prints. Default: None (count only)."""
        return None

    def held_out(self, model: nn.Module, **options: Any) -> str:
        """`tinyformer eval`: the model scored on the held-out data, as lines to print.

        Default: `evaluate()` on the prepared task's validation data.
        """
        scores = type(self).prepare(self.config, self.tokenizer).evaluate(model)
        return "held-out split: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())

    def predict(self, model: nn.Module, **options: Any) -> str:
        """`tinyformer <command>`: the model's answer for the user's input, as text to print."""
        raise UserError(f"a {self.name!r} run has no inference command")

    def stream(self, model: nn.Module, **options: Any) -> Iterator[str]:
        """`predict`'s text in pieces as it is made (what `tinyformer <command>` prints as they come). Default:
        the whole text, once; a task that makes its text token by token yields it so."""
        yield self.predict(model, **options)

    def play(self, model: nn.Module, **options: Any) -> list[dict]:
        """`tinyformer serve`'s "predict" view: the answer for the user's input (the `predict_args` options, texts
        only: the playground never opens a file) as panels the page draws (`panel`). Default: predict's text."""
        return [panel("text", "output", text=self.predict(model, **options))]

    def view_inputs(self, model: nn.Module, text: str) -> tuple[torch.Tensor, ...]:
        """The model inputs whose attention `viz attention --text` draws. Default: (ids, mask) of one text."""
        if not text.strip():
            raise UserError("the text is empty; give at least one word")
        return self.tokenizer.batch([text])  # (1, T), (1, T)

    def alignment(self, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> float | None:
        """How well cross-attention follows the expected alignment on `inputs` (0-1); None if undefined."""
        return None


VIEWS = {  # the views a task may declare; the playground page has one drawing for each
    "generate": "a language model's sampling, token by token, with each step's next-token distribution",
    "predict": "a form of the task's predict_args and the panels `Task.play` returns",
    "attention": "the attention from any token of a text, every layer x head, with the head-role scores",
}
PANELS = {  # what `Task.play` may return: kind -> the fields the page draws
    "text": ("text",),  # a block of text
    "bars": ("labels", "values"),  # probabilities, one bar per label, in the order given
    "tags": ("words", "tags"),  # one tag under each word
    "matrix": ("rows", "cols", "values"),  # a heatmap, values[row][col] in 0-1
    "span": ("text", "start", "end"),  # text with the characters start:end marked
}


def panel(kind: str, title: str, note: str = "", **fields: Any) -> dict:
    """One panel of the playground: {"kind", "title", "note", ...its fields}, checked against `PANELS`."""
    if kind not in PANELS or set(fields) != set(PANELS[kind]):
        raise ValueError(f"panel {kind!r} needs the fields {PANELS.get(kind)}, got {sorted(fields)}")
    return {"kind": kind, "title": title, "note": note, **fields}


def fit_model(config: RunConfig, **fitted: Any) -> RunConfig:
    """A copy of `config` whose model section has the `fitted` values; a set value that differs is an error."""
    for key, value in fitted.items():
        given = getattr(config.model, key)
        if given not in (0, [], value):
            raise UserError(f"model.{key}={given!r} does not match what the data gives: {value!r}")
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **fitted))
