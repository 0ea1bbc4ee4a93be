"""Helpers for the command-line tests: run the CLI in a subprocess or in-process, tiny model flags."""

from __future__ import annotations

import subprocess
import sys

from tinyformer.cli import main

TINY = [
    "--set",
    "model.n_layer=1",
    "--set",
    "model.n_embd=16",
    "--set",
    "model.n_head=2",
    "--set",
    "model.block_size=32",
]
FAST = [
    "--set",
    "train.batch_size=4",
    "--set",
    "train.eval_iters=2",
    "--set",
    "train.eval_interval=10",
    "--device",
    "cpu",
]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinyformer", *args], capture_output=True, text=True, timeout=300)


def user_error(capsys, *args: str) -> str:
    """Run the CLI in-process; assert exit code 2 and exactly one line on stderr; return it."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("tinyformer: error: ")
    return err
