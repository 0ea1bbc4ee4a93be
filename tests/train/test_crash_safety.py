"""A run folder survives a kill at any point of a save, and only one process trains into it at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.conftest import tiny_run_config
from tinyformer.device import seed_everything
from tinyformer.errors import UserError
from tinyformer.tasks import GPTTask
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.trainer import Trainer


class Killed(BaseException):
    """Stands for SIGKILL: nothing catches it, no cleanup of ours runs after it."""


def trainer(text_file, run_dir, resume=False):
    cfg = tiny_run_config(text_file, dropout=0.1)  # 12 steps, evaluations (and saves) at 4, 8, 12
    seed_everything(cfg.train.seed)
    task = GPTTask.prepare(cfg)
    return Trainer(task.build_model(), task, cfg.train, run_dir, resume=resume, progress=False)


def weights(t):
    return {k: v.clone() for k, v in t.model.state_dict().items()}


def writes_of_one_save(text_file, tmp_path, monkeypatch) -> int:
    calls = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(b) or real(a, b))
    t = trainer(text_file, tmp_path / "count")
    t.fit(until=8)
    calls.clear()
    t.fit()  # steps 9-12: best.safetensors (maybe), then the save of step 12
    monkeypatch.setattr(os, "replace", real)
    return len(calls)


@pytest.mark.slow
def test_a_kill_at_every_write_of_a_save_resumes_exactly_or_names_the_stale_file(text_file, tmp_path, monkeypatch):
    full = trainer(text_file, tmp_path / "full")
    full.fit()
    expected = weights(full)
    n = writes_of_one_save(text_file, tmp_path, monkeypatch)
    assert n >= 3  # latest weights, trainer state, loss.png (and best weights when val improved)
    outcomes = []
    for k in range(n + 1):  # kill before the k-th rename of the last save (k = n: after all of them)
        run_dir = tmp_path / f"kill{k}"
        t = trainer(text_file, run_dir)
        t.fit(until=8)
        real, count = os.replace, [0]

        def replace(a, b, count=count, k=k, real=real):
            if count[0] == k:
                raise Killed
            count[0] += 1
            real(a, b)

        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(Killed):
            t.fit()
            raise Killed  # k = n: killed after the last write
        monkeypatch.setattr(os, "replace", real)
        try:
            resumed = trainer(text_file, run_dir, resume=True)
        except UserError as e:
            assert "stale" in str(e) and ("model.safetensors" in str(e) or "trainer_state.pt" in str(e))
            outcomes.append("stale named")
            continue
        resumed.fit()
        got = weights(resumed)
        assert all(torch.equal(expected[key], got[key]) for key in expected), f"kill at write {k}"
        outcomes.append("exact")
    assert "exact" in outcomes and outcomes.count("stale named") <= 1  # only between the weights and the state


@pytest.mark.slow
def test_a_second_writer_is_refused_and_a_stale_lock_is_not(text_file, tmp_path):
    from tests.cli_helpers import cli

    out = tmp_path / "run"
    tiny = ["--set", "model.n_layer=1", "--set", "model.n_embd=16", "--set", "model.n_head=2"]
    sets = [*tiny, "--set", "train.max_iters=100000", "--set", "model.block_size=16", "--device", "cpu"]
    cmd = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(text_file), *sets, "--out", str(out)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / ckpt.STATE).exists() and time.time() < deadline:
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
    assert first.returncode == 130 and not (out / ckpt.LOCK).exists()
    (out / ckpt.LOCK).write_text("999999\n")  # left behind by a process that no longer exists
    step = ckpt.load_state(out / ckpt.STATE)["step"]
    r = cli("train", "gpt", "--resume", str(out), "--set", f"train.max_iters={step + 1}")
    assert r.returncode == 0 and f"done: step {step + 1}" in r.stdout, r.stderr


@pytest.mark.slow
def test_two_runs_started_together_into_one_folder_do_not_interleave(text_file, tmp_path):
    out = tmp_path / "race"
    sets = ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=16", "train.max_iters=40"]
    sets += ["train.eval_interval=20", "train.eval_iters=1", "train.log_interval=1", "sample.tokens=5"]
    cmd = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(text_file), "--device", "cpu"]
    cmd += [x for s in sets for x in ("--set", s)] + ["--out", str(out)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    refusal = next(err for code, err in results if code == 2)
    assert ("is in use" in refusal or "is not empty" in refusal) and "Traceback" not in refusal
    steps = [json.loads(line)["step"] for line in (out / ckpt.METRICS).read_text().splitlines()]
    assert steps == sorted(steps) and len([s for s in steps]) == 40 + 2  # one writer: 40 train rows, 2 evaluations
