"""`tinyformer lab`: build the lab guide (docs/lab) from the runs' reports, or show what a source states.

`recipes` and `facts` are the package's own (`tinyformer.lab`). `build` and `notebooks` make the repository's
committed guide from its sources, with the repository's tools (`tools/lab/` in a clone, never in the wheel):
they run from the root of a clone, whose tools they import from there, and elsewhere say so in one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from tinyformer.course import RECIPES
from tinyformer.errors import UserError

GUIDE = Path("docs/lab")
FRONT = Path("README.md")
QUICK_RUNS = Path("runs/lab-quick")


def add_lab(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = sub.add_parser("build", help="fill docs/lab/{en,zh} from their templates and the runs' reports (in a clone)")
    b.add_argument(
        "--train",
        action="store_true",
        help="first make every source runs/ lacks, after a plan with estimated minutes (interrupted: resumes)",
    )
    b.add_argument("--only", action="append", default=[], metavar="SOURCE", help="make this source (repeatable)")
    b.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="sources made at once (default: this machine's cores)"
    )
    b.add_argument("--plan", action="store_true", help="print what would be made and the estimate, make nothing")

    b.add_argument(
        "--quick",
        action="store_true",
        help=f"CI size: make every source tiny under {QUICK_RUNS}; every figure must be there",
    )
    b.add_argument("--runs", help=f"the runs root (default: runs, or {QUICK_RUNS} with --quick)")
    b.add_argument("--out", help=f"where pages go (default: docs/lab, or {QUICK_RUNS}/docs with --quick)")
    b.set_defaults(handler=cmd_build)
    v = sub.add_parser(
        "verify",
        help="check by behaviour each source whose code changed since it was made (its CI-size build, here and at "
        "its stamped commit), then fill the pages (in a clone)",
    )
    v.add_argument("--only", action="append", default=[], metavar="SOURCE", help="check this source (repeatable)")
    v.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="builds at once (default: the cores)")
    v.add_argument("--runs", default="runs", help="the runs root; scratch builds go to RUNS/lab-verify")
    v.set_defaults(handler=cmd_verify)
    r = sub.add_parser("recipes", help="print, per course recipe, every key where a shipped preset differs from it")
    r.add_argument("task", nargs="?", choices=tuple(RECIPES), help="one recipe's table (default: every one)")
    r.add_argument("--lang", choices=("en", "zh"), default="en", help="the text's language (the guide's pages)")
    r.set_defaults(handler=cmd_recipes)
    n = sub.add_parser(
        "notebooks", help="make notebooks/{en,zh}/*.ipynb from the guide's sources (no outputs; in a clone)"
    )
    n.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each notebook that differs")
    n.set_defaults(handler=cmd_notebooks)
    f = sub.add_parser("facts", help="print every fact a source folder states (the keys templates use)")
    f.add_argument("source", help="e.g. experiments/ablation or lab/gpt")
    f.add_argument("--runs", default="runs", help="the runs root (default: runs)")
    f.set_defaults(handler=cmd_facts)


def clone_tool(action: str, name: str) -> ModuleType:
    """`tools.lab.NAME` of the clone this command runs in (the working folder is its root), imported from there."""
    root = Path.cwd()
    if not (root / "tools" / "lab" / f"{name}.py").is_file():
        raise UserError(
            f"lab {action} needs a clone of the repository: run it from the root of one (its tools/lab/ builds the "
            "guide, and a pip install does not carry it); lab recipes and lab facts work anywhere"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"tools.lab.{name}")


def cmd_build(a: argparse.Namespace) -> int:
    if a.jobs < 1 and a.handler is cmd_build:
        raise UserError(f"--jobs {a.jobs}: give 1 or more")
    build, notebooks = clone_tool("build", "build"), clone_tool("build", "notebooks")
    runs = Path(a.runs or (QUICK_RUNS if a.quick else "runs"))
    out = Path(a.out or (QUICK_RUNS / "docs" if a.quick else GUIDE))
    front = FRONT if out == GUIDE else out / "front-page.md"  # the README, filled from the same facts
    build.build(build.TEMPLATES, out, runs, a.quick, a.train, a.cli, front, tuple(a.only), a.jobs, a.plan)
    if out == GUIDE and not a.plan:  # the guide changed: its notebooks follow
        for rel in notebooks.write_all(notebooks.repository()):
            print(f"lab: wrote {rel}")
    return 0


def cmd_verify(a: argparse.Namespace) -> int:
    build, verify = clone_tool("verify", "build"), clone_tool("verify", "verify")
    names = build.used_sources(build.guide_texts(build.TEMPLATES, FRONT))
    unknown = [n for n in a.only if n not in names]
    if unknown:
        raise UserError(f"lab verify --only {unknown[0]}: no page reads it (all: make lab PLAN=1)")
    if a.jobs < 1:
        raise UserError(f"--jobs {a.jobs}: give 1 or more")
    verify.verify(Path.cwd(), GUIDE, Path(a.runs), list(a.only) or names, a.jobs)
    a.train = a.quick = a.plan = False
    a.only, a.out, a.jobs = [], None, 0  # no workers: the pages are filled, nothing is made
    return cmd_build(a)


def cmd_notebooks(a: argparse.Namespace) -> int:
    notebooks = clone_tool("notebooks", "notebooks")
    root = notebooks.repository()
    if a.check:
        stale = notebooks.differing(root)
        for rel in stale:
            print(f"{rel}: not what its sources make; run `make notebooks`")
        return 1 if stale else 0
    written = notebooks.write_all(root)
    print(f"wrote {', '.join(map(str, written))}" if written else "every notebook is what its sources make")
    return 0


def cmd_recipes(a: argparse.Namespace) -> int:
    from tinyformer.lab.recipes import markdown

    print(markdown((a.task,) if a.task else tuple(RECIPES), a.lang), end="")
    return 0


def cmd_facts(a: argparse.Namespace) -> int:
    from tinyformer.lab.placeholders import shown
    from tinyformer.lab.sources import SOURCES, complete, facts

    if a.source not in SOURCES:
        raise UserError(f"unknown source {a.source!r}; known: {', '.join(SOURCES)}")
    source = SOURCES[a.source]
    folder = Path(a.runs) / source.path
    if complete(source, folder) or complete(source, folder, quick=True):
        for key, value in facts(source, folder).items():
            print(f"{key} = {value}")
        return 0
    recorded = committed_facts(a.source)
    if recorded is None:
        raise UserError(f"{folder} is not made yet: {shown(a.source)} makes it")
    machine, values = recorded
    print(f"# {folder} is not made here; the values the guide quotes, from {COMMITTED} (measured on {machine}).")
    print(f"# {shown(a.source)} makes the folder, with every fact it states.")
    for key, value in values.items():
        print(f"{key} = {value}")
    return 0


COMMITTED = GUIDE / "facts.json"


def committed_facts(name: str) -> tuple[str, dict[str, str]] | None:
    """(machine, {fact: value}) of one source as the committed guide recorded them, or None."""
    from tinyformer.lab.guide_facts import read_facts

    if not COMMITTED.is_file():
        return None
    recorded = read_facts(COMMITTED)
    if name not in recorded.get("machines", {}):
        return None
    prefix = f"{name}: "
    values = {k.removeprefix(prefix): v for k, v in recorded.get("values", {}).items() if k.startswith(prefix)}
    return recorded["machines"][name], values
