"""Every command that README.md and the lab guide's pages print runs, in order, as written, in a fresh copy of
the project, and ends with exit status 0.

A command runs verbatim, with only size overrides appended so that the whole walk takes minutes: a few
training steps (`--set train.max_iters=...`), `--quick` for a study (with `--out` where the full command would
write, so the commands after it find its runs), one repeat for a benchmark, `--port 0` for the server. A command
printed twice runs once. What cannot run here is listed with the reason (`SKIP`): the network, a second
machine, the set-up commands themselves. Each study made at CI size earlier in the session (`quick_study`) is
copied in first, so no study trains twice in one suite.

The README's commands run with the user's install (`user_install`: the wheel with the extras `make demo`
installs, in a venv of its own), as a reader who ran `make demo` would run them; the guide's may use the suite's
full environment. The guide's English and Chinese pages print the same commands; the English ones run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import fresh_copy, needs_play
from tinyformer.experiments import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "lab" / "en").glob("*.md"))]
SKIP = {  # a command (or what it starts with) -> why it does not run here
    "make demo": "the set-up command itself: its training is the lab/demo source, made by the lab's quick build",
    "make test": "the set-up command itself: the suite this test is part of",
    "source .venv/bin/activate": "shell set-up (the test calls the package's own interpreter)",
    "tinyformer viz bert --model bert-base-chinese": "needs the network once (bert-base-chinese from the hub)",
}
STEPS = ["train.max_iters=2", "train.eval_interval=2", "train.log_interval=1"]
SIZE = {  # the task of `tinyformer train TASK` -> its size overrides
    "gpt": [*STEPS, "train.eval_iters=1", "sample.tokens=20"],
    "reverse": [*STEPS, "data.n_train=64", "data.n_val=16"],
    "mlm": [*STEPS, "train.eval_iters=1"],
    "classify": STEPS,
    "tag": STEPS,
    "qa": STEPS,
}


def printed_commands() -> list[tuple[str, str]]:
    """(page, command) for every command line of a code block, in page order, each distinct command once."""
    seen: dict[str, str] = {}
    for page in PAGES:
        fenced = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif fenced and re.match(r"(tinyformer|make|source|python|torchrun) ", line.strip()):
                command = shlex.join(shlex.split(line, comments=True))
                seen.setdefault(command, page.name)
    return [(page, command) for command, page in seen.items()]


def skipped(command: str) -> str | None:
    return next((why for start, why in SKIP.items() if command.startswith(start)), None)


def by_hand(study: str, commands: list[tuple[str, str]]) -> bool:
    """The pages train the study's cells one by one (reverse-ablation): the study then reuses those runs."""
    return any(f"--out runs/experiments/{study}/" in c for _, c in commands)


def sized(argv: list[str], commands: list[tuple[str, str]]) -> list[str]:
    """The command with its size overrides appended."""
    verb = argv[1]
    if verb == "train":
        return argv + [a for o in SIZE[argv[2]] for a in ("--set", o)]
    if verb == "experiment":
        out = [] if "--out" in argv else ["--out", f"runs/experiments/{argv[2]}"]
        # a study whose cells the pages trained (tiny) reuses them as they are; --quick would ask for other sizes
        return argv + out if by_hand(argv[2], commands) else argv + ["--quick", *out]
    if verb == "bench":
        extra = {"train": ["--iters", "2"], "attention": ["--lengths", "64"], "rnn": ["--iters", "1"]}
        return argv + ["--repeats", "1", *extra.get(argv[2], [])]
    if verb == "serve":
        return argv + ["--port", "0"]
    return argv


def run(argv: list[str], cwd: Path, env: dict, user: Path | None = None) -> tuple[int, str]:
    """Run one command in `cwd` -> (exit status, its output): with the `tinyformer` of the user's install (bin
    folder `user`) for a README command, else with the suite's own. `serve` is started, asked once, then
    stopped; `chat` gets one line and the end of its input."""
    python = [str(user / "tinyformer")] if user else [sys.executable, "-m", "tinyformer"]
    python += argv[1:]
    if argv[1] == "serve":
        return serve(python, cwd, env)
    stdin = "To be\n" if argv[1] == "chat" else ""
    p = subprocess.run(python, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout[-2000:] + p.stderr[-2000:]


def serve(python: list[str], cwd: Path, env: dict) -> tuple[int, str]:
    import httpx

    p = subprocess.Popen(python, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        url = line.split()[2]
        runs = httpx.get(url + "api/runs", timeout=60).json()["runs"]
        answered = f"{len(runs)} runs listed"
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    return p.returncode, line + answered + out + err[-2000:]


@pytest.mark.slow
@needs_play
def test_every_command_of_the_readme_and_the_lab_guide_runs(tmp_path, quick_study, user_install, capsys):
    copy = fresh_copy(tmp_path / "clone")
    commands = printed_commands()
    for name in EXPERIMENTS:  # the studies the session made at CI size, where the commands will look for them
        if name != "tokenizers" and not by_hand(name, commands):
            study = quick_study(name).folder
            for target in (f"runs/experiments/{name}", f"runs/experiments/{name}-quick"):
                shutil.copytree(study, copy / target, dirs_exist_ok=True)
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    ran, skips, failures, start = 0, [], [], time.perf_counter()
    for page, command in commands:
        why = skipped(command)
        if why:
            skips.append(f"{command}  ({why})")
            continue
        argv = sized(shlex.split(command), commands)
        code, output = run(argv, copy, env, user_install if page == "README.md" else None)
        ran += 1
        if code != 0:
            failures.append(f"{page}: {shlex.join(argv)} -> exit {code}\n{output}")
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n{ran} documented commands ran in {seconds:.0f} s; {len(skips)} skipped:\n  " + "\n  ".join(skips))
    assert not failures, "\n\n".join(failures)
    assert ran >= 90


@pytest.mark.slow
def test_the_example_inputs_are_read_by_the_commands_that_name_them(tmp_path):
    """examples/data holds one small file per input format the manual's commands read; each trains (two steps)
    and the QA passage answers a question."""
    data = ROOT / "examples" / "data"
    steps = [a for o in STEPS for a in ("--set", o)]
    tiny = [a for o in ("model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.d_ff=64") for a in ("--set", o)]
    commands = [
        ["train", "classify", "--data", str(data / "reviews.csv"), "--text-col", "review", "--label-col", "stars"],
        ["train", "tag", "--data", str(data / "ner.conll")],
        ["train", "qa", "--data", str(data / "squad.json"), "--set", "data.seq_len=48", "--set", "data.stride=16"],
    ]
    for i, argv in enumerate(commands):
        r = subprocess.run(
            [sys.executable, "-m", "tinyformer", *argv, *steps, *tiny, "--out", str(tmp_path / str(i))],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, (argv, r.stderr[-2000:])
    question = "Who says 'What, ho! Apothecary!'?"
    args = ["qa", str(tmp_path / "2"), "--context", str(data / "scene.txt"), question]
    r = subprocess.run([sys.executable, "-m", "tinyformer", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "probability" in r.stdout, r.stderr
    assert (data / "my.txt").read_text(encoding="utf-8").strip()
