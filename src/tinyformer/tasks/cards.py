"""Each task's card: what the command line knows of a task without importing it (its name, inference verb,
options and data format), so that building the parser, and every `--help`, loads neither torch nor a model.

A task class takes these attributes from its card (`Task.card`); `where` says which module defines the class,
imported the first time the registry is asked for it (`tinyformer.tasks.TASKS`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Arg:
    """One command-line option of a task's inference or evaluation command (argparse terms).

    The CLI adds it to the command with default None (a switch: False); the task's method owns the default,
    and receives only the options the user gave.
    """

    flag: str  # "--top", or a bare name for a positional argument ("text")
    help: str  # shown by --help; say the default here
    type: Any = str  # int, float, str; None = a switch (--flag sets True)
    optional: bool = False  # positional only: may be left out

    @property
    def dest(self) -> str:
        """The option's name in parsed arguments and in the playground's forms: "--top-k" -> "top_k"."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def required(self) -> bool:
        """A positional argument that may not be left out."""
        return not self.flag.startswith("-") and not self.optional


@dataclass(frozen=True)
class Card:
    name: str  # the name on the command line: `tinyformer train <name>`
    where: str = ""  # "module:Class" that defines the task ("" for a class registered by hand)
    command: str | None = None  # inference verb: `tinyformer <command> RUN ...` calls predict()
    command_help: str = ""  # one line for `tinyformer --help`
    predict_args: tuple[Arg, ...] = ()  # the options of that command
    eval_args: tuple[Arg, ...] = ()  # the options `tinyformer eval` accepts for this task
    data_format: str = ""  # what `train --data` names for this task ("": it makes its own data)
    data_args: tuple[Arg, ...] = ()  # `train` options that set data.<name>, e.g. a table's columns

    @classmethod
    def of(cls, task: type) -> Card:
        """The card of a task class that declares these attributes itself (a plug-in, or a test)."""
        return cls(**{f.name: getattr(task, f.name) for f in fields(cls) if f.name != "where"})


SAMPLE_ARGS = (
    Arg("--prompt", "text to continue (default: the run's sample.prompt)"),
    Arg("--tokens", "how many new tokens (default 500)", int),
    Arg("--temperature", "0 = greedy (default 0.8)", float),
    Arg("--top-k", "keep the k most likely tokens; 0 = off (default 40)", int),
    Arg("--top-p", "nucleus sampling mass; 1 = off (default 1.0)", float),
    Arg("--seed", "sampling seed (default 1)", int),
    Arg("--no-cache", "re-run the whole context every step (the naive path, no KV cache)", None),
    Arg("--context", "tokens the model sees per step (default: its block size)", int),
    Arg("--ntk", "RoPE runs: NTK-aware scaling for --context, no retraining", None),
)
SOURCE = Arg("text", 'the input: digits for a reverse run ("7 3 0 9 5"), any text for a seq2seq run')
BEAM = Arg("--beam", "beam width (default 1 = greedy)", int)
TRANSLATE = dict(  # every task whose verb is translate shares its options: one positional name
    command="translate",
    command_help="run an encoder-decoder on one input (greedy or beam)",
    predict_args=(SOURCE, BEAM),
)


def column_args(task: str, *columns: str) -> tuple[Arg, ...]:
    """`train` options naming a table's columns: `--NAME-col` sets data.NAME_col, whose default is NAME."""
    return tuple(Arg(f"--{c}-col", f"{task}: the table's {c} column (data.{c}_col, default {c})") for c in columns)


CARDS: dict[str, Card] = {
    card.name: card
    for card in (
        Card(
            "gpt",
            "tinyformer.tasks.gpt:GPTTask",
            "sample",
            "generate text from a language-model run (KV cache, sampling settings, context)",
            SAMPLE_ARGS,
            eval_args=(Arg("--data", "gpt: score this text file instead of the held-out split"),),
            data_format="a text file",
        ),
        Card(
            "reverse",
            "tinyformer.tasks.reverse:ReverseTask",
            eval_args=(Arg("--n", "reverse: held-out sequences to score (default 1000)", int), BEAM),
            **TRANSLATE,
        ),
        Card(
            "mlm",
            "tinyformer.tasks.mlm:MLMTask",
            "fill",
            "a masked-LM run's top fillers for each [MASK] in a text",
            (
                Arg("text", 'text with one or more [MASK], e.g. "To be or not to [MASK]"'),
                Arg("--top", "fillers to show per [MASK] (default 5)", int),
            ),
            data_format="a text file",
        ),
        Card(
            "classify",
            "tinyformer.tasks.classify:ClassifyTask",
            "classify",
            "label a text with a classifier run",
            (Arg("text", "the text to label"),),
            data_format="a .csv/.tsv/.jsonl table",
            data_args=column_args("classify", "text", "label"),
        ),
        Card(
            "seq2seq",
            "tinyformer.tasks.seq2seq:Seq2SeqTask",
            eval_args=(BEAM,),
            data_format="a .csv/.tsv/.jsonl table of pairs",
            data_args=column_args("seq2seq", "source", "target"),
            **TRANSLATE,
        ),
        Card(
            "tag",
            "tinyformer.tasks.tag:TagTask",
            "tag",
            "tag every word of a text with a tagging run",
            (Arg("text", "the text to tag"),),
            data_format="CoNLL or .jsonl tags",
        ),
        Card(
            "qa",
            "tinyformer.tasks.qa:QATask",
            "qa",
            "answer a question from a passage with a QA run",
            (Arg("question", "the question"), Arg("--context", "the passage: a text file, or the text itself")),
            data_format="SQuAD .json/.jsonl",
        ),
    )
}
