"""What the commands share: the arguments of a command that loads a run, and checks of user input."""

from __future__ import annotations

import argparse

from tinyformer.errors import UserError


def add_run_args(p: argparse.ArgumentParser, device: bool = True) -> None:
    """The arguments every command that loads a run shares: the folder, which weights, the device."""
    p.add_argument("run", help="run folder")
    p.add_argument(
        "--checkpoint", choices=("run", "best", "latest"), default="run", help="which weights (run: its train.weights)"
    )
    if device:
        p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda or mps")


def load(a: argparse.Namespace):
    """The run named on the command line, its model on `--device`."""
    from tinyformer.runs import load_run

    return load_run(a.run, weights=a.checkpoint, device=getattr(a, "device", "cpu"))


def utf8(text: str) -> str:
    """A command-line text that is valid Unicode (a stray non-UTF-8 byte arrives as a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError("the text is not valid UTF-8; check the terminal's encoding") from None
    return text


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value
