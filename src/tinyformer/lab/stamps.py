"""Where each fact of the guide comes from: the stamp the lab writes beside a source it makes, and whether the
code that made it has changed since.

A stamp (`lab.json` in the source's folder, `Source.stamp`; copied into `docs/lab/facts.json` under `stamps`)
names the commit the code was at, whether the tree had uncommitted changes there, the date, the machine, the
wall time of the commands, and this machine's calibrated speed (`tinyformer.lab.plan.calibrate`), from which the
next plan scales that wall time to another machine.

A source is *stale* when a file of the code that made it changed between its commit and HEAD: the training
engine, the models, attention, tasks and data (`ENGINE`), plus what its own commands run (the study's module
and the study modules it imports, the benchmarks, the views), plus the presets it reads. A command reads a
preset by its name, so the presets of a source are those named in its arguments or in the text of a Python
file of its code (a study's base preset); `lab recipes` reads them all. `make lab` lists stale sources, and
their `made` fact says so wherever a page or the README quotes it.
"""

from __future__ import annotations

import datetime
import json
import re
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
    "src/tinyformer/runs.py",
    "src/tinyformer/tasks",
    "src/tinyformer/train",
)
PRESETS = "src/tinyformer/presets/"  # a source's code holds the presets it names, not this folder ...
ALL_PRESETS = PRESETS  # ... unless the command reads every preset there is (`lab recipes`): this in its code says so
PACKAGE = Path(__file__).resolve().parents[1]  # src/tinyformer: where the paths above are read from
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
            paths += study_modules(EXPERIMENTS[argv[1]].where.split(":")[0])
    if ALL_PRESETS not in paths:
        paths += presets_named(argvs, paths)
    return tuple(dict.fromkeys(paths))


def package_file(path: str) -> Path:
    return PACKAGE / path.removeprefix("src/tinyformer/")


STUDY_IMPORT = re.compile(r"^from tinyformer\.experiments\.(\w+) import", re.M)


def study_modules(name: str) -> list[str]:
    """A study's module and the study modules it imports, at any depth (speedrun takes its base preset and its
    training from gpt_studies): a change to any of them can change its output."""
    found, todo = [], [name]
    while todo:
        module = todo.pop()
        path = f"src/tinyformer/experiments/{module}.py"
        if path not in found:
            found.append(path)
            todo += STUDY_IMPORT.findall(read_text(package_file(path)))
    return found


def presets_named(argvs: list[list[str]], paths: list[str]) -> list[str]:
    """The presets these commands can read: those whose name is one of their arguments or a word in a Python
    file of their code (`paths`). A changed preset that none of them names cannot change what they make."""
    words = {w for argv in argvs for a in argv for w in re.split(r"[^\w.]+", Path(a).name.removesuffix(".toml"))}
    for path in paths:
        where = package_file(path)
        for f in sorted(where.rglob("*.py")) if where.is_dir() else [where] if where.suffix == ".py" else []:
            words |= set(re.findall(r"\w+", read_text(f)))
    return [f"{PRESETS}{p.name}" for p in sorted((PACKAGE / "presets").glob("*.toml")) if p.stem in words]


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
