"""Commands that run a trained model: each task's inference verb (`sample`, `translate`, `fill`,
`classify`, ... as the registry declares them) and `eval`, one code path for every task.

The commands and their options come from the tasks (`Task.command`, `predict_args`, `eval_args`):
this module never names a task.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tinyformer.cli.common import add_run_args, load, utf8
from tinyformer.device import inference
from tinyformer.errors import UserError
from tinyformer.tasks import TASKS, Arg


def dest(arg: Arg) -> str:
    return arg.flag.lstrip("-").replace("-", "_")


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
    names = {dest(arg) for arg in accepted}
    given = {dest(arg): getattr(a, dest(arg)) for arg in every}
    given = {k: v for k, v in given.items() if v is not None and v is not False}
    for key, value in given.items():
        if key not in names:
            raise UserError(f"--{key.replace('_', '-')} does not apply to a {run.config.task!r} run")
        if isinstance(value, str):
            utf8(value)
    return given


def union(args: list[Arg]) -> list[Arg]:
    return list({arg.flag: arg for arg in args}.values())


# ---- the tasks' inference verbs ------------------------------------------------------------
def predict_commands() -> dict[str, tuple[Callable, Callable, str]]:
    """{verb: (add, cmd, help)} for every inference verb a registered task declares."""
    verbs: dict[str, list] = {}
    for task in TASKS.values():
        if task.command:
            verbs.setdefault(task.command, []).append(task)
    return {verb: _predict_command(verb, tasks) for verb, tasks in verbs.items()}


def _predict_command(verb: str, tasks: list) -> tuple[Callable, Callable, str]:
    every = union([arg for task in tasks for arg in task.predict_args])
    names = " or ".join(f"`train {t.name}`" for t in tasks)

    def add(p: argparse.ArgumentParser) -> None:
        add_run_args(p)
        add_args(p, every)

    def cmd(a: argparse.Namespace) -> int:
        run = load(a)
        if run.task.command != verb:
            hint = f"; its command is `tinyformer {run.task.command}`" if run.task.command else ""
            raise UserError(f"{a.run!r} is a {run.config.task!r} run; {verb} needs a {names} run{hint}")
        with inference(run.model), run.autocast():  # eval mode, no autograd, the precision it trained in
            print(run.task.predict(run.model, **options(a, run, run.task.predict_args, every)))
        return 0

    return add, cmd, tasks[0].command_help


# ---- eval ----------------------------------------------------------------------------------
def _eval_args() -> list[Arg]:
    return union([arg for task in TASKS.values() for arg in task.eval_args])


def add_eval(p: argparse.ArgumentParser) -> None:
    add_run_args(p)
    add_args(p, _eval_args())


def cmd_eval(a: argparse.Namespace) -> int:
    run = load(a)
    with inference(run.model), run.autocast():
        print(run.task.held_out(run.model, **options(a, run, run.task.eval_args, _eval_args())))
    return 0
