"""Every command that README.md and the lab guide's pages print runs, in order, as written, in a fresh copy of
the project, and ends with exit status 0: one test per page, so a failure names its page and a page runs alone
(`pytest tests/test_docs_run.py -k 3-encoder`).

A command runs verbatim, with only size overrides added so that the whole walk takes minutes: a few
training steps (appended: they win) of a narrower model (a width the command sets itself wins) on small
batches (`--set model.n_embd=... --set train.max_iters=...`), three seconds for a `--time` run (its size),
`--quick` for a study (with `--out` where the full command would write, so the commands after it find its
runs), one repeat for a benchmark, `--port 0` for the server. A command printed twice runs once, on the first
page that prints it. What cannot run here is listed with the reason (`SKIP`): the network, a second machine,
the set-up commands themselves. A page that reads a run another page trains (`--out runs/lab/gpt`) trains it
first, with that page's command. Each study a guide page reads, made at CI size once in the session
(`quick_study`), is copied in first; the README's one study (ablation, seconds at CI size) the README's own
command makes, so that test needs only the user's install and runs beside the studies, on another worker.

Commands run as children forked from a warm parent (`tests/warm.py`) that has imported the CLI, torch,
matplotlib and transformers once: each keeps its own exit status, working folder and input, as a new process
would, without paying a cold start 100 times. `serve` and `chat` run as real processes (a server and a
terminal). The README's commands run with the user's install (`user_install`: the wheel with the extras
`make demo` installs, in a venv of its own), as a reader who ran `make demo` would run them; the guide's use the
suite's full environment. The guide's English and Chinese pages print the same commands; the English ones run.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import copy_runs, fresh_copy, needs_play
from tests.processes import start
from tests.warm import WarmParent
from tinyformer.experiments import EXPERIMENTS
from tinyformer.lab.sources import SOURCES, STUDIES

ROOT = Path(__file__).resolve().parents[1]
PAGES = {page.name: page for page in [ROOT / "README.md", *sorted((ROOT / "docs" / "lab" / "en").glob("*.md"))]}
SKIP = {  # a command (or what it starts with) -> why it does not run here
    "make demo": "the set-up command itself: its training is the lab/demo source, made by the lab's quick build",
    "make test": "the set-up command itself: the suite this test is part of",
    "source .venv/bin/activate": "shell set-up (the test calls the package's own interpreter)",
    "tinyformer viz bert --model bert-base-chinese": "needs the network once (bert-base-chinese from the hub)",
}
STEPS = ["train.max_iters=2", "train.eval_interval=2", "train.log_interval=1", "train.batch_size=4"]
NARROW = ["model.n_embd=32", "model.d_ff=64"]  # widths; depths stay, a command may name a layer
SIZE = {  # the task of `tinyformer train TASK` -> (widths: the command's own setting wins, steps and data: ours)
    "gpt": (["model.n_embd=32"], [*STEPS, "train.eval_iters=1", "sample.tokens=20"]),
    "reverse": (NARROW, [*STEPS, "data.n_train=64", "data.n_val=16"]),
    "mlm": (NARROW, [*STEPS, "train.eval_iters=1"]),
    "classify": ([*NARROW, "model.hidden=32", "model.n_filters=8"], STEPS),
    "tag": (NARROW, STEPS),
    "qa": (NARROW, STEPS),
}
BRIEF = "3s"  # `--time`'s duration here
LIVE = {"serve", "chat"}  # real processes: a server asked over HTTP, a terminal given a line


def printed_commands() -> list[tuple[str, str]]:
    """(page, command) for every command line of a code block, in page order, each distinct command once."""
    seen: dict[str, str] = {}
    for name, page in PAGES.items():
        fenced = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif fenced and re.match(r"(tinyformer|make|source|python|torchrun) ", line.strip()):
                command = shlex.join(shlex.split(line, comments=True))
                seen.setdefault(command, name)
    return [(page, command) for command, page in seen.items()]


def out_of(command: str) -> str | None:
    """The run folder a training command writes (its --out), else None."""
    argv = shlex.split(command)
    if argv[1] == "train" and "--out" in argv:
        return argv[argv.index("--out") + 1]
    return None


def walk(page: str, commands: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The commands a page runs, in order: first the trainings of other pages whose runs it reads, then its own."""
    own = [command for p, command in commands if p == page]
    made_here = {out_of(c) for c in own}
    needs = [
        (p, c)
        for p, c in commands
        if p != page
        and out_of(c)
        and out_of(c) not in made_here
        and any(re.search(rf"(^| ){re.escape(out_of(c))}( |/|$)", mine) for mine in own)
    ]
    return needs + [(page, c) for c in own]


def studies_read(steps: list[tuple[str, str]], commands: list[tuple[str, str]]) -> list[str]:
    """The studies these commands make or read (`experiment NAME`, `runs/experiments/NAME/...`), except those
    whose cells the pages train by hand."""
    named = {m for _, c in steps for m in re.findall(r"(?:experiment |runs/experiments/)([a-z0-9-]+)", c)}
    whole = [name for name in STUDIES if f"experiments/{name}" in SOURCES]  # budgets: made in parts, by budget
    return [name for name in whole if name in named and not by_hand(name, commands)]


def skipped(command: str) -> str | None:
    return next((why for start, why in SKIP.items() if command.startswith(start)), None)


def by_hand(study: str, commands: list[tuple[str, str]]) -> bool:
    """The pages train the study's cells one by one (reverse-ablation): the study then reuses those runs."""
    return any(f"--out runs/experiments/{study}/" in c for _, c in commands)


def sized(argv: list[str], commands: list[tuple[str, str]]) -> list[str]:
    """The command with its size overrides added."""
    verb = argv[1]
    if verb == "train":  # widths before the command's own options (a width it sets wins), steps after them
        widths, steps = ([a for o in group for a in ("--set", o)] for group in SIZE[argv[2]])
        if "--time" in argv:  # a run for a time budget sizes its own steps: its size is the time given
            at = argv.index("--time") + 1
            argv = [*argv[:at], BRIEF, *argv[at + 1 :]]
        return argv[:3] + widths + argv[3:] + steps
    if verb == "experiment":
        if "--nanogpt" in argv:  # the tests never fetch nanoGPT: the speedrun study runs without its row
            at = argv.index("--nanogpt")
            argv = argv[:at] + argv[at + 2 :]
        out = [] if "--out" in argv else ["--out", f"runs/experiments/{argv[2]}"]
        # a study whose cells the pages trained (tiny) reuses them as they are; --quick would ask for other sizes
        return argv + out if by_hand(argv[2], commands) else argv + ["--quick", *out]
    if verb == "bench":
        extra = {"train": ["--iters", "2"], "attention": ["--lengths", "64"], "rnn": ["--iters", "1"]}
        return argv + ["--repeats", "1", *extra.get(argv[2], [])]
    if verb == "serve":
        return argv + ["--port", "0"]
    return argv


def live(python: list[str], argv: list[str], cwd: Path, env: dict) -> tuple[int, str]:
    """`serve` is started, asked once, then stopped; `chat` gets one line and the end of its input."""
    if argv[1] == "serve":
        return serve(python + argv[1:], cwd, env)
    p = subprocess.run(
        python + argv[1:], cwd=cwd, env=env, input="To be\n", capture_output=True, text=True, timeout=300
    )
    return p.returncode, p.stdout[-2000:] + p.stderr[-2000:]


def serve(command: list[str], cwd: Path, env: dict) -> tuple[int, str]:
    import httpx

    p = start(command, sigint="default", cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        url = line.split()[2]
        runs = httpx.get(url + "api/runs", timeout=60).json()["runs"]
        answered = f"{len(runs)} runs listed"
    finally:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    return p.returncode, line + answered + out + err[-2000:]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """`warm(bin_folder or None)`: the warm parent for that install's interpreter (None: the suite's own)."""
    parents: dict = {}

    def get(user: Path | None) -> WarmParent:
        if user not in parents:
            python = str(user / "python") if user else sys.executable
            parents[user] = WarmParent(python, dict(os.environ), tmp_path_factory.mktemp("outputs"))
        return parents[user]

    yield get
    for parent in parents.values():
        parent.__exit__()


@pytest.mark.slow
@needs_play
def test_every_command_of_the_readme_runs(tmp_path, user_install, warm, capsys):
    """With the user's install; the one study it names (at CI size) it makes itself, in seconds, so that this
    test needs nothing of the session's studies and runs on another worker than they do."""
    run_page("README.md", fresh_copy(tmp_path / "clone"), warm(user_install), [str(user_install / "tinyformer")])


@pytest.mark.slow
@needs_play
@pytest.mark.parametrize("page", [name for name in PAGES if name != "README.md"])
def test_every_command_of_the_guide_page_runs(page, tmp_path, quick_study, warm, capsys):
    copy, commands = fresh_copy(tmp_path / "clone"), printed_commands()
    for name in studies_read(walk(page, commands), commands):  # made at CI size once a session, copied where
        study = quick_study(name).folder  # the commands look for them (weights hard-linked: `copy_runs`)
        home = EXPERIMENTS[name].folder  # where it writes by default when that is not experiments/NAME
        for target in [f"experiments/{name}", f"experiments/{name}-quick", *([home] if home else [])]:
            copy_runs(study, copy / "runs" / target)
    run_page(page, copy, warm(None), [sys.executable, "-m", "tinyformer"])


def run_page(page: str, copy: Path, parent: WarmParent, tinyformer: list[str]) -> None:
    """Every command of the walk of `page` in `copy`: forked from `parent`, or run by `tinyformer` (serve, chat)."""
    commands = printed_commands()
    times, skips, failures, start = [], [], [], time.perf_counter()
    for where, command in walk(page, commands):
        why = skipped(command)
        if why:
            skips.append(f"{command}  ({why})")
            continue
        argv = sized(shlex.split(command), commands)
        began, cpu = time.perf_counter(), "process"
        if argv[1] in LIVE:
            code, output = live(tinyformer, argv, copy, os.environ | {"PYTHONUNBUFFERED": "1"})
        else:
            code, output, spent = parent.run(argv[1:], copy)
            cpu = f"{spent['cpu']:.1f} s CPU"
        times.append((time.perf_counter() - began, cpu, command))
        if code != 0:
            failures.append(f"{where}: {shlex.join(argv)} -> exit {code}\n{output}")
    slowest = "\n  ".join(f"{s:5.1f} s ({cpu})  {c}" for s, cpu, c in sorted(times, reverse=True)[:5])
    print(f"\n{page}: {len(times)} commands ran in {time.perf_counter() - start:.0f} s; slowest:\n  {slowest}")
    if skips:
        print(f"  {len(skips)} skipped:\n  " + "\n  ".join(skips))
    assert not failures, "\n\n".join(failures)
    assert times, f"{page} prints no command that runs here"


def test_a_page_trains_first_the_runs_it_reads_from_another_page():
    """The walk of a page alone: a run trained on an earlier page comes first, and only the ones it reads."""
    commands = [
        ("a.md", "tinyformer train gpt --out runs/lab/gpt"),
        ("a.md", "tinyformer train gpt --out runs/lab/gpt-wide"),
        ("b.md", "tinyformer viz attention runs/lab/gpt --layer 3"),
        ("b.md", "tinyformer train gpt --out runs/mine"),
        ("b.md", "tinyformer sample runs/mine"),
    ]
    assert walk("b.md", commands) == [commands[0], *commands[2:]]
    assert walk("a.md", commands) == commands[:2]


def test_the_size_overrides_cut_steps_always_and_widths_unless_the_command_sets_its_own():
    from tinyformer.config import resolve
    from tinyformer.tasks import TASKS

    argv = sized(shlex.split("tinyformer train reverse --set model.d_ff=341 --set train.max_iters=600 --out x"), [])
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    config = resolve(TASKS["reverse"].default_config(), [], overrides)
    assert (config.model.d_ff, config.model.n_embd, config.train.max_iters) == (341, 32, 2)
    timed = sized(shlex.split("tinyformer train gpt --time 10m"), [])  # a time budget: its size is its time
    assert timed[timed.index("--time") + 1] == BRIEF and "10m" not in timed


def test_every_page_prints_commands_and_every_training_has_sizes():
    commands = printed_commands()
    assert {page for page, _ in commands} == set(PAGES)
    assert len(commands) >= 90
    for _, command in commands:
        argv = shlex.split(command)
        if argv[0] == "tinyformer" and argv[1] == "train":
            assert argv[2] in SIZE, f"no size overrides for `train {argv[2]}`: {command}"


@pytest.mark.slow
def test_the_example_inputs_are_read_by_the_commands_that_name_them(tmp_path, warm):
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
        code, output, _ = warm(None).run([*argv, *steps, *tiny, "--out", str(tmp_path / str(i))], tmp_path)
        assert code == 0, (argv, output)
    question = "Who says 'What, ho! Apothecary!'?"
    code, output, _ = warm(None).run(["qa", str(tmp_path / "2"), "--context", str(data / "scene.txt"), question], ROOT)
    assert code == 0 and "probability" in output, output
    assert (data / "my.txt").read_text(encoding="utf-8").strip()
