"""Where each fact of the guide comes from: the stamp the lab writes beside a source it makes, and whether the
code that made it has changed since.

A stamp (`lab.json` in the source's folder, `Source.stamp`; copied into `docs/lab/facts.json` under `stamps`)
names the commit the code was at, whether the tree had uncommitted changes there, the date, the machine, the
wall time of the commands, and this machine's calibrated speed (`tinyformer.lab.plan.calibrate`), from which the
next plan scales that wall time to another machine.

A source is *stale* when a file of the code that made it changed between its commit and HEAD: the training
engine, the models, attention, tasks and data (`ENGINE`), plus what its own commands run (the study's module,
the benchmarks, the views). `make lab` lists stale sources, and their `made` fact says so wherever a page or
the README quotes it.
"""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

from tinyformer.files import read_text, write_text
from tinyformer.lab.plan import CALIBRATION

ENGINE = (  # what every training, evaluation and view runs through
    "configs",
    "src/tinyformer/attention",
    "src/tinyformer/config.py",
    "src/tinyformer/course.py",
    "src/tinyformer/data",
    "src/tinyformer/device.py",
    "src/tinyformer/generate",
    "src/tinyformer/layers",
    "src/tinyformer/models",
    "src/tinyformer/presets",
    "src/tinyformer/runs.py",
    "src/tinyformer/tasks",
    "src/tinyformer/train",
)
PRESETS = "src/tinyformer/presets/"  # a preset added here since a stamp was not read to make it ...
ALL_PRESETS = PRESETS  # ... unless the command reads every preset there is (`lab recipes`): this in its code says so
VERBS = {  # a command's first word -> the code it runs beyond the engine
    "bench": ("src/tinyformer/bench",),
    "viz": ("src/tinyformer/viz",),
    "info": ("src/tinyformer/info.py",),
    "lab": ("src/tinyformer/lab/recipes.py", ALL_PRESETS),
    "experiment": ("src/tinyformer/experiments/runner.py", "src/tinyformer/experiments/report.py"),
}


def code_of(argvs: list[list[str]]) -> tuple[str, ...]:
    """The paths (relative to the repository) whose change makes the output of these commands stale."""
    from tinyformer.experiments import EXPERIMENTS

    paths = list(ENGINE)
    for argv in argvs:
        paths += VERBS.get(argv[0], ())
        if argv[0] == "experiment" and argv[1] in EXPERIMENTS:
            paths.append(f"src/tinyformer/experiments/{EXPERIMENTS[argv[1]].where.split(':')[0]}.py")
    return tuple(dict.fromkeys(paths))


def git(root: Path, *args: str) -> str | None:
    """`git args` in `root`, its output stripped; None outside a repository or without git."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def repository(start: Path) -> Path | None:
    top = git(start, "rev-parse", "--show-toplevel")
    return Path(top) if top else None


def stamp(path: Path, root: Path | None, wall: float, speed: float | None, machine: str) -> dict:
    """Write a source's stamp (the file `path`): what made it, where, when and in how long; returns it."""
    commit = git(root, "rev-parse", "--short=10", "HEAD") if root else None
    dirty = bool(git(root, "status", "--porcelain", "--", "src", "configs")) if commit else False
    record = {
        "machine": machine,
        "commit": commit or "unknown",
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_s": round(wall, 1),
        "speed": speed,
        "calibration": CALIBRATION,
    }
    write_text(path, json.dumps(record, indent=2) + "\n")
    return record


def read_stamp(path: Path) -> dict:
    """The stamp in the file `path`, or {} when the lab did not make it (or made it before stamps existed)."""
    if not path.is_file():
        return {}
    try:
        record = json.loads(read_text(path))
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def changed_since(root: Path | None, record: dict, paths: tuple[str, ...]) -> list[str] | None:
    """Files of `paths` changed from the stamp's commit to HEAD; None when that cannot be told (no repository,
    an unstamped source, a commit this clone lacks). A preset added since is not among them unless the code
    reads every preset (`ALL_PRESETS` in `paths`): a command reads a preset by its name, so nothing made before
    that preset existed read it."""
    commit = record.get("commit")
    if root is None or not commit or commit == "unknown":
        return None
    out = git(root, "diff", "--name-status", "--no-renames", f"{commit}..HEAD", "--", *paths)
    if out is None:
        return None
    rows = [line.split("\t", 1) for line in out.splitlines() if line]
    unread = () if ALL_PRESETS in paths else (PRESETS,)
    return [name for status, name in rows if not (status == "A" and name.startswith(unread))]


def made_text(record: dict, changed: list[str] | None) -> str:
    """The `made` fact: the commit and date a source's facts come from, and `stale` when its code changed since."""
    if not record.get("commit"):
        return "not stamped (made before the lab stamped its facts)"
    text = f"{record['commit'][:7]}{'+' if record.get('dirty') else ''}, {record['date'][:10]}"
    if changed:
        return f"{text}, stale: {len(changed)} file{'s' if len(changed) > 1 else ''} of its code changed since"
    return text
