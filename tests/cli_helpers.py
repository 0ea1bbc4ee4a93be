"""Helpers for the command-line tests: run the CLI in a process of its own or in-process, tiny model flags."""

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


_warm = None  # this process's warm parent (tests/warm.py), started by the first `cli` call


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`tinyformer ARGS` in a process of its own, as `subprocess.run([python, "-m", "tinyformer", *args],
    capture_output=True, text=True, env=env)` gives it: its exit status, stdout and stderr, run in the caller's
    working folder with `env`, else the caller's environment as it is now. The process is a child forked from a
    warm parent that imported torch, matplotlib and the CLI once (`tests/warm.py`), so a command costs its own
    work, not the seconds of an interpreter's start; test_help_of_the_installed_command_lists_every_subcommand
    starts the real entry point cold, and the signal and crash tests start theirs as real processes."""
    import atexit
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from tests.warm import WarmParent

    global _warm
    if _warm is None or _warm.process.poll() is not None:
        scratch = Path(tempfile.mkdtemp(prefix="tinyformer-cli-"))
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        _warm = WarmParent(sys.executable, dict(os.environ), scratch)
    return _warm.complete(list(args), Path.cwd(), os.environ if env is None else env, timeout=300)


def user_error(capsys, *args: str) -> str:
    """Run the CLI in-process; assert exit code 2 and exactly one line on stderr; return it."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("tinyformer: error: ")
    return err
