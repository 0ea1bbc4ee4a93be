"""Staleness by behaviour: a source whose code changed is stale only when what its code makes changed.

The import graph (`tools.lab.stamps.code_of`) is the cheap first filter: a source none of whose code changed
since its stamp is fresh. One whose code did change is checked by what its code *does*: its build at CI size
(the source's `--quick` commands, and those of the sources it reads, one torch thread, into a scratch runs
root) is made again at HEAD, and its *fingerprint* compared with the one its stamped commit made:

- its deterministic facts (`tools.lab.build.deterministic`: not a time, a speed or memory), its tables among
  them, with the scratch root's path replaced by "{runs}";
- the checksum of every safetensors file it trains;
- its printed output (a `stdout` source), less the lines that state a time or a speed.

A fingerprint holds on one CPU kind (`cpu_kind`: the vendor, the kernels torch picks, native bf16 and AMX, the
torch version), where the same code makes the same bits. The stamp keeps its commit's fingerprint on each kind
it was made or checked on (`fingerprints`: kind -> fingerprint); where it has none of this machine's kind (made
before fingerprints, or on other CPUs), the stamped commit's build is made again here, in a scratch worktree of
that commit, and kept beside the others.

Equal fingerprints: the source is *behaviour unchanged*, and its stamp records through which commit
(`verified`), so the next check starts from there. Different: it is stale, and the stamp names what moved
(`moved`: the facts, tables, weights or printed lines that differ at CI size).

What this evidence does not cover: code that only a full-size run reaches (a branch taken past the CI size's
steps, a size that only the real recipe has, a figure drawn from a time). A change there keeps the CI-size
fingerprint and is called unchanged; `make lab TRAIN=1` remakes the figures themselves.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import make_dir, read_text, write_text

DRIVER = r"""
import contextlib, io, json, os, sys, time
from pathlib import Path
tree, runs, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
progress = os.fdopen(int(sys.argv[4]), "w", buffering=1)
sys.path[:] = [tree + "/src", tree] + [p for p in sys.path if p not in ("", ".") and not p.endswith("/src")]
import torch
torch.set_num_threads(1)
import tinyformer
assert tinyformer.__file__.startswith(tree), tinyformer.__file__
import tinyformer.device as device
if hasattr(device, "choose_backend"):  # `auto` takes the first candidate (sdpa), measuring nothing: a timing
    def first(fields, steps, **kw):  # must not pick the kernels whose bits are compared
        return device.BackendChoice(next(iter(steps)), {name: 1.0 for name in steps}, 0.0, "cache")
    device.choose_backend = first
from tinyformer.cli import main
from tinyformer.lab.sources import SOURCES, needs

def make(name):
    marker = Path(runs, ".made", name.replace("/", "--"))
    if marker.exists():
        return
    source = SOURCES[name]
    try:
        wanted = needs(source, True)
    except TypeError:  # a commit from before quick builds could read other sources
        wanted = needs(source)
    for other in wanted:
        make(other)
    folder, began = Path(runs, source.path), time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    for argv in source.argv(True):
        args = [a.replace("{dir}", str(folder)).replace("{runs}", runs) for a in argv]
        print("fingerprint: tinyformer " + " ".join(args), file=sys.stderr, flush=True)
        out = io.StringIO()
        with contextlib.redirect_stdout(out) if source.stdout else contextlib.nullcontext():
            code = main(args)
        if code:
            sys.exit(f"fingerprint: `tinyformer {' '.join(args)}` exited {code}")
        if source.stdout:
            (folder / "stdout.txt").write_text(out.getvalue(), encoding="utf-8")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    progress.write(f"{name}\t{time.monotonic() - began:.1f}\n")

for name in names:
    make(name)
"""


def cpu_kind() -> str:
    """The CPU kind a fingerprint holds on: the same code makes the same bits on every machine of one kind."""
    import torch

    from tinyformer.device import _cpuinfo, cpu_flags

    flags = cpu_flags()
    vendor = (_cpuinfo("vendor_id") or ["unknown vendor"])[0]
    extra = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return " ".join([vendor, torch.backends.cpu.get_cpu_capability(), *extra, f"torch {torch.__version__}"])


def build_at(
    tree: Path, runs: Path, names: list[str], cache: Path, log: Path, made: Callable[[str, float], None] | None = None
) -> subprocess.Popen:
    """Start the CI-size build of `names` (and what they read) with the code of `tree` (a clone or a worktree),
    into `runs`, in a process of its own (returned; `finish` waits for it); what an earlier build into the same
    `runs` made is not made again. `made(name, seconds)` is called as each source is done."""
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "TINYFORMER_CACHE": str(cache),  # one choice of backend for both sides of a comparison
    }
    read, write = os.pipe()
    with open(make_dir(log.parent) / log.name, "a", encoding="utf-8") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(tree), str(runs), json.dumps(names), str(write)],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
        )
    os.close(write)
    process.progress = os.fdopen(read)  # type: ignore[attr-defined]
    process.made = made or (lambda name, seconds: None)  # type: ignore[attr-defined]
    process.what = f"the CI-size build of {', '.join(names)} at {tree}; its output: {log}"  # type: ignore[attr-defined]
    return process


def finish(*processes: subprocess.Popen, jobs: int | None = None, start: list | None = None) -> None:
    """Wait for builds started by `build_at`, reporting each source as it is made, whichever process it comes
    from; `start`: more builds (functions that start one), started as running ones end, `jobs` at a time."""
    import selectors

    waiting, running, failed = list(start or []), list(processes), []
    with selectors.DefaultSelector() as wait:
        while waiting and len(running) < (jobs or 1):
            running.append(waiting.pop(0)())
        for p in running:
            wait.register(p.progress, selectors.EVENT_READ, p)
        while wait.get_map():
            for ready, _ in wait.select():
                line, p = ready.fileobj.readline(), ready.data
                if line:
                    name, seconds = line.rstrip("\n").split("\t")
                    p.made(name, float(seconds))
                    continue
                wait.unregister(p.progress)
                p.progress.close()
                if p.wait():
                    failed.append(p)
                if waiting and not failed:
                    more = waiting.pop(0)()
                    wait.register(more.progress, selectors.EVENT_READ, more)
    if failed:
        raise UserError(f"lab verify: {failed[0].what} failed (exit {failed[0].returncode})")


TIMED = re.compile(r"\d\s*(s|ms|sec|seconds|min|minutes)\b|/s\b|per second|tokens/s|it/s|\d+(\.\d+)?x\b", re.I)
MEMORY = re.compile(r"\d\s*(KiB|MiB|GiB|KB|MB|GB)\b")


def measured(value: object) -> bool:
    """A fact whose value states a time or a memory size measures the machine, whatever its name says (a table's
    cell "0.22 ms / 10 MiB"): two builds can agree on one by chance and then call the code moved."""
    return bool(TIMED.search(str(value)) or MEMORY.search(str(value)))


def fingerprint(name: str, runs: Path) -> dict:
    """What source `name`'s CI-size build under `runs` makes, less what measures the machine: its deterministic
    facts, the checksums of its weights and its printed lines (see the module docstring)."""
    from tinyformer.lab.sources import SOURCES, facts
    from tools.lab.build import deterministic

    source = SOURCES[name]
    folder = runs / source.path
    root = str(runs.resolve())
    known = {
        k: v.replace(root, "{runs}").replace(str(runs), "{runs}")
        for k, v in facts(source, folder).items()
        if k != "machine" and deterministic(f"{name}: {k}") and not measured(v)
    }
    weights = {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(folder.rglob("*.safetensors"))
    }
    printed = {}
    if source.stdout and (folder / "stdout.txt").is_file():
        lines = read_text(folder / "stdout.txt").replace(root, "{runs}").splitlines()
        printed = {f"line {i + 1}": line for i, line in enumerate(lines) if not TIMED.search(line)}
    return {"kind": cpu_kind(), "facts": known, "weights": weights, "printed": printed}


def moved(old: dict, new: dict) -> list[str]:
    """What differs between two fingerprints: 'fact KEY', 'weights FILE', 'printed line N' (an entry only one of
    them has counts as moved)."""
    from tools.lab.build import deterministic

    out = []
    for part, label in (("facts", "fact"), ("weights", "weights"), ("printed", "printed")):
        a, b = old.get(part, {}), new.get(part, {})
        # a fingerprint kept from before the lab told a fact measured the machine is read as it would be now
        keys = [
            k
            for k in sorted(set(a) | set(b))
            if part != "facts"
            or (deterministic(f"source: {k}") and not measured(a.get(k, "")) and not measured(b.get(k, "")))
        ]
        out += [f"{label} {k}" for k in keys if a.get(k) != b.get(k)]
    return out


def worktree(root: Path, commit: str, scratch: Path) -> Path:
    """A scratch checkout of `commit` (made once under `scratch`, reused by later calls)."""
    tree = scratch / "trees" / commit
    if (tree / "src" / "tinyformer").is_dir():
        return tree
    make_dir(tree.parent)
    done = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", "--force", str(tree), commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise UserError(f"lab verify: cannot check out {commit} ({done.stderr.strip()[:200]})")
    return tree


def drop_worktrees(root: Path, scratch: Path) -> None:
    for tree in sorted((scratch / "trees").glob("*")) if (scratch / "trees").is_dir() else []:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True)
    subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True)


def scratch_root(runs: Path) -> Path:
    return make_dir(runs / "lab-verify")


def made_now(root: Path, runs: Path, name: str) -> dict:
    """The fingerprint of source `name` at the code of the clone `root` as it stands: taken when the source is
    made (`tools.lab.build.produce`), for its stamp. Builds of one commit share a scratch root (one at a time:
    the hour makes sources side by side); a tree with uncommitted changes gets a fresh one."""
    import fcntl

    from tools.lab.stamps import git

    scratch = scratch_root(runs).resolve()
    dirty = git(root, "status", "--porcelain", "--", "src", "configs", "tools")
    place = (
        Path(tempfile.mkdtemp(dir=scratch, prefix="made-dirty-"))
        if dirty
        else scratch / "made" / str(git(root, "rev-parse", "--short=10", "HEAD"))
    )
    with open(scratch / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        finish(build_at(root, place, [name], scratch / "cache", scratch / "logs" / "made.log"))
    return fingerprint(name, place)


# ---- the check: every source whose code changed, made again at CI size here and at its stamped commit ----
def to_check(root: Path, stamps: dict[str, dict], names: list[str]) -> tuple[list[str], dict[str, str]]:
    """(the sources among `names` whose code changed since their stamp or last check, or whose last check found
    them moved, {source: why the others need no build}: its code unchanged, or no stamp to compare with)."""
    from tinyformer.lab.sources import SOURCES
    from tools.lab.stamps import changed_since, code_of

    todo, skipped = [], {}
    for name in names:
        record = stamps.get(name, {})
        since = record.get("checked", {}).get("commit") or record.get("commit")
        changed = changed_since(root, {"commit": since}, code_of(SOURCES[name].argv(False))) if since else None
        if changed is None:
            skipped[name] = "not stamped, or its commit is not in this clone: nothing to compare with"
        elif not changed and not record.get("checked", {}).get("moved"):  # one found moved: checked again
            skipped[name] = f"its code is unchanged since {since[:7]}"
        else:
            todo.append(name)
    return todo, skipped


def check(root: Path, stamps: dict[str, dict], names: list[str], scratch: Path, jobs: int = 2) -> dict[str, dict]:
    """Check `names` (sources whose code changed): {source: its new `checked` record} (see the module docstring),
    building at HEAD and, where the stamp holds no fingerprint of this kind, at the stamped commit, `jobs`
    builds at a time (the longest first, by the seconds each source's last CI-size build took)."""
    from tools.lab.stamps import git

    head, kind = git(root, "rev-parse", "--short=10", "HEAD"), cpu_kind()
    at: dict[str, list[str]] = {"HEAD": list(names)}  # where -> the sources to build there
    for name in names:
        if kind not in stamps[name].get("fingerprints", {}):
            at.setdefault(stamps[name]["commit"], []).append(name)
    cost = {n: stamps[n].get("fingerprints", {}).get(kind, {}).get("seconds", 15.0) for n in names}
    left, began, seconds = [sum(map(len, at.values()))], time.monotonic(), {}

    def made(where: str) -> Callable[[str, float], None]:
        def report(name: str, took: float) -> None:
            if name in at[where]:  # not a source it reads only to make one of them
                left[0] -= 1
                seconds[where, name] = took
            print(
                f"lab verify: {name} made at {where[:7]} (CI size) in {took:.0f} s; "
                f"{left[0]} builds left, {time.monotonic() - began:.0f} s so far",
                flush=True,
            )

        return report

    for old in scratch.glob("head-*"):  # another commit's builds: a source made there is not made here
        if not old.name.startswith(f"head-{head}"):
            shutil.rmtree(old)
    trees = {where: root if where == "HEAD" else worktree(root, where, scratch) for where in at}
    for step in (0, 1):  # first what other sources read, then the rest, side by side once what they read is made
        units = []  # (seconds, where, sources that read none of another unit's)
        for where, wanted in at.items():
            for group in rounds(wanted)[step]:
                units.append((sum(cost.get(n, 15.0) for n in group), where, group))
        starts = []
        for i, (_, where, group) in enumerate(sorted(units, key=lambda u: -u[0])):
            runs, log = (
                scratch / (f"head-{head}" if where == "HEAD" else where),
                scratch / "logs" / f"{where[:10]}-{step}{i}.log",
            )
            starts.append(functools.partial(build_at, trees[where], runs, group, scratch / "cache", log, made(where)))
        finish(jobs=jobs, start=starts)
    out = {}
    for name in names:
        before = stamps[name].get("fingerprints", {}).get(kind)
        if name in at.get(stamps[name]["commit"], ()):
            before = fingerprint(name, scratch / stamps[name]["commit"]) | {"seconds": seconds.get(("HEAD", name))}
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        new = fingerprint(name, scratch / f"head-{head}")
        out[name] = {"commit": head, "date": date, "kind": kind, "moved": moved(before, new), "fingerprint": before}
    return again(root, out, scratch, jobs, head)


def again(root: Path, out: dict[str, dict], scratch: Path, jobs: int, head: str) -> dict[str, dict]:
    """The sources whose fingerprint moved, built a second time at HEAD: what differs between HEAD's two builds
    measures the machine, not the code, and is not evidence (a time a table gives without naming it one). A
    source whose weights differ between the two (its training reads the clock: a `--time` budget) cannot be
    checked by behaviour, and is left out of the result (it stays stale while its code has changed)."""
    suspects = [n for n, r in out.items() if r["moved"]]
    if not suspects:
        return out
    print(f"lab verify: {len(suspects)} moved; each is built at HEAD once more to tell code from clock", flush=True)
    report = lambda name, took: print(f"lab verify: {name} made again at HEAD in {took:.0f} s", flush=True)  # noqa: E731
    runs = scratch / f"head-{head}-again"
    finish(
        jobs=jobs,
        start=[
            functools.partial(build_at, root, runs, g, scratch / "cache", scratch / "logs" / f"again-{i}.log", report)
            for i, g in enumerate(apart(suspects))
        ],
    )
    for name in suspects:
        unstable = set(moved(fingerprint(name, scratch / f"head-{head}"), fingerprint(name, runs)))
        if any(m.startswith("weights ") for m in unstable):
            print(
                f"lab verify: {name}: cannot be checked by behaviour: its CI-size build is not the same twice "
                f"({'; '.join(sorted(unstable)[:3])})",
                flush=True,
            )
            del out[name]
        else:
            out[name]["moved"] = [m for m in out[name]["moved"] if m not in unstable]
    return out


def apart(names: list[str], made: frozenset[str] = frozenset()) -> list[list[str]]:
    """`names` in groups that share no source they read (with `tinyformer.lab.sources.needs`; what is in `made`
    is there already), so each group can be built on its own, beside the others, into one runs root."""
    groups: list[tuple[set[str], list[str]]] = []
    for name in names:
        mine, wanted = reads(name, made), [name]
        for g in [g for g in groups if g[0] & mine]:
            groups.remove(g)
            mine, wanted = mine | g[0], g[1] + wanted
        groups.append((mine, wanted))
    return [wanted for _, wanted in groups]


def reads(name: str, made: frozenset[str] = frozenset()) -> set[str]:
    """`name` and every source it reads, at any depth, but those in `made` (and what only they read)."""
    from tinyformer.lab.sources import SOURCES, needs

    found = {name}
    for other in needs(SOURCES[name], True):
        found |= reads(other, made) if other not in made else set()
    return found


def rounds(names: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    """(groups of the sources that another of `names` reads, groups of the rest): the second round's groups
    read only what the first made, so a slow study and its neighbours that read the same run go side by side."""
    read = frozenset(n for name in names for n in reads(name) if n != name)
    first = [n for n in names if n in read] + sorted(read - set(names))
    return apart(first), apart([n for n in names if n not in read], read)


def verify(root: Path, docs: Path, runs: Path, names: list[str], jobs: int = 2) -> dict[str, dict]:
    """`make lab VERIFY=1`: check every source of `names` whose code changed since its stamp (or last check) by
    its behaviour at CI size, and record the outcome in the stamps (docs/lab/facts.json, and the source's
    lab.json under `runs` when it holds the same stamp); returns {source: its `checked` record}. The pages are
    rendered afterwards from those stamps (`tools.lab.build.build`)."""
    from tinyformer.lab.guide_facts import read_facts
    from tinyformer.lab.sources import SOURCES, read_json
    from tools.lab.stamps import git

    if git(root, "status", "--porcelain", "--", "src", "configs", "tools"):
        raise UserError("lab verify checks HEAD: commit the changes to src/, configs/ and tools/ first")
    facts_file = docs / "facts.json"
    facts = read_facts(facts_file) if facts_file.is_file() else {}
    stamps = facts.get("stamps", {})
    todo, skipped = to_check(root, stamps, names)
    for name, why in skipped.items():
        print(f"lab verify: {name}: fresh, {why}", flush=True)
    print(
        f"lab verify: {len(todo)} of {len(names)} sources changed code since they were made or checked: "
        "each is built at CI size here and at its stamped commit",
        flush=True,
    )
    scratch = scratch_root(runs).resolve()
    try:
        found = check(root, stamps, todo, scratch, jobs) if todo else {}
    finally:
        drop_worktrees(root, scratch)
    for name in set(todo) - set(found):  # could not be checked: stale while its code changed (`stale_of`)
        stamps[name].pop("checked", None)
    for name, record in found.items():
        stamps[name].setdefault("fingerprints", {})[record["kind"]] = record.pop("fingerprint")
        stamps[name]["checked"] = record
        verdict = f"stale, moved: {'; '.join(record['moved'][:5])}" if record["moved"] else "behaviour unchanged"
        print(f"lab verify: {name}: {verdict}", flush=True)
        local = runs / SOURCES[name].stamp
        if local.is_file() and read_json(local).get("commit") == stamps[name]["commit"]:
            write_text(local, json.dumps(stamps[name], indent=2) + "\n")
    if todo:
        write_text(facts_file, json.dumps(facts, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    return found
