"""`tinyformer lab build`: the lab guide's pages, with every number and figure read from the runs.

Templates live in `docs/lab/templates/{en,zh}/*.md`. Three placeholders fill them:

    {{experiments/ablation: no-causal-mask / best val loss}}     a fact (see `tinyformer.lab.sources`)
    {{experiments/ablation: ratio / x | .2f}}                    ... formatted with a Python format spec
    ![val loss]({{fig experiments/ablation: val_loss.png}})      a figure, copied to docs/lab/figures/
    {{text lab/gpt-sample: stdout.txt}}                          a text file, verbatim

The build runs in two steps, so a page never holds a typed number. `collect` reads each placeholder's
value from its source folder into `docs/lab/facts.json` (with the machine) and copies the figures;
`render` fills the templates from that file alone. A test renders the templates again from the
committed facts and requires the committed pages, so a page edited by hand, or a template changed
without a rebuild, fails CI. A paragraph whose source has not been run yet says so and names the
command that produces it, instead of a number.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import make_dir, write_text
from tinyformer.lab.sources import SOURCES, Source, complete, facts

LANGS = ("en", "zh")
PLACEHOLDER = re.compile(r"\{\{\s*(?:(fig|text)\s+)?([\w./-]+)\s*:\s*([^{}|]+?)\s*(?:\|\s*([^{}]*?)\s*)?\}\}")
MISSING = {
    "en": "*Not measured on this machine yet: run {commands}, then `make lab`.*",
    "zh": "*本机尚未测量：先运行 {commands}，再运行 `make lab`。*",
}


@dataclass
class Page:
    lang: str
    name: str  # file name, e.g. 1-char-gpt.md
    text: str  # rendered Markdown
    items: int  # `###` headings: the course's steps, exercises and questions
    answered: int  # items with a `tinyformer` command and at least one measured value or figure


def templates(source: Path) -> dict[str, list[Path]]:
    """{language: its template files}, from the templates folder (docs/lab/templates)."""
    found = {lang: sorted((source / lang).glob("*.md")) for lang in LANGS}
    if not all(found.values()):
        raise UserError(f"lab: no templates under {source}/{{en,zh}}; run from the repository root")
    return found


def command_line(argv: list[str], runs: Path, folder: Path) -> list[str]:
    return [a.replace("{dir}", str(folder)).replace("{runs}", str(runs)) for a in argv]


def shown(source: Source) -> str:
    """The commands a reader runs to make this source, as the guide prints them."""
    lines = [
        " ".join(_quote(a) for a in command_line(c, Path("runs"), Path("runs") / source.name))
        for c in source.argv(False)
    ]
    return ", ".join(f"`tinyformer {line}`" for line in lines)


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or not arg) else arg


def produce(source: Source, runs: Path, quick: bool) -> None:
    """Run the source's commands (in this process, the CLI's own code path) into its folder."""
    from tinyformer.cli import main

    folder = make_dir(runs / source.name)
    for argv in source.argv(quick):
        line = command_line(argv, runs, folder)
        print(f"lab: tinyformer {' '.join(_quote(a) for a in line)}", flush=True)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured) if source.stdout else contextlib.nullcontext():
            code = main(line)
        if code:
            raise UserError(f"lab: `tinyformer {' '.join(line)}` failed with exit code {code}")
        if source.stdout:
            write_text(folder / "stdout.txt", captured.getvalue())


def record_machine(folder: Path) -> None:
    from tinyformer.device import machine

    if folder.is_dir() and not (folder / "lab.json").is_file():
        m = machine()
        text = f"{m['cpu']}, {m['gpu'] or 'no GPU'}, torch {m['torch']}"
        write_text(folder / "lab.json", json.dumps({"machine": text}, indent=2) + "\n")


def used_sources(source: Path) -> list[str]:
    texts = [p.read_text(encoding="utf-8") for paths in templates(source).values() for p in paths]
    names = {m.group(2) for text in texts for m in PLACEHOLDER.finditer(text)}
    unknown = sorted(names - set(SOURCES))
    if unknown:
        raise UserError(f"lab: templates name unknown sources {unknown}; known: {sorted(SOURCES)}")
    return [n for n in SOURCES if n in names]  # in the registry's order: a run comes before what reads it


def collect(source: Path, docs: Path, runs: Path, quick: bool = False, train: bool = False) -> dict:
    """Read (with `train`, first produce) every source the templates use; copy figures; write facts.json.

    `quick` is the CI size: every source is produced and every placeholder must resolve."""
    typed = [
        f"{p.parent.name}/{p.name}: {n}"
        for ps in templates(source).values()
        for p in ps
        for n in typed_numbers(p.read_text(encoding="utf-8"))
    ]
    if typed:
        raise UserError(f"lab: numbers typed into templates (use a placeholder): {'; '.join(typed[:10])}")
    found: dict[str, dict] = {}
    figures = docs / "figures"
    shutil.rmtree(figures, ignore_errors=True)
    for name in used_sources(source):
        src, folder = SOURCES[name], runs / name
        if (train or quick) and not complete(src, folder):
            produce(src, runs, quick)
        if not complete(src, folder):
            if quick:
                raise UserError(f"lab: {name} is incomplete after its commands ({shown(src)})")
            print(f"lab: {name}: not measured yet ({shown(src)})")
            continue
        record_machine(folder)
        found[name] = facts(folder)
    values: dict[str, str] = {}
    errors: list[str] = []
    for paths in templates(source).values():
        for path in paths:
            for m in PLACEHOLDER.finditer(path.read_text(encoding="utf-8")):
                kind, name, key, spec = m.groups()
                if name in found:
                    try:
                        values[_key(m)] = _value(kind, name, key.strip(), spec, found[name], runs, figures, quick)
                    except UserError as e:  # every bad placeholder is listed, then the build fails
                        errors.append(f"{path.parent.name}/{path.name}: {e}")
    missing = [n for n in used_sources(source) if n not in found]
    out = {"machines": {n: f.get("machine", "") for n, f in found.items()}, "missing": missing, "values": values}
    write_text(docs / "facts.json", json.dumps(out, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    return {**out, "errors": errors}


TYPED = re.compile(r"\d+\.\d+|\d+\s*[%％]|\b\d+x\b|\d{1,3}(?:,\d{3})+|\d{4,}")
NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\{\{.*?\}\}|\]\([^)]*\)|<!--.*?-->", re.S)


def typed_numbers(template: str) -> list[str]:
    """Numbers a template states in its prose (code, placeholders and link targets aside): results belong in
    placeholders, so any decimal, percentage, ratio or number of four or more digits here is refused."""
    return TYPED.findall(NOT_PROSE.sub(" ", template))


def _key(m: re.Match) -> str:
    return " ".join(m.group(0)[2:-2].split())


def _value(kind, name: str, key: str, spec, known: dict, runs: Path, figures: Path, quick: bool) -> str:
    folder = runs / name
    if kind in ("fig", "text"):
        path = folder / key
        if not path.is_file():
            if quick:
                raise UserError(f"lab: {path} is missing (the {name} commands should write it)")
            return ""
        if kind == "text":
            return path.read_text(encoding="utf-8").strip("\n")
        make_dir((figures / name / key).parent)
        shutil.copyfile(path, figures / name / key)
        return f"../figures/{name}/{key}"
    if key not in known and quick:  # a row or column named by a size (a context, a length) the tiny runs lack
        return "?"
    if key not in known:
        close = [k for k in known if key.split(" / ")[0] in k][:8]
        raise UserError(f"{name} has no fact {key!r}; facts like it: {close or sorted(known)[:8]}")
    value = known[key]
    if not spec:
        return value
    try:
        return format(float(value.replace(",", "")), spec)
    except ValueError:
        raise UserError(f"{name}: {key!r} is {value!r}, which format {spec!r} cannot take") from None


def render(source: Path, values: dict[str, str]) -> list[Page]:
    """Every page, filled from `values` alone (the `values` of facts.json)."""
    pages = []
    for lang, paths in templates(source).items():
        for path in paths:
            sections = re.split(r"(?m)^(?=### )", path.read_text(encoding="utf-8"))
            done = [fill(s, values, lang) for s in sections]
            text = "".join(t for t, _ in done)
            items = [ok for s, (_, ok) in zip(sections, done, strict=True) if s.startswith("### ")]
            pages.append(Page(lang, path.name, text, len(items), sum(items)))
    return pages


def fill(section: str, values: dict[str, str], lang: str) -> tuple[str, bool]:
    """One `###` item filled; True when it shows a command and every value it asks for was measured."""
    blocks, measured, missing = [], 0, False
    for block in _blocks(section):
        wanted = list(PLACEHOLDER.finditer(block))
        absent = [m for m in wanted if not values.get(_key(m))]
        if absent:
            missing = True
            note = MISSING[lang].format(commands=", ".join(dict.fromkeys(shown(SOURCES[m.group(2)]) for m in absent)))
            if not blocks or blocks[-1] != note:
                blocks.append(note)
            continue
        measured += len(wanted)
        blocks.append(PLACEHOLDER.sub(lambda m: values[_key(m)], block))
    text = "\n\n".join(blocks) + "\n\n"
    has_command = re.search(r"(`|^)tinyformer ", section, re.M) is not None
    return text, has_command and measured > 0 and not missing


def _blocks(text: str) -> list[str]:
    """Paragraphs split at blank lines, a fenced code block kept whole."""
    blocks, current, fenced = [], [], False
    for line in text.strip("\n").split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def write_pages(docs: Path, pages: list[Page]) -> None:
    for page in pages:
        write_text(make_dir(docs / page.lang) / page.name, page.text)
    write_text(docs / "README.md", index(pages))


def index(pages: list[Page]) -> str:
    lines = [
        "# tinyformer lab guide / 实验指南",
        "",
        "Generated by `make lab` from `docs/lab/templates/`; do not edit.",
        "",
    ]
    lines += ["| page | items | answered with a command and a measured figure |", "|---|---|---|"]
    for p in pages:
        title = p.text.splitlines()[0].lstrip("# ")
        lines.append(f"| [{title}]({p.lang}/{p.name}) | {p.items} | {p.answered} |")
    return "\n".join(lines) + "\n"


def build(source: Path, docs: Path, runs: Path, quick: bool = False, train: bool = False) -> list[Page]:
    """Templates in `source` -> pages, figures and facts.json in `docs`, from the sources under `runs`."""
    found = collect(source, docs, runs, quick, train)
    pages = render(source, found["values"])
    write_pages(docs, pages)
    for p in pages:
        print(f"lab: {p.lang}/{p.name}: {p.items} items, {p.answered} answered with a command and a measured figure")
    for line in found["errors"]:
        print(line)
    if found["errors"]:
        raise UserError(f"lab: {len(found['errors'])} placeholders name no fact (listed above)")
    return pages
