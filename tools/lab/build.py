"""`tinyformer lab build`: the lab guide's pages, with every measured number and figure read from the runs.

The build runs in two steps, so no measured number on a page is typed. First each placeholder of the
templates (`tools.lab.render`) is read from its source folder (`tinyformer.lab.sources`) into
`docs/lab/facts.json`, with the machine each source ran on, and the figures are copied next to it. Then
the pages are rendered from that file alone. A test renders them again from the committed facts and
requires the committed pages, so a page edited by hand, or a template changed without a rebuild, fails.

A source that `runs/` does not hold keeps the values the last build recorded (the committed guide), so
a learner who has run one study updates that study's numbers and loses none of the others. Nothing is
written unless every placeholder resolved: a failed build leaves the guide as it was.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tinyformer import interrupt
from tinyformer.errors import UserError
from tinyformer.files import make_dir, read_text, write_text
from tinyformer.lab.guide_facts import read_facts
from tinyformer.lab.placeholders import PLACEHOLDER, command_text, key, made_text, shown
from tinyformer.lab.sources import SOURCES, Source, complete, facts, inputs_ready, needs, shown_value
from tinyformer.runfolder import STATE, is_run
from tools.lab import plan
from tools.lab.render import FRONT, Page, front_page, index, leftovers, render, templates, typed_numbers
from tools.lab.stamps import changed_since, code_of, read_stamp, repository, stamp
from tools.lab.verify import made_now

TEMPLATES = Path("docs/lab/templates")  # from the root of the clone: the pages' templates and the README's


@dataclass
class Found:
    values: dict[str, str] = field(default_factory=dict)  # placeholder -> its text on the page
    machines: dict[str, str] = field(default_factory=dict)  # source -> the machine its numbers come from
    stamps: dict[str, dict] = field(default_factory=dict)  # source -> its stamp (`tools.lab.stamps`)
    stale: dict[str, list[str]] = field(default_factory=dict)  # source -> files of its code changed since
    made: plan.Outcome | None = None  # what this build made, when it made anything
    missing: list[str] = field(default_factory=list)  # sources neither measured now nor before
    copies: list[tuple[Path, str]] = field(default_factory=list)  # figure file -> its path under figures/
    errors: list[str] = field(default_factory=list)
    unsized: list[str] = field(default_factory=list)  # quick: keys the tiny runs lack (a size, a length)
    front: tuple[Path, str] | None = None  # the front page (README.md) and its text
    same: list[str] = field(default_factory=list)  # sources made again at the code of their last stamp ...
    unreproduced: dict[str, list[str]] = field(default_factory=dict)  # ... whose deterministic facts moved: old, new


def produce(
    source: Source, runs: Path, quick: bool, cli: Callable[[list[str]], int], speed: float | None = None
) -> None:
    """Run the source's commands into its folder with `cli`, the CLI's own entry point (`tinyformer.cli.main`,
    passed in by the command: the lab sits below the CLI and imports nothing of it), then stamp the folder
    with the commit, the date, the machine, the wall time and `speed` (this machine's calibration)."""
    from tinyformer.device import machine

    folder, began = make_dir(runs / source.path), time.monotonic()
    for argv in source.argv(quick):
        if source.done == STATE and is_run(folder):
            argv = [*argv[:2], "--resume", "{dir}"]  # an interrupted run continues where it stopped
        line = command_text(argv, str(runs), str(folder))
        print(f"lab: tinyformer {line}", flush=True)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured) if source.stdout else contextlib.nullcontext():
            code = cli([a.replace("{dir}", str(folder)).replace("{runs}", str(runs)) for a in fill_nanogpt(argv)])
        if code in (130, 143):  # stopped by SIGINT or SIGTERM (`tinyformer.interrupt`): the build stops too
            raise interrupt.Stopped(code - 128)
        if code:
            raise UserError(f"lab: `tinyformer {line}` failed with exit code {code}")
        if source.stdout:
            write_text(folder / "stdout.txt", captured.getvalue())
    m, wall, root = machine(), time.monotonic() - began, repository(Path.cwd())
    where = f"{m['cpu']}, {m['gpu'] or 'no GPU'}, torch {m['torch']}"
    fingerprint = made_now(root, runs, source.name) if root and not quick else None  # its behaviour at CI size
    stamp(runs / source.stamp, root, wall, speed, where, fingerprint)


NANOGPT = "TINYFORMER_NANOGPT"  # the environment variable that names a nanoGPT checkout ("{nanogpt}" in a command)


def fill_nanogpt(argv: list[str]) -> list[str]:
    """`argv` with "{nanogpt}" replaced by the checkout $TINYFORMER_NANOGPT names, or a UserError saying how."""
    if "{nanogpt}" not in argv:
        return argv
    checkout = os.environ.get(NANOGPT, "")
    if not checkout:
        raise UserError(
            f"lab: `tinyformer {' '.join(argv[:2])}` runs nanoGPT beside ours: clone it "
            "(git clone https://github.com/karpathy/nanoGPT ~/nanoGPT) and name it: NANOGPT=~/nanoGPT on make's "
            f"line, {NANOGPT}=~/nanoGPT for `tinyformer lab build`"
        )
    folder = Path(checkout).expanduser()
    if not (folder / "train.py").is_file():
        raise UserError(f"lab: {NANOGPT}={checkout!r}: no nanoGPT checkout there (its train.py)")
    return [str(folder) if a == "{nanogpt}" else a for a in argv]


def guide_texts(source: Path, front: Path | None) -> dict[Path, str]:
    """The pages' templates in `source`, and the front page's (`source/README.md`) when `front` is asked for."""
    texts = templates(source)
    if front is not None and (source / FRONT).is_file():
        texts[source / FRONT] = read_text(source / FRONT)
    return texts


def used_sources(texts: dict[Path, str]) -> list[str]:
    """The sources the templates quote, and those they read (the bake-off's masked LM, which no page quotes but
    three studies start from): what a build makes, stamps and plans."""
    names = {m.group(2) for text in texts.values() for m in PLACEHOLDER.finditer(text)}
    unknown = sorted(names - set(SOURCES))
    if unknown:
        raise UserError(f"lab: templates name unknown sources {unknown}; known: {', '.join(SOURCES)}")
    todo = list(names)
    while todo:
        for name in needs(SOURCES[todo.pop()]):
            if name not in names:
                names.add(name)
                todo.append(name)
    return [n for n in SOURCES if n in names]  # in the registry's order: a run comes before what reads it


def measure(
    texts: dict[Path, str],
    runs: Path,
    quick: bool,
    train: bool,
    cli=None,
    only: tuple[str, ...] = (),
    jobs: int = 1,
    previous: dict | None = None,
    dry: bool = False,
) -> tuple[dict[str, dict[str, str]], plan.Outcome | None]:
    """({source: its facts} for every source the templates use that `runs` holds, what was made): the sources
    asked for (`only`, else with `train` every one, else the cheap ones whose runs exist) are made first,
    `jobs` at a time, after a plan; `dry` prints the plan and makes nothing."""
    names = used_sources(texts)
    unknown = [n for n in only if n not in names]
    if unknown:
        close = [n for n in names if unknown[0].split("/")[-1] in n][:5] or names[:5]
        raise UserError(
            f"lab: --only {unknown[0]}: no page reads it; sources like: {', '.join(close)} (all: make lab PLAN=1)"
        )
    todo, left = [], []
    for name in names:
        source, folder = SOURCES[name], runs / SOURCES[name].path
        every = quick or (train and not source.extra)  # the hour's build: every source but the extras
        wanted = name in only if only else every or (source.cheap and inputs_ready(source, runs))
        wanted = wanted and jobs > 0  # no workers (`lab verify`): make nothing, fill the pages from what is there
        if wanted and not complete(source, folder, quick):
            todo.append(name)
        elif train and not quick and not only and source.extra and not complete(source, folder):
            left.append(name)
    for name in left:
        print(f"lab: not in this build: {name} ({SOURCES[name].extra}); to make it: {remake(name, fresh=False)}")
    for name in todo:  # a missing nanoGPT checkout is said before anything starts
        for argv in SOURCES[name].argv(quick):
            fill_nanogpt(argv)
    outcome = make(todo, runs, quick, cli, jobs, (previous or {}).get("stamps", {}), dry) if todo else None
    found = {}
    for name in names:
        source, folder = SOURCES[name], runs / SOURCES[name].path
        if complete(source, folder, quick):
            found[name] = facts(source, folder)
        elif quick and not dry:
            raise UserError(f"lab: {name} is incomplete after its commands")
    return found, outcome


def make(
    todo: list[str], runs: Path, quick: bool, cli, jobs: int, recorded: dict[str, dict], dry: bool = False
) -> plan.Outcome | None:
    """Plan the sources in `todo` from their last stamps (in `runs`, else `recorded`) and this machine's
    calibrated speed, print the plan, then make them `jobs` at a time (see `tools.lab.plan`)."""
    if cli is None:
        raise ValueError("lab: making a source needs the CLI's entry point (build(..., cli=main))")
    speed = plan.calibrate_in_worker(jobs, 0.3 if quick else plan.CALIBRATION_SECONDS)
    work, unscaled = [], 0
    for name in todo:
        record = read_stamp(runs / SOURCES[name].stamp) or recorded.get(name, {})
        wanted = tuple(n for n in needs(SOURCES[name], quick))
        work.append(plan.Job(name, wanted, plan.estimate(record, speed), SOURCES[name].alone))
        unscaled += bool(record.get("speed")) and record.get("calibration") != plan.CALIBRATION
    for line in plan.plan_lines(work, jobs, speed):
        print(line, flush=True)
    if unscaled:
        print(
            f"lab: {unscaled} of these are stamped wall times, not scaled to this machine: their stamps were "
            "calibrated on an older workload",
            flush=True,
        )
    if dry:
        return None
    logs = (lambda name: runs / "lab-logs" / f"{name.replace('/', '--')}.log") if jobs > 1 else None
    outcome = plan.run_jobs(work, lambda name: produce(SOURCES[name], runs, quick, cli, speed), jobs, logs, speed)
    for m in outcome.failed:
        print(f"lab: {m.name} failed (exit {m.code}){f'; its output: {m.log}' if m.log else ''}")
    if outcome.skipped:
        print(f"lab: not started, as something they read failed: {', '.join(outcome.skipped)}")
    return outcome


def resolve(
    texts: dict[Path, str], found: dict, runs: Path, previous: dict, quick: bool, root: Path | None = None
) -> Found:
    """Every placeholder's value: measured now, else as the last build recorded it, else missing. A source's
    `made` fact is its stamp's commit and date, marked stale when its code (in the repository `root`) changed."""
    out = Found()
    before, names = previous.get("machines", {}), used_sources(texts)
    for name in names:
        if name in found:
            out.stamps[name] = read_stamp(runs / SOURCES[name].stamp)
        elif name in before:
            out.stamps[name] = previous.get("stamps", {}).get(name, {})
    for name, record in out.stamps.items():
        changed = stale_of(root, name, record)
        if changed:
            out.stale[name] = changed
        last = previous.get("stamps", {}).get(name, {})
        if name in found and last and last != record and not record.get("dirty") and not last.get("dirty"):
            if changed_since(root, last, code_of(SOURCES[name].argv(False))) == []:
                out.same.append(name)  # made again, and its code is what made the facts of the last build
    for path, text in texts.items():
        for m in PLACEHOLDER.finditer(text):
            name = m.group(2)
            if m.group(3).strip() == "made" and not m.group(1) and name in out.stamps:
                out.values[key(m)] = made_text(out.stamps[name], out.stale.get(name))
            elif name in found:
                try:
                    out.values[key(m)] = _value(m, found[name], runs / SOURCES[name].path, quick, out)
                except UserError as e:
                    out.errors.append(f"{path.parent.name}/{path.name}: {e}")
            elif name in before and key(m) in previous["values"]:
                out.values[key(m)] = previous["values"][key(m)]
    for name in names:
        if name in found or name in before:
            out.machines[name] = found[name]["machine"] if name in found else before[name]
        else:
            out.missing.append(name)
    out.unreproduced = unreproduced(previous.get("values", {}), out.values, out.same)
    return out


def stale_of(root: Path | None, name: str, record: dict) -> list[str] | None:
    """Why source `name`'s facts (its stamp: `record`) are stale: the files of its code changed since it was made,
    or since its last check by behaviour (`tools.lab.verify`), else what that check found moved; [] when
    neither, None when it cannot be told (see `changed_since`)."""
    checked = record.get("checked", {})
    changed = changed_since(root, record | checked, code_of(SOURCES[name].argv(False)))
    return changed or checked.get("moved") or changed


MOVED = ("fact ", "weights ", "printed ")  # what `tools.lab.verify.moved` names, where a file path would be


MEASURED = re.compile(  # a fact that measures the machine (a time, a speed, memory), not the computation
    r"(?<![\w'])(s|ms|sec|seconds|min|minutes)(?![\w'])|_ms\b|_s\b|per_s|/s\b|ms/token|time|speed|faster|slower"
    r"|seconds|\b(MB|MiB|GB|MFU|memory|wall|share|ratio|machine|made|date)\b|\d\.?\d*x\b"
    r"|_(mb|share)\b|peak|measurements|crossover",
    re.IGNORECASE,
)


def deterministic(key: str) -> bool:
    """Whether the fact `key` ("SOURCE: FACT") is the computation's alone, the same on every rebuild of the same
    code on the same machine: not a figure or a text (they show times), not a time, a speed or memory."""
    name, _, fact = key.partition(": ")
    return not name.startswith(("fig ", "text ")) and not MEASURED.search(fact)


def unreproduced(before: dict[str, str], now: dict[str, str], sources: list[str]) -> dict[str, list[str]]:
    """The deterministic facts of `sources` (made again at the same code) whose value moved: key -> [old, new]."""
    return {
        k: [before[k], v]
        for k, v in now.items()
        if k.partition(": ")[0] in sources and deterministic(k) and k in before and before[k] != v
    }


def _value(m, known: dict[str, str], folder: Path, quick: bool, out: Found) -> str:
    kind, name, fact, spec = m.group(1), m.group(2), m.group(3).strip(), m.group(4)
    if kind:
        path = folder / fact
        if not path.is_file():
            raise UserError(f"{path} is missing: the {name} commands should have written it")
        if kind == "text":
            return read_text(path).strip("\n") or "(empty)"
        out.copies.append((path, f"{name}/{fact}"))
        return f"../figures/{name}/{fact}"
    if fact not in known and quick:  # a row or column named by a size (a context, a length) the tiny runs lack
        out.unsized.append(key(m))
        return "?"
    return shown_value(known, name, fact, spec)


def build(
    source: Path,
    docs: Path,
    runs: Path,
    quick: bool = False,
    train: bool = False,
    cli=None,
    front: Path | None = None,
    only: tuple[str, ...] = (),
    jobs: int = 1,
    dry: bool = False,
) -> tuple[list[Page], Found]:
    """Templates in `source` -> pages, figures and facts.json in `docs`, from the sources under `runs`; `cli`
    (`tinyformer.cli.main`) runs the commands of the sources to make (`only` these, `jobs` at a time; `dry`:
    print the plan and stop). `front`: where the front page (`source/README.md`, the project's README) goes,
    filled from the same facts."""
    texts = templates(source)
    everything = guide_texts(source, front)
    front_template = everything.get(source / FRONT)
    typed = [f"{p.parent.name}/{p.name}: {n}" for p, t in everything.items() for n in typed_numbers(t)]
    if typed:
        raise UserError(f"lab: results typed into templates (use a placeholder): {'; '.join(typed[:10])}")
    _check_out(docs)
    previous = read_facts(docs / "facts.json") if (docs / "facts.json").is_file() and not quick else {}
    found, made = measure(everything, runs, quick, train, cli, only, jobs, previous, dry)
    if dry:
        return [], Found()
    got = resolve(everything, found, runs, previous, quick, repository(source))
    got.made = made
    if made is not None and (made.made or made.failed):
        print(f"lab: report card: {plan.card(made, {n: headline(n, found[n]) for n in found}, runs)}")
    pages = render(texts, got.values)
    got.errors += leftovers(pages)
    if front_template is not None:
        got.front = (front, front_page(front_template, got.values))
    for line in got.errors:
        print(line)
    if got.same:
        checked = [k for k in got.values if k.partition(": ")[0] in got.same and deterministic(k)]
        print(
            f"lab: made again at the same code: {len(got.same)} sources; of their {len(checked)} deterministic facts, "
            f"{len(checked) - len(got.unreproduced)} are identical"
            + "".join(
                f"\nlab: NOT REPRODUCED {k}: was {old!r}, now {new!r}" for k, (old, new) in got.unreproduced.items()
            )
        )
    if got.errors:
        raise UserError(f"lab: {len(got.errors)} placeholders could not be filled (listed above); nothing written")
    write(docs, pages, got, previous)
    for p in pages:
        print(
            f"lab: {p.lang}/{p.name}: {p.items} items ({p.items - p.own} the course's, {p.own} tinyformer's own), "
            f"{p.answered} answered with a command and every value"
        )
    for name in got.missing:
        print(f"lab: {name}: not measured yet ({shown(name)})")
    for name, changed in got.stale.items():
        what = ", ".join(changed[:3]) + (" and more" if len(changed) > 3 else "")
        why = f"its CI-size build moved ({what})" if changed[0].startswith(MOVED) else f"since then {what} changed"
        print(f"lab: stale: {name}, made at {got.stamps[name]['commit'][:7]}; {why}; to make it again: {remake(name)}")
    unstamped = [n for n, record in got.stamps.items() if not record.get("commit")]
    if unstamped:
        print(
            f"lab: {len(unstamped)} sources were made before the lab stamped its facts: {', '.join(unstamped[:5])}..."
        )
    return pages, got


HEADLINES = ("exact match", "best val loss", "val loss", "test accuracy", "F1", "speedup", "ms")


def remake(name: str, fresh: bool = True) -> str:
    """How to make a source (`fresh`: again, a complete one: remove what completes it first): one source."""
    source = SOURCES[name]
    what = source.path if source.done == STATE else f"{source.path}/{source.done}"
    nanogpt = " NANOGPT=~/nanoGPT" if any("{nanogpt}" in argv for argv in source.argv(False)) else ""
    return f"{f'rm -r runs/{what} && ' if fresh else ''}make lab ONLY={name}{nanogpt}"


def headline(name: str, known: dict[str, str]) -> str:
    """One figure that sums a source up on the report card: a run's exact match or best loss, else the first
    table cell (in the report's order) whose column names a score or a time, else nothing."""
    for fact in ("final val exact_match", "best val loss"):
        if fact in known:
            return f"{fact} {known[fact]}"
    cells = [k for k in known if " / " in k and not k.startswith("table ") and ", " not in k.split(" / ")[0]]
    for word in HEADLINES:
        cell = next((k for k in cells if re.search(rf"\b{word}\b", k.split(" / ")[1])), None)
        if cell:
            return f"{cell}: {known[cell]}"
    return ""


def _check_out(docs: Path) -> None:
    if docs.is_dir() and any(docs.iterdir()) and not (docs / "facts.json").is_file():
        raise UserError(f"lab: {docs} holds other files and no facts.json: give --out an empty or a lab folder")


NUMBER = re.compile(r"-?\d+\.\d+(?:e-?\d+)?")


def same_in_substance(old: Path, new: Path, tolerance: float = 1.5e-4) -> bool:
    """The same file, or a text file (the HTML explorer, a report) whose decimals differ by at most `tolerance`
    and nothing else: one weight rounded the other way by another CPU is not a change worth a commit."""
    a, b = old.read_bytes(), new.read_bytes()
    if a == b:
        return True
    if new.suffix not in (".html", ".json", ".md", ".txt"):
        return False
    try:
        x, y = a.decode("utf-8"), b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    u, v = NUMBER.findall(x), NUMBER.findall(y)
    if NUMBER.sub("#", x) != NUMBER.sub("#", y) or len(u) != len(v):
        return False
    return all(abs(float(p) - float(q)) <= tolerance for p, q in zip(u, v))


def write(docs: Path, pages: list[Page], got: Found, previous: dict | None = None) -> None:
    """The figures the pages embed (and no others), facts.json, the pages and their index."""
    figures = make_dir(docs / "figures")
    for path, rel in got.copies:
        target = make_dir((figures / rel).parent) / Path(rel).name
        if not (target.is_file() and same_in_substance(target, path)):
            shutil.copyfile(path, target)
    embedded = {v.removeprefix("../figures/") for v in got.values.values() if v.startswith("../figures/")}
    for path in [p for p in figures.rglob("*") if p.is_file()]:
        if path.relative_to(figures).as_posix() not in embedded:
            path.unlink()  # a figure no page embeds any more
    last = (previous or {}).get("build")  # the last build that made every source (the guide's total)
    hour = {n for n in got.stamps if not SOURCES[n].extra}  # what `--train` makes: every source but the extras
    if got.made is not None and hour <= {m.name for m in got.made.made}:
        last = plan.summary(got.made) | {"date": max(got.stamps[m.name].get("date", "") for m in got.made.made)}
    facts_json = {"machines": got.machines, "missing": got.missing, "values": got.values}
    facts_json |= {"stamps": got.stamps, "stale": got.stale}
    facts_json |= {"measured": sorted(k for k in got.values if not deterministic(k))}  # the rest: deterministic
    facts_json |= {"build": last} if last else {}
    write_text(docs / "facts.json", json.dumps(facts_json, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    for page in pages:
        write_text(make_dir(docs / page.lang) / page.name, page.text)
    write_text(docs / "README.md", index(pages, facts_json))
    if got.front is not None:
        write_text(*got.front)
