"""`tinyformer lab build`: the lab guide's pages, with every measured number and figure read from the runs.

The build runs in two steps, so no measured number on a page is typed. First each placeholder of the
templates (`tinyformer.lab.render`) is read from its source folder (`tinyformer.lab.sources`) into
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
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import make_dir, read_text, write_text
from tinyformer.lab.render import (
    FRONT,
    PLACEHOLDER,
    Page,
    command_text,
    front_page,
    index,
    key,
    leftovers,
    render,
    shown,
    templates,
    typed_numbers,
)
from tinyformer.lab.sources import SOURCES, Source, complete, facts, inputs_ready, read_json, record_machine
from tinyformer.train import checkpoint as ckpt


@dataclass
class Found:
    values: dict[str, str] = field(default_factory=dict)  # placeholder -> its text on the page
    machines: dict[str, str] = field(default_factory=dict)  # source -> the machine its numbers come from
    missing: list[str] = field(default_factory=list)  # sources neither measured now nor before
    copies: list[tuple[Path, str]] = field(default_factory=list)  # figure file -> its path under figures/
    errors: list[str] = field(default_factory=list)
    unsized: list[str] = field(default_factory=list)  # quick: keys the tiny runs lack (a size, a length)
    front: tuple[Path, str] | None = None  # the front page (README.md) and its text


def produce(source: Source, runs: Path, quick: bool, cli: Callable[[list[str]], int]) -> None:
    """Run the source's commands into its folder with `cli`, the CLI's own entry point (`tinyformer.cli.main`,
    passed in by the command: the lab sits below the CLI and imports nothing of it)."""
    folder = make_dir(runs / source.path)
    for argv in source.argv(quick):
        if source.done == ckpt.STATE and ckpt.is_run(folder):
            argv = [*argv[:2], "--resume", "{dir}"]  # an interrupted run continues where it stopped
        line = command_text(argv, str(runs), str(folder))
        print(f"lab: tinyformer {line}", flush=True)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured) if source.stdout else contextlib.nullcontext():
            code = cli([a.replace("{dir}", str(folder)).replace("{runs}", str(runs)) for a in argv])
        if code == 130:
            raise KeyboardInterrupt
        if code:
            raise UserError(f"lab: `tinyformer {line}` failed with exit code {code}")
        if source.stdout:
            write_text(folder / "stdout.txt", captured.getvalue())
    record_machine(folder)


def used_sources(texts: dict[Path, str]) -> list[str]:
    names = {m.group(2) for text in texts.values() for m in PLACEHOLDER.finditer(text)}
    unknown = sorted(names - set(SOURCES))
    if unknown:
        raise UserError(f"lab: templates name unknown sources {unknown}; known: {', '.join(SOURCES)}")
    return [n for n in SOURCES if n in names]  # in the registry's order: a run comes before what reads it


def measure(texts: dict[Path, str], runs: Path, quick: bool, train: bool, cli=None) -> dict[str, dict[str, str]]:
    """{source: its facts} for every source the templates use that `runs` holds (made first, when asked)."""
    found = {}
    for name in used_sources(texts):
        source, folder = SOURCES[name], runs / SOURCES[name].path
        wanted = quick or train or (source.cheap and inputs_ready(source, runs))
        if wanted and not complete(source, folder, quick):
            if cli is None:
                raise ValueError("lab: making a source needs the CLI's entry point (build(..., cli=main))")
            produce(source, runs, quick, cli)
        if complete(source, folder, quick):
            found[name] = facts(source, folder)
        elif quick:
            raise UserError(f"lab: {name} is incomplete after its commands")
    return found


def resolve(texts: dict[Path, str], found: dict, runs: Path, previous: dict, quick: bool) -> Found:
    """Every placeholder's value: measured now, else as the last build recorded it, else missing."""
    out = Found()
    for path, text in texts.items():
        for m in PLACEHOLDER.finditer(text):
            name = m.group(2)
            if name in found:
                try:
                    out.values[key(m)] = _value(m, found[name], runs / SOURCES[name].path, quick, out)
                except UserError as e:
                    out.errors.append(f"{path.parent.name}/{path.name}: {e}")
            elif name in previous.get("machines", {}) and key(m) in previous["values"]:
                out.values[key(m)] = previous["values"][key(m)]
    before = previous.get("machines", {})
    for name in used_sources(texts):
        if name in found or name in before:
            out.machines[name] = found[name]["machine"] if name in found else before[name]
        else:
            out.missing.append(name)
    return out


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
    if fact not in known:
        close = [k for k in known if fact.split(" / ")[0] in k][:8]
        raise UserError(f"{name} has no fact {fact!r}; facts like it: {close or sorted(known)[:8]}")
    if not spec:
        return known[fact]
    try:
        return format(float(known[fact].replace(",", "")), spec)
    except ValueError:
        raise UserError(f"{name}: {fact!r} is {known[fact]!r}, which format {spec!r} cannot take") from None


def build(
    source: Path,
    docs: Path,
    runs: Path,
    quick: bool = False,
    train: bool = False,
    cli=None,
    front: Path | None = None,
) -> tuple[list[Page], Found]:
    """Templates in `source` -> pages, figures and facts.json in `docs`, from the sources under `runs`; `cli`
    (`tinyformer.cli.main`) runs the commands of the sources to make. `front`: where the front page
    (`source/README.md`, the project's README) goes, filled from the same facts."""
    texts = templates(source)
    front_template = read_text(source / FRONT) if front is not None and (source / FRONT).is_file() else None
    everything = texts | ({source / FRONT: front_template} if front_template is not None else {})
    typed = [f"{p.parent.name}/{p.name}: {n}" for p, t in everything.items() for n in typed_numbers(t)]
    if typed:
        raise UserError(f"lab: results typed into templates (use a placeholder): {'; '.join(typed[:10])}")
    _check_out(docs)
    previous = read_json(docs / "facts.json") if (docs / "facts.json").is_file() and not quick else {}
    got = resolve(everything, measure(everything, runs, quick, train, cli), runs, previous, quick)
    pages = render(texts, got.values)
    got.errors += leftovers(pages)
    if front_template is not None:
        got.front = (front, front_page(front_template, got.values))
    for line in got.errors:
        print(line)
    if got.errors:
        raise UserError(f"lab: {len(got.errors)} placeholders could not be filled (listed above); nothing written")
    write(docs, pages, got)
    for p in pages:
        print(
            f"lab: {p.lang}/{p.name}: {p.items} items ({p.items - p.own} the course's, {p.own} tinyformer's own), "
            f"{p.answered} answered with a command and every value"
        )
    for name in got.missing:
        print(f"lab: {name}: not measured yet ({shown(name)})")
    return pages, got


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


def write(docs: Path, pages: list[Page], got: Found) -> None:
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
    facts_json = {"machines": got.machines, "missing": got.missing, "values": got.values}
    write_text(docs / "facts.json", json.dumps(facts_json, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    for page in pages:
        write_text(make_dir(docs / page.lang) / page.name, page.text)
    write_text(docs / "README.md", index(pages))
    if got.front is not None:
        write_text(*got.front)
