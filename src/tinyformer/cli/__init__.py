"""The `tinyformer` command: one table of subcommands, each a thin function over the library.

The modules of this package follow the concepts: `train` (train, info), `infer` (each task's
inference verb, and eval), `chat` (`sample`, interactive), `viz`, `export`, `experiment`, `bench`,
`serve` (the web playground).
Tasks declare their own inference verb and options (`tinyformer.tasks.base.Task`), so no command here
names a task.

A `UserError` (bad flag, missing file, unknown character, ...) ends in one line
on stderr and exit code 2. Ctrl-C and SIGTERM follow one rule in every command (`tinyformer.interrupt`): one
line, exit 130 or 143, nothing lost; a signal ignored when the command started stays ignored.
"""

from __future__ import annotations

import argparse
import os
import sys

from tinyformer import interrupt
from tinyformer.cli import bench, chat, experiment, export, infer, lab, serve, train, viz
from tinyformer.errors import UserError
from tinyformer.extras import missing, optional
from tinyformer.files import reason


def commands() -> dict:
    """{name: (add arguments, handler, help)}; the inference verbs as the task registry has them now."""
    return {
        "train": (train.add_train, train.cmd_train, "train a model (e.g. MiniGPT on Tiny Shakespeare)"),
        **infer.predict_commands(),  # sample, translate, fill, classify: each task's inference verb
        "chat": (chat.add_chat, chat.cmd_chat, "continue line after line with a language-model run, streaming"),
        "info": (train.add_info, train.cmd_info, "show a run's config, parameter breakdown and progress"),
        "eval": (infer.add_eval, infer.cmd_eval, "score a run on its held-out data (a language model: or a file)"),
        "viz": (viz.add_viz, None, "draw attention: Hugging Face BERT, any tinyformer run, cross-attention"),
        "export": (
            export.add_export,
            export.cmd_export,
            "take a run elsewhere: a Hugging Face folder, one HTML page, ONNX",
        ),
        "experiment": (experiment.add_experiment, experiment.cmd_experiment, "train a grid of runs, write a report"),
        "bench": (bench.add_bench, bench.cmd_bench, "measure speed and memory"),
        "lab": (lab.add_lab, None, "build the lab guide (docs/lab) from the runs' reports"),
        "serve": (serve.add_serve, serve.cmd_serve, "a playground in the browser: generate, attention, predictions"),
    }


COMMANDS = commands()  # the table as registered at import


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (plus where to look), like every other error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tinyformer", description="A from-scratch Transformer lab.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add, run, text) in commands().items():
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(handler=run)
        add(p)  # may set a handler per sub-subcommand
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command line; -> its exit status (Ctrl-C or SIGTERM at any moment: one line, 130 or 143)."""
    try:
        with interrupt.command():
            return _run(argv)
    except KeyboardInterrupt as e:
        signum = interrupt.signum_of(e)
        print(interrupt.line(signum), file=sys.stderr)
        return 128 + signum


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)  # start-up (`interrupt.command`): a signal exits at once
    import torch  # noqa: F401  (every command uses it: its import is start-up too)

    interrupt.started()
    args.cli = main  # the entry point itself, for a command that runs others (`lab build`): none imports it back
    try:
        return args.handler(args)
    except UserError as e:
        return _fail(str(e))
    except BrokenPipeError:  # `tinyformer info RUN | head -1`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a process stopped by SIGPIPE reports
    except OSError as e:  # the machine refused a read or write (no space, no permission): not a bug of ours
        return _fail(f"{e.filename or 'a file'}: {reason(e)}")
    except ModuleNotFoundError as e:  # an optional package met past the command's own check (`tinyformer.extras`)
        if not optional(e):
            raise
        return _fail(str(missing(f"tinyformer {args.command}", e.name)))


def _fail(message: str) -> int:
    print(f"tinyformer: error: {' '.join(message.split())}", file=sys.stderr)  # one line, always
    return 2


if __name__ == "__main__":
    sys.exit(main())
