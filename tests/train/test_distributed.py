"""Data-parallel training on torchrun, two CPU processes with gloo (the test launches torchrun itself)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.processes import start
from tinyformer.runfolder import STATE, read_state
from tinyformer.train import distributed
from tinyformer.train.distributed import World

TINY = ["model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=32", "model.dropout=0.0"]
TINY += ["train.precision=fp32", "model.backend=sdpa"]  # pinned: the runs are compared to 1e-4
FAST = ["train.lr=0.003", "train.eval_interval=10", "train.eval_iters=2", "train.log_interval=1", 'train.device="cpu"']


def sets(*overrides: str) -> list[str]:
    return [x for o in overrides for x in ("--set", o)]


def train_cmd(text: Path, out: Path, nproc: int, *overrides: str) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    prefix = launcher + ["-m", "tinyformer"] if nproc > 1 else [sys.executable, "-m", "tinyformer"]
    return [*prefix, "train", "gpt", "--data", str(text), "--out", str(out), *sets(*TINY, *FAST, *overrides)]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}  # two processes on two cores: one thread each


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run a command that must succeed; its stderr is the failure message."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env())
    assert r.returncode == 0, r.stderr
    return r


def train_losses(folder: Path) -> list[float]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"]


def test_shard_takes_this_ranks_rows_of_the_global_batch():
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    parts = [distributed.shard((x, y), World(r, 3)) for r in range(3)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    assert distributed.shard(x, World()) is x


@pytest.mark.slow
def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, text_file):
    """Two ranks with batch 4 each see exactly the rows one process sees with batch 8, and DDP averages
    their gradients, so the runs differ only in the order of float sums: the per-step global losses over 20
    AdamW steps agree to 1e-4 (float32 rounding is ~1e-7 relative per operation; Adam's step normalisation
    can amplify it, but not by three orders of magnitude in 20 steps)."""
    run(train_cmd(text_file, tmp_path / "one", 1, "train.batch_size=8", "train.max_iters=20"))
    two = run(train_cmd(text_file, tmp_path / "two", 2, "train.batch_size=4", "train.max_iters=20"))
    a, b = train_losses(tmp_path / "one"), train_losses(tmp_path / "two")
    assert len(a) == len(b) == 20
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-4
    assert a[0] - a[-1] > 0.3  # it trained: the comparison is not between two flat lines
    assert two.stdout.count("done: step 20") == 1  # rank 0 alone prints
    assert "Warning" not in two.stderr, two.stderr  # no deprecation notice per rank (DDP's buffer option)
    state = [read_state(tmp_path / r / STATE) for r in ("one", "two")]
    assert state[0].tokens_seen == state[1].tokens_seen == 20 * 8 * 32


@pytest.mark.slow
def test_an_interrupted_two_process_run_resumes_in_one_process_and_back(tmp_path, text_file):
    out = tmp_path / "run"
    cmd = train_cmd(text_file, out, 2, "train.batch_size=4", "train.max_iters=100000")
    proc = start(cmd, sigint="default", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    deadline = time.time() + 120
    while not (out / "trainer_state.pt").exists() and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: every process of the job gets it
    stdout, stderr = proc.communicate(timeout=120)
    assert "interrupted at step" in stdout, stdout + stderr
    step = int(stdout.split("interrupted at step ")[1].split(";")[0])
    assert read_state(out / STATE).step == step
    one = [sys.executable, "-m", "tinyformer", "train", "gpt", "--resume", str(out)]
    r = run([*one, *sets(f"train.max_iters={step + 3}")])  # DDP checkpoint -> one process
    assert f"done: step {step + 3}" in r.stdout
    note = f"trained with 2 process(es), a global batch of 2 x 4 = 8; resumed with 1, it is 1 x 4 = 4 from step {step}"
    assert note in r.stdout and "--set train.batch_size=8 keeps it" in r.stdout  # said, not silent
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m"]
    r = run([*torchrun, "tinyformer", "train", "gpt", "--resume", str(out), *sets(f"train.max_iters={step + 5}")])
    assert f"done: step {step + 5}" in r.stdout  # and a one-process checkpoint -> two processes
    assert r.stdout.count("resumed with 2, it is 2 x 4 = 8") == 1  # rank 0 alone says it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_rank_that_cannot_reach_the_rendezvous_stops_with_one_line(tmp_path, text_file):
    world = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    world["MASTER_PORT"] = str(free_port())  # nobody listens there: rank 0 never comes
    cmd = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(text_file), "--out", str(tmp_path / "r")]
    t0 = time.time()
    r = subprocess.run(
        [*cmd, *sets(*TINY, "train.dist_timeout=5")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env(), **world},
    )
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]  # c10d may log its own socket error line before ours
    assert last.startswith("tinyformer: error: rank 1 of 2 could not join the process group at 127.0.0.1:")
    assert "train.dist_timeout" in last and "Traceback" not in r.stderr and time.time() - t0 < 60
