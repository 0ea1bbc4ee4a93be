"""tinyformer's one rule for SIGINT and SIGTERM (`tinyformer.interrupt`), held at every moment of a training
command's life, for a command started with SIGINT at its default and one started with it ignored (as from a
background job, `tinyformer train ... &` in a script):

- SIGINT at its default stops the command: exit 130, at most one line on stderr, no traceback, nothing lost
  (inside the loop: the step finishes and a resumable state is saved);
- SIGINT ignored on entry stays ignored at every moment: the run trains on, and SIGTERM stops it;
- SIGTERM stops the command at every moment, whatever SIGINT's disposition: exit 143, nothing lost.

The moments are reached by waiting for what the command does, not by sleeping a fixed time, so a slow
machine lands in the same phase: start-up (tinyformer's handler installed, no line printed yet), the first
evaluation (after the set-up line), the loop (an evaluation's line at step 10) and the end (the last
evaluation's line: the plot, then sample.txt).
`scripts/signal_probe.py` sweeps the moments by time instead, phases without a line of their own included.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.cli_helpers import cli
from tests.processes import Lines, catches, start
from tinyformer import runfolder

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=32", "train.batch_size=4"]
LONG = ["train.max_iters=100000", "train.eval_interval=10", "train.eval_iters=2"]
SHORT = ["train.max_iters=10", "train.eval_interval=5", "train.eval_iters=2", "sample.tokens=10000"]
PHASES = {  # phase -> (its steps, the line printed just before it: None = start-up, see `launch`)
    "start-up": (LONG, None),
    "first evaluation": (LONG, "gpt:"),
    "loop": (LONG, "step     10:"),
    "end": (SHORT, "step     10:"),  # the last evaluation: the plot and sample.txt's 10,000 tokens follow
}


def launch(tmp_path: Path, text_file: Path, sigint: str, phase: str) -> tuple[subprocess.Popen, Lines, Path]:
    """A training command started with SIGINT `sigint`, once it is in `phase`."""
    steps, line = PHASES[phase]
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "tinyformer", "train", "gpt", "--data", str(text_file), "--out", str(out)]
    argv += [a for s in MODEL + steps for a in ("--set", s)] + ["--device", "cpu"]
    p = start(argv, sigint=sigint, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = Lines(p.stdout)
    if line:
        lines.wait_for(line)
    else:  # start-up: tinyformer's first line has run (Python catches no SIGTERM of its own), torch is loading
        catches(p, signal.SIGTERM)
        assert lines.lines == []
    return p, lines, out


def ended(p: subprocess.Popen, timeout: float = 90) -> tuple[int, str]:
    p.wait(timeout=timeout)
    return p.returncode, p.stderr.read()


def one_line(err: str) -> bool:
    return "Traceback" not in err and err.count("\n") <= 1


def saved_step(out: Path) -> int:
    return runfolder.read_state(out / runfolder.STATE).step


@pytest.mark.parametrize("phase", list(PHASES))
def test_sigint_at_its_default_stops_the_command_with_one_line_and_loses_nothing(phase, tmp_path, text_file):
    p, lines, out = launch(tmp_path, text_file, "default", phase)
    p.send_signal(signal.SIGINT)
    code, err = ended(p)
    if phase == "start-up":  # at once: nothing was written
        assert (code, err) == (130, "tinyformer: interrupted\n") and not out.exists()
        return
    assert code == 130 and one_line(err), (code, err)
    if phase == "end":  # finished and saved before the signal: it stays so
        assert err == "tinyformer: interrupted\n" and saved_step(out) == 10
        return
    said = lines.wait_for("interrupted at step")  # the step finished and was saved
    step = int(said.split("interrupted at step ")[1].split(";")[0])
    assert saved_step(out) == step
    if phase == "loop":  # and it resumes from there
        r = cli("train", "gpt", "--resume", str(out), "--set", f"train.max_iters={step + 2}")
        assert r.returncode == 0 and f"done: step {step + 2}" in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("phase", list(PHASES))
def test_sigint_ignored_on_entry_stays_ignored_and_sigterm_stops_the_run(phase, tmp_path, text_file):
    p, lines, out = launch(tmp_path, text_file, "ignored", phase)
    p.send_signal(signal.SIGINT)
    if phase == "end":  # it finishes as if nothing had been sent
        code, err = ended(p)
        assert code == 0 and (out / "sample.txt").is_file(), err[-2000:]
        return
    then = len(lines.lines)
    # it trains on: an evaluation's line comes after the signal
    lines.wait_for(lambda line: line.startswith("step ") and lines.lines.index(line) >= then)
    assert p.poll() is None
    p.send_signal(signal.SIGTERM)
    code, err = ended(p)
    assert code == 143 and one_line(err), (code, err)
    said = lines.wait_for("interrupted at step")
    assert saved_step(out) == int(said.split("interrupted at step ")[1].split(";")[0])


@pytest.mark.parametrize("phase", list(PHASES))
def test_sigterm_stops_the_command_at_every_moment_with_one_line(phase, tmp_path, text_file):
    p, lines, out = launch(tmp_path, text_file, "ignored", phase)
    p.send_signal(signal.SIGTERM)
    code, err = ended(p)
    if phase == "start-up":
        assert (code, err) == (143, "tinyformer: terminated\n") and not out.exists()
    elif phase == "end":
        assert (code, err) == (143, "tinyformer: terminated\n") and saved_step(out) == 10
    else:
        assert code == 143 and one_line(err), (code, err)
        said = lines.wait_for("interrupted at step")
        assert saved_step(out) == int(said.split("interrupted at step ")[1].split(";")[0])


INNER = """
import subprocess, sys, time
from tests.processes import start

SLEEP = "import time; time.sleep(600)"
CHILD = f"import subprocess as s, sys, time; s.Popen([sys.executable, '-c', {SLEEP!r}, sys.argv[1]]); time.sleep(600)"

def test_a_failed_assertion():
    start([sys.executable, "-c", CHILD, "{mark}"])
    time.sleep(1)
    assert False

def test_a_timeout():
    p = start([sys.executable, "-c", CHILD, "{mark}"])
    p.wait(timeout=1)
"""


def running_with(mark: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_test_that_fails_or_times_out_leaves_no_process_behind(tmp_path):
    mark = f"tinyformer-left-behind-{time.time_ns()}"
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER).replace("{mark}", mark))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "tests.processes", "-p", "no:cacheprovider", "-p", "no:xdist"]
    r = subprocess.run([*cmd, "--rootdir", str(tmp_path), str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert "2 failed" in r.stdout, r.stdout[-2000:]
    deadline = time.monotonic() + 10
    while running_with(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_with(mark) == []  # neither the children nor what they started


def test_sample_prints_as_it_generates_and_ctrl_c_keeps_what_was_printed(tmp_path, text_file):
    run = tmp_path / "run"
    steps = [a for s in [*MODEL, "train.max_iters=2", "train.eval_iters=1"] for a in ("--set", s)]
    r = cli("train", "gpt", "--data", str(text_file), *steps, "--out", str(run))
    assert r.returncode == 0, r.stderr[-2000:]
    sample = ["sample", str(run), "--prompt", "\n", "--seed", "3", "--temperature", "1"]
    whole = cli(*sample, "--tokens", "300").stdout
    tinyformer = [sys.executable, "-m", "tinyformer"]  # a real process: it is sent SIGINT
    p = start([*tinyformer, *sample, "--tokens", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = Lines(p.stdout)
    lines.wait_for(lambda line: len("".join(lines.lines)) > 300)  # a million tokens take minutes: it streams
    assert p.poll() is None
    p.send_signal(signal.SIGINT)
    code, err = ended(p)
    assert (code, err) == (130, "tinyformer: interrupted\n")
    printed = lines.text()
    assert printed.startswith(whole.removesuffix("\n")) and printed.endswith("\n")  # the same text, kept
