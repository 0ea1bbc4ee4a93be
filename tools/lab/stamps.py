"""Where each fact of the guide comes from: the stamp the lab writes beside a source it makes, and whether the
code that made it has changed since.

A stamp (`lab.json` in the source's folder, `Source.stamp`; copied into `docs/lab/facts.json` under `stamps`)
names the commit the code was at, whether the tree had uncommitted changes there, the date, the machine, the
wall time of the commands, and this machine's calibrated speed (`tools.lab.plan.calibrate`), from which the
next plan scales that wall time to another machine.

A source is *stale* when a file of the code that made it changed between its commit and HEAD. That code is
found from the code itself, not listed by hand (`code_of`): every module its commands can run, from the
import graph (`tools.imports`: the command's module of the CLI, the study it names, the task of each
run it trains or reads, and the tasks a study's code names, each with everything it imports at any depth,
inside functions too; the top levels of the entry point and the CLI's package, which every command imports),
plus the data files its arguments name and the presets it reads. A command reads a preset by its name, so the
presets of a source are those named in its arguments or in the text of a Python file of its code (a study's
base preset); a module that defines `READS_EVERY_PRESET` (`lab recipes`) reads them all. `make lab` lists
stale sources, and their `made` fact says so wherever a page or the README quotes it
(`tinyformer.lab.placeholders.made_text`).
"""

from __future__ import annotations

import ast
import datetime
import functools
import json
import re
import subprocess
from pathlib import Path

from tinyformer.files import read_text, write_text
from tools.imports import ALL, PACKAGE, path_of, reach
from tools.lab.plan import CALIBRATION

PRESETS = "src/tinyformer/presets/"  # a source's code holds the presets it names, not this folder ...
EVERY_PRESET = "READS_EVERY_PRESET"  # ... unless its code reads every preset there is (`lab recipes`): a module
# that defines this name says so
ENTRY = [("tinyformer.__main__", ALL), ("tinyformer.cli", ALL)]  # what every command runs: the entry point and
CLI = ("tinyformer.cli.",)  # `tinyformer.cli.main`, which imports every module of the CLI and runs one of them


def code_of(argvs: list[list[str]]) -> tuple[str, ...]:
    """The paths (relative to the repository) whose change makes the output of these commands stale: every
    module whose code they can run, found from the code (`tools.imports.reach`), and the presets and
    data files they read."""
    starts = list(ENTRY)
    for argv in argvs:
        starts += command_starts(argv) + [task_class(t) for t in tasks_of(argv)]
    while True:  # a study's cells name the tasks they train, and a task can start from another's run
        modules = reach(starts, opaque=CLI)
        more = [task_class(t) for t in sorted(tasks_named(modules))]
        if set(more) <= set(starts):
            break
        starts += more
    files = sorted(f"src/{p.relative_to(PACKAGE.parent).as_posix()}" for m in modules if (p := path_of(m)))
    paths = [*files, *data_files(argvs)]
    every = any(re.search(rf"^{EVERY_PRESET}\s*=", read_text(package_file(f)), re.M) for f in files)
    return tuple(paths) + ((PRESETS,) if every else tuple(presets_named(argvs, files)))


def command_starts(argv: list[str]) -> list[tuple[str, str | None]]:
    """What a command line runs by name: its verb's module of the CLI, and the study `experiment NAME` runs."""
    from tinyformer.experiments import EXPERIMENTS

    starts = [(verb_modules().get(argv[0], "tinyformer.cli.infer"), ALL)]  # the tasks' inference verbs: infer
    if argv[0] == "experiment" and len(argv) > 1 and argv[1] in EXPERIMENTS:
        module, function = EXPERIMENTS[argv[1]].where.split(":")
        starts.append((f"tinyformer.experiments.{module}", function))
    return starts


def task_class(task: str) -> tuple[str, str]:
    from tinyformer.tasks.cards import CARDS

    module, name = CARDS[task].where.split(":")
    return module, name


@functools.cache
def verb_modules() -> dict[str, str]:
    """{verb: its module of the CLI}, read from the table in `tinyformer.cli.commands` (the code, not imported:
    the lab sits below the CLI)."""
    tree = ast.parse(read_text(PACKAGE / "cli" / "__init__.py"))
    table = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "commands")
    found = {}
    for node in ast.walk(table):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Tuple):
                    first = value.elts[0]
                    if isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name):
                        found[key.value] = f"tinyformer.cli.{first.value.id}"
    return found


def tasks_of(argv: list[str]) -> set[str]:
    """The tasks a command line loads by name: `train TASK`, and the task of each run folder it reads that
    another source of the guide trains (`{runs}/lab/gpt`); a run it cannot tell: every task."""
    from tinyformer.lab.sources import SOURCES
    from tinyformer.tasks.cards import CARDS

    tasks = {argv[1]} if argv[0] == "train" and len(argv) > 1 and argv[1] in CARDS else set()
    runs = [a.removeprefix("{runs}/") for a in argv if a.startswith("{runs}/")]
    for folder in runs:
        source = SOURCES.get(folder)
        made = [t for made in (source.argv(False) if source else []) for t in tasks_of(made)]
        tasks |= set(made) if made else set(CARDS)
    return tasks


def tasks_named(modules: set[str]) -> set[str]:
    """The tasks whose name is a string in the code of the studies among `modules` (a study's cells name the
    task they train; elsewhere a task's name is a default or a help text, not a task that runs)."""
    from tinyformer.tasks.cards import CARDS

    found = set()
    for m in modules:
        if m.startswith("tinyformer.experiments.") and (p := path_of(m)):
            found |= {n.value for n in ast.walk(ast.parse(read_text(p))) if isinstance(n, ast.Constant)} & set(CARDS)
    return found


def data_files(argvs: list[list[str]]) -> list[str]:
    """The files of the repository the commands name (`--data examples/data/...`, `--config configs/...`)."""
    root = PACKAGE.parents[1]
    found = []
    for argv in argvs:
        for a in argv:
            p = root / a
            if "{" not in a and not a.startswith("-") and "/" in a and p.is_file() and p.suffix != ".toml":
                found.append(a)
    return found


def package_file(path: str) -> Path:
    return PACKAGE / path.removeprefix("src/tinyformer/")


def presets_named(argvs: list[list[str]], paths: list[str]) -> list[str]:
    """The presets these commands can read: those whose name is one of their arguments or a word in a Python
    file of their code (`paths`). A changed preset that none of them names cannot change what they make."""
    words = {w for argv in argvs for a in argv for w in re.split(r"[^\w.]+", Path(a).name.removesuffix(".toml"))}
    for path in paths:
        if path.endswith(".py"):
            words |= set(re.findall(r"\w+", read_text(package_file(path))))
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


def stamp(
    path: Path, root: Path | None, wall: float, speed: float | None, machine: str, fingerprint: dict | None = None
) -> dict:
    """Write a source's stamp (the file `path`): what made it, where, when and in how long, and what its code
    makes at CI size (`fingerprint`, `tools.lab.verify`); returns it."""
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
    } | ({"fingerprints": {fingerprint["kind"]: fingerprint}} if fingerprint else {})
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
    reads every preset (`PRESETS` in `paths`): a command reads a preset by its name, so nothing made before
    that preset existed read it."""
    commit = record.get("commit")
    if root is None or not commit or commit == "unknown":
        return None
    out = git(root, "diff", "--name-status", "--no-renames", f"{commit}..HEAD", "--", *paths)
    if out is None:
        return None
    rows = [line.split("\t", 1) for line in out.splitlines() if line]
    unread = () if PRESETS in paths else (PRESETS,)
    return [name for status, name in rows if not (status == "A" and name.startswith(unread))]
