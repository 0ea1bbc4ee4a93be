"""A property of every command that reads a run folder: with any one of its files truncated, emptied or
replaced by another run's file, it either works or ends in one clear line (exit 2), never a traceback."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from tinyformer.cli import main

COMMANDS = {
    "info": lambda run, tmp: ["info", run],
    "sample": lambda run, tmp: ["sample", run, "--tokens", "5"],
    "eval": lambda run, tmp: ["eval", run],
    "resume": lambda run, tmp: ["train", "gpt", "--resume", run, "--set", "train.max_iters=32"],
    "export": lambda run, tmp: ["export", "hf", run, tmp / "hf", "--force"],
    "viz": lambda run, tmp: ["viz", "attention", run, "--text", "RO", "--out", tmp / "figs"],
}


def corrupt(path: Path, how: str, donor: Path) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "emptied":
        path.write_bytes(b"")
    else:  # replaced by the same file of another run (an encoder-decoder), or any of its files
        source = donor / path.name if (donor / path.name).is_file() else donor / "config.json"
        path.write_bytes(source.read_bytes())


@pytest.mark.slow
def test_no_command_ends_in_a_traceback_on_a_run_folder_with_one_bad_file(trained, reversal_run, tmp_path, capsys):
    files = sorted(p.name for p in trained.iterdir() if p.is_file())
    cases = [(f, how, cmd) for f in files for how in ("truncated", "emptied", "replaced") for cmd in COMMANDS]
    random.Random(0).shuffle(cases)  # a seeded order: a state one case leaves cannot hide behind a fixed order
    outcomes = {0: 0, 2: 0}
    for i, (name, how, command) in enumerate(cases):
        run = Path(shutil.copytree(trained, tmp_path / f"case{i}"))
        corrupt(run / name, how, reversal_run)
        args = [str(a) for a in COMMANDS[command](run, tmp_path / f"out{i}")]
        try:
            code = main(args)
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code in (0, 2), (name, how, command, err)
        assert "Traceback" not in err and err.count("\n") <= 3, (name, how, command, err)
        outcomes[code] += 1
        shutil.rmtree(run)
    assert outcomes[2] > 0 and outcomes[0] > 0  # some corruptions are harmless (loss.png), many are not


def test_no_command_leaves_a_temp_file_behind(trained, tmp_path, capsys):
    """Every write goes through a temp file and a rename: after a clean exit not one `.NAME.tmp` is left."""
    run = Path(shutil.copytree(trained, tmp_path / "run"))
    for i, command in enumerate(COMMANDS.values()):
        assert main([str(a) for a in command(run, tmp_path / f"out{i}")]) == 0
        left = [p for p in tmp_path.rglob("*.tmp")]
        assert not left, (command(run, tmp_path), left)
