"""A run folder survives a kill at any point of a save, and only one process trains into it at a time."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.cli_helpers import user_error
from tests.conftest import tiny_run_config
from tests.processes import start
from tinyformer import config, runfolder
from tinyformer.device import seed_everything
from tinyformer.errors import UserError
from tinyformer.runs import prepare_run
from tinyformer.tasks import GPTTask
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.trainer import Trainer


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, no cleanup of ours runs after it."""


def trainer(text_file, run_dir, resume=False):
    cfg = tiny_run_config(text_file, dropout=0.1, backend="sdpa")  # 12 steps; evaluations (and saves) at 4, 8, 12
    seed_everything(cfg.train.seed)
    task = GPTTask.prepare(cfg)
    t = Trainer(task.build_model(), task, cfg.train, run_dir, resume=resume, progress=False)
    if not resume:  # what `train` writes as a run starts, before its first save
        ckpt.save_json(run_dir / runfolder.CONFIG, config.to_dict(task.config))
        task.tokenizer.save(run_dir / runfolder.TOKENIZER)
    return t


def weights(t):
    return {k: v.clone() for k, v in t.model.state_dict().items()}


class Faults:
    """Counts the file-system steps of a save (each part's write, each fsync, each rename) and makes the k-th one
    fail: `Killed` (a kill: nothing runs after it) or a full disk (the write leaves half a file, then ENOSPC)."""

    def __init__(self, at: int | None = None, how: str = "kill"):
        self.at, self.how, self.steps = at, how, []

    def arm(self, monkeypatch) -> None:
        real_weights, real_state = ckpt.weights_writer, ckpt.state_writer
        monkeypatch.setattr(ckpt, "weights_writer", lambda *a: self.wrap("write", real_weights(*a)))
        monkeypatch.setattr(ckpt, "state_writer", lambda *a: self.wrap("write", real_state(*a)))
        real_fsync, real_replace = os.fsync, os.replace
        monkeypatch.setattr(os, "fsync", lambda fd: self.step("fsync", lambda: real_fsync(fd)))
        monkeypatch.setattr(os, "replace", lambda a, b: self.step("rename", lambda: real_replace(a, b)))

    def wrap(self, kind, write):
        return lambda path: self.step(kind, lambda: write(path), path)

    def step(self, kind, do, path=None):
        if len(self.steps) == self.at:
            if self.how == "kill":
                raise Killed
            if kind == "write":  # ENOSPC: what fitted is on the disk, then the error
                do()
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
                raise OSError(errno.ENOSPC, "No space left on device")
        self.steps.append(kind)
        return do()


def train_until(text_file, run_dir, monkeypatch, fault: Faults | None, until: int | None = None):
    """Train the tiny run (saves at 4, 8, 12), from the start or resumed, with `fault` armed for its last save."""
    t = trainer(text_file, run_dir, resume=(run_dir / runfolder.CONFIG).exists())
    if fault is None:
        t.fit(until=until)
        return t
    if t.step > 0:  # a resumed run: up to the step before the save the fault is for (fit saves where it stops)
        t.fit(until=until - 1)
    fault.arm(monkeypatch)  # counts that save's steps only: the very first save of a new run, or step 12's
    t.fit(until=until)
    return t


def points(text_file, tmp_path, monkeypatch, first: bool) -> list[str]:
    """The steps of one save: the first one (step 4) or a later one that also writes best.safetensors."""
    counter = Faults()
    run_dir = tmp_path / ("count-first" if first else "count")
    if not first:
        train_until(text_file, run_dir, monkeypatch, None, until=8)
    train_until(text_file, run_dir, monkeypatch, counter, until=4 if first else 12)
    monkeypatch.undo()
    return counter.steps


@pytest.mark.slow
@pytest.mark.parametrize("first", [True, False], ids=["first save", "a later save"])
def test_a_kill_or_a_full_disk_at_any_step_of_a_save_resumes_bit_exactly(text_file, tmp_path, monkeypatch, first):
    """At every write, fsync and rename of a save a kill, and at every write a full disk: the folder then holds
    one complete checkpoint (the new one, or the one before), no temp file survives the next command, and the
    resumed run ends with the very weights of an uninterrupted one. Before any checkpoint: one line says so."""
    expected = weights(train_until(text_file, tmp_path / "full", monkeypatch, None))
    steps = points(text_file, tmp_path, monkeypatch, first)
    assert steps.count("write") >= 2 and steps.count("rename") >= 3 and "fsync" in steps, steps
    cases = [(k, "kill") for k in range(len(steps))] + [(k, "full") for k, s in enumerate(steps) if s == "write"]
    outcomes = {"resumed": 0, "never saved": 0}
    for k, how in cases:
        run_dir = tmp_path / f"{how}{k}"
        if not first:
            train_until(text_file, run_dir, monkeypatch, None, until=8)
        fault = Faults(at=k, how=how)
        if how == "kill":
            with pytest.raises(Killed):
                train_until(text_file, run_dir, monkeypatch, fault, until=4 if first else 12)
        else:
            with pytest.raises(UserError, match=r"cannot save step \d+ .*\(the disk is full\); "):
                train_until(text_file, run_dir, monkeypatch, fault, until=4 if first else 12)
            assert not list(run_dir.glob(".*.tmp")), (k, how)  # a failed save cleans up after itself
        monkeypatch.undo()
        if first and not runfolder.is_run(run_dir):
            for where in (dict(resume=run_dir), dict(out=run_dir)):  # --resume RUN and --out RUN say the same
                with pytest.raises(UserError, match="stopped before its first checkpoint.*rm -r"):
                    prepare_run("gpt", **where)
            outcomes["never saved"] += 1
            continue
        resumed = trainer(text_file, run_dir, resume=True)
        assert not list(run_dir.glob(".*.tmp")) and not (run_dir / runfolder.COMMIT).exists(), (k, how)
        resumed.fit()
        got = weights(resumed)
        assert all(torch.equal(expected[n], got[n]) for n in expected), f"{how} at step {k} ({steps[k]})"
        outcomes["resumed"] += 1
    print(f"{len(cases)} failure points: {outcomes}")  # shown with -s: the figure the crash-safety note quotes
    if first:  # before the first commit nothing can be resumed, and says so; from it on, everything resumes
        assert outcomes["never saved"] > 0 and outcomes["resumed"] > 0, outcomes
    else:
        assert outcomes["resumed"] == len(cases), outcomes


def test_a_resume_below_the_saved_step_is_refused(text_file, tmp_path):
    run_dir = tmp_path / "run"
    train_until(text_file, run_dir, None, None, until=8)
    cfg = tiny_run_config(text_file, dropout=0.1, max_iters=6)
    task = GPTTask.prepare(cfg)
    with pytest.raises(UserError, match="train.max_iters=6 is below step 8"):
        Trainer(task.build_model(), task, cfg.train, run_dir, resume=True, progress=False)


@pytest.mark.slow
def test_a_second_writer_is_refused_and_a_stale_lock_is_not(text_file, tmp_path):
    from tests.cli_helpers import cli

    out = tmp_path / "run"
    tiny = ["--set", "model.n_layer=1", "--set", "model.n_embd=16", "--set", "model.n_head=2"]
    sets = [*tiny, "--set", "train.max_iters=100000", "--set", "model.block_size=16", "--device", "cpu"]
    cmd = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(text_file), *sets, "--out", str(out)]
    first = start(cmd, sigint="default", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / runfolder.STATE).exists() and time.time() < deadline:
        time.sleep(0.2)
    try:
        new, resume = (
            ["train", "gpt", "--data", str(text_file), "--out", str(out)],
            ["train", "gpt", "--resume", str(out)],
        )
        for args, words in ((new, "is not empty"), (resume, f"is in use: process {first.pid} is training into")):
            r = cli(*args)
            assert r.returncode == 2 and words in r.stderr, r.stderr
            assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 130 and not (out / runfolder.LOCK).exists()
    (out / runfolder.LOCK).write_text("999999\n")  # left behind by a process that no longer exists
    step = runfolder.read_state(out / runfolder.STATE).step
    r = cli("train", "gpt", "--resume", str(out), "--set", f"train.max_iters={step + 1}")
    assert r.returncode == 0 and f"done: step {step + 1}" in r.stdout, r.stderr


@pytest.mark.slow
def test_two_runs_started_together_into_one_folder_do_not_interleave(text_file, tmp_path):
    out = tmp_path / "race"
    sets = ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=16", "train.max_iters=40"]
    sets += ["train.eval_interval=20", "train.eval_iters=1", "train.log_interval=1", "sample.tokens=5"]
    cmd = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(text_file), "--device", "cpu"]
    cmd += [x for s in sets for x in ("--set", s)] + ["--out", str(out)]
    procs = [start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refusal = next(err for code, err in results if code == 2)
    assert ("is in use" in refusal or "is not empty" in refusal) and "Traceback" not in refusal
    steps = [json.loads(line)["step"] for line in (out / runfolder.METRICS).read_text().splitlines()]
    assert (
        steps == sorted(steps) and len([s for s in steps]) == 40 + 3
    )  # one writer: 40 train rows, 3 evaluations (0, 20, 40)


def test_a_folder_whose_two_files_disagree_continues_only_with_inexact_from_its_weights(text_file, tmp_path, capsys):
    """As an earlier version could leave it: the weights saved at step 10, the state still at step 8."""

    run_dir = tmp_path / "old"
    t = train_until(text_file, run_dir, None, None, until=8)
    t.fit(until=11)  # weights from further on, then written alone, as a kill between the two files left them
    state = runfolder.read_state(run_dir / runfolder.STATE)
    later = weights(t)
    ckpt.save_weights(t.model, run_dir / runfolder.WEIGHTS, step=10)
    ckpt.save_state(dataclasses.replace(state, step=8), run_dir / runfolder.STATE)
    with pytest.raises(ckpt.StaleCheckpoint, match="--inexact continues from the weights"):
        trainer(text_file, run_dir, resume=True)
    cfg = tiny_run_config(text_file, dropout=0.1, backend="sdpa")
    task = GPTTask.prepare(cfg)
    resumed = Trainer(task.build_model(), task, cfg.train, run_dir, resume="inexact", progress=False)
    assert resumed.step == 10 and all(torch.equal(later[k], v) for k, v in weights(resumed).items())
    assert "not an exact continuation" in capsys.readouterr().out
    assert "--inexact goes with --resume" in user_error(capsys, "train", "gpt", "--inexact")
