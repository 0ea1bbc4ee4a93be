"""Commands that run a trained model: each task's inference verb (`sample`, `translate`, `fill`,
`classify`, ... as the registry declares them) and `eval`, one code path for every task.

The commands and their options come from the tasks' cards (`tinyformer.tasks.cards`: `command`,
`predict_args`, `eval_args`), so building them imports no task: this module never names one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from tinyformer.cli.common import add_run_args, load, utf8
from tinyformer.errors import UserError
from tinyformer.tasks.cards import CARDS, Arg, Card


def add_args(p: argparse.ArgumentParser, args: list[Arg]) -> None:
    for arg in args:
        if not arg.flag.startswith("-"):
            p.add_argument(arg.flag, help=arg.help, nargs="?" if arg.optional else None)
        elif arg.type is None:
            p.add_argument(arg.flag, action="store_true", help=arg.help)
        else:
            p.add_argument(arg.flag, type=arg.type, help=arg.help)


def options(a: argparse.Namespace, run, accepted: tuple[Arg, ...], every: list[Arg]) -> dict:
    """The options the user gave, checked against what the run's task accepts; texts must be valid UTF-8."""
    names, given = {arg.dest for arg in accepted}, {}
    for arg in every:
        value = getattr(a, arg.dest)
        if value is None or value is False:
            continue
        if arg.dest not in names:
            raise UserError(f"{arg.flag} does not apply to a {run.config.task!r} run")
        given[arg.dest] = utf8(value) if isinstance(value, str) else value
    return given


def union(args: list[Arg]) -> list[Arg]:
    return list({arg.flag: arg for arg in args}.values())


# ---- the tasks' inference verbs ------------------------------------------------------------
def predict_commands() -> dict[str, tuple[Callable, Callable, str]]:
    """{verb: (add, cmd, help)} for every inference verb a registered task declares."""
    verbs: dict[str, list[Card]] = {}
    for card in CARDS.values():
        if card.command:
            verbs.setdefault(card.command, []).append(card)
    return {verb: _predict_command(verb, cards) for verb, cards in verbs.items()}


def _predict_command(verb: str, cards: list[Card]) -> tuple[Callable, Callable, str]:
    every = union([arg for card in cards for arg in card.predict_args])
    names = " or ".join(f"`train {card.name}`" for card in cards)

    def add(p: argparse.ArgumentParser) -> None:
        add_run_args(p)
        add_args(p, every)

    def cmd(a: argparse.Namespace) -> int:
        from tinyformer.api import stream

        run = load(a)
        if run.task.command != verb:
            hint = f"; its command is `tinyformer {run.task.command}`" if run.task.command else ""
            raise UserError(f"{a.run!r} is a {run.config.task!r} run; {verb} needs a {names} run{hint}")
        try:  # printed as it is made (`sample`: character by character); Ctrl-C keeps what was printed
            for piece in stream(run, **options(a, run, run.task.predict_args, every)):
                sys.stdout.write(piece)
                sys.stdout.flush()
        except KeyboardInterrupt:
            print()  # the line that says so starts on a line of its own
            raise
        print()
        return 0

    return add, cmd, cards[0].command_help


# ---- eval ----------------------------------------------------------------------------------
def _eval_args() -> list[Arg]:
    return union([arg for card in CARDS.values() for arg in card.eval_args])


def add_eval(p: argparse.ArgumentParser) -> None:
    add_run_args(p)
    add_args(p, _eval_args())


def cmd_eval(a: argparse.Namespace) -> int:
    from tinyformer.api import evaluate

    run = load(a)
    print(evaluate(run, **options(a, run, run.task.eval_args, _eval_args())))
    return 0
