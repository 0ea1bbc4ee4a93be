"""The lab guide's templates and how a page is filled from measured values alone.

Templates live in `docs/lab/templates/{en,zh}/*.md`; each `###` heading is one course item (a step,
an exercise, a thinking question). Four kinds of placeholder fill them (`tinyformer.lab.placeholders`, which
the notebooks read too):

    {{experiments/ablation: no-mask / best val loss}}         a fact (see `tinyformer.lab.sources`)
    {{experiments/kv-cache: 128 / cache speedup | .2f}}       ... formatted with a Python format spec
    ![val loss]({{fig experiments/ablation: val_loss.png}})   a figure, copied to docs/lab/figures/
    {{text lab/gpt-sample: stdout.txt}}                       a text file, verbatim

A paragraph (a fenced block counts as one) whose value was not measured yet is replaced by one line
that names the command making it; the item's heading and its other paragraphs stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import read_text
from tinyformer.lab.placeholders import PLACEHOLDER, key, made_text, shown

LANGS = ("en", "zh")
OWN = {"en": "*(tinyformer's own)*", "zh": "*（tinyformer 自有）*"}  # ends the heading of an item not in the course
MISSING = {
    "en": "*Not measured on this machine yet: run {commands}, then `make lab`.*",
    "zh": "*本机尚未测量：先运行 {commands}，再运行 `make lab`。*",
}
FENCE = re.compile(r"^\s*(```|~~~)")
TYPED = re.compile(r"\d+\.\d+|\d+\s*[%％]|\b\d+\s*[x×]|\d{1,3}(?:,\d{3})+|\d{4,}|\d+e-?\d+")
NOT_PROSE = re.compile(r"```.*?```|~~~.*?~~~|`[^`\n]*`|\{\{.*?\}\}|\]\([^)]*\)|<!--.*?-->", re.S)


@dataclass
class Page:
    lang: str
    name: str  # file name, e.g. 1-char-gpt.md
    text: str  # rendered Markdown
    items: int  # `###` headings: the course's steps, exercises and questions, and tinyformer's own items
    answered: int  # items that show a `tinyformer` command and have every value they ask for
    own: int = 0  # items that are tinyformer's own, not the course's (their heading ends with `OWN`)


def templates(folder: Path) -> dict[Path, str]:
    """{template path: text} for every language, in page order; the same pages in each language."""
    found = {lang: sorted((folder / lang).glob("*.md")) for lang in LANGS}
    if not all(found.values()):
        raise UserError(f"lab: no templates under {folder}/{{en,zh}}; run from the repository root")
    return {p: read_text(p) for lang in LANGS for p in found[lang]}


def typed_numbers(template: str) -> list[str]:
    """Results a template states in its prose (code, placeholders and link targets aside). Measured numbers
    belong in placeholders, so a decimal, a percentage, a ratio, an exponent or a number of four or more
    digits is refused; small integers that name things ("4 layers", "exercise 3") are not results."""
    return TYPED.findall(NOT_PROSE.sub(" ", template))


def render(texts: dict[Path, str], values: dict[str, str]) -> list[Page]:
    """Every page, filled from `values` alone (the `values` of facts.json)."""
    pages = []
    for path, template in texts.items():
        lang = path.parent.name
        sections = re.split(r"(?m)^(?=### )", template)
        done = [fill(s, values, lang) for s in sections]
        items = [ok for s, (_, ok) in zip(sections, done, strict=True) if s.startswith("### ")]
        own = sum(s.startswith("### ") and OWN[lang] in s.splitlines()[0] for s in sections)
        pages.append(Page(lang, path.name, "".join(t for t, _ in done), len(items), sum(items), own))
    return pages


FRONT = "README.md"  # the front page's template, beside the language folders: the project's README


def front_page(template: str, values: dict[str, str]) -> str:
    """The README, filled from `values` like a page (a paragraph whose value is missing names its command)."""
    return fill(template, values, "en")[0].rstrip("\n") + "\n"


def fill(section: str, values: dict[str, str], lang: str) -> tuple[str, bool]:
    """One `###` item filled; True when it shows a command and every value it asks for was measured."""
    blocks, notes, measured, missing = [], set(), 0, False
    for block in _blocks(section):
        if block.startswith("#"):  # a heading line is never replaced, whatever it holds
            heading, _, block = block.partition("\n")
            blocks.append(PLACEHOLDER.sub(lambda m: values.get(key(m)) or "?", heading))
            if not block:
                continue
        wanted = list(PLACEHOLDER.finditer(block))
        absent = [m for m in wanted if not values.get(key(m))]
        if absent:
            missing = True
            note = MISSING[lang].format(commands=", ".join(dict.fromkeys(shown(m.group(2)) for m in absent)))
            if note not in notes:  # one note per command list and item
                blocks.append(note)
                notes.add(note)
            continue
        measured += len(wanted)
        blocks.append(PLACEHOLDER.sub(lambda m: values[key(m)], block))
    has_command = re.search(r"(`|^)tinyformer ", section, re.M) is not None
    return "\n\n".join(blocks) + "\n\n", has_command and measured > 0 and not missing


def _blocks(text: str) -> list[str]:
    """Paragraphs split at blank lines, a fenced code block kept whole, a heading line on its own."""
    blocks, current, fence = [], [], None
    for line in text.strip("\n").split("\n"):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and m.group(1) == fence:
            fence = None
        if fence is None and (not line.strip() or (line.startswith("#") and current)):
            if current:
                blocks.append("\n".join(current))
            current = [line] if line.strip() else []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def leftovers(pages: list[Page]) -> list[str]:
    """Placeholder-like text no pattern filled (a missing colon, braces in a key): it must not reach a page."""
    return [f"{p.lang}/{p.name}: {t[:60]}" for p in pages for t in re.findall(r"\{\{.*?\}\}", p.text, re.S)]


def index(pages: list[Page], facts: dict | None = None) -> str:
    lines = [
        "# tinyformer lab guide / 实验指南",
        "",
        "Generated by `make lab` from `docs/lab/templates/` and `facts.json`; do not edit.",
        "",
        "Items marked *(tinyformer's own)* / *（tinyformer 自有）* are the project's additions; the others are the",
        "course's steps, exercises and questions (../shared/course).",
        "",
        "Every page is also a notebook, made from the same sources (`make notebooks`): "
        "[`notebooks/en/`](../../notebooks/en/) and [`notebooks/zh/`](../../notebooks/zh/), with the course's",
        "deliverable `minigpt.ipynb` beside them. Each item runs through the Python API, draws its figure inline",
        "and shows your value beside the guide's. Open them with `make jupyter` after `make demo` (Jupyter Lab), in",
        "VS Code with the kernel `.venv/bin/python` after `.venv/bin/pip install -e '.[notebook]'`, or in Colab with",
        "`TINYFORMER_REPO` set to your copy's address; `TINYFORMER_SIZE=ci` runs each cell in seconds.",
        "每一页也是一个笔记本，由同一份源文件生成（`make notebooks`）：[`notebooks/zh/`](../../notebooks/zh/)。"
        "打开方式：`make demo` 之后运行 `make jupyter`（Jupyter Lab）；VS Code 中选择内核 `.venv/bin/python`；"
        "Colab 中把 `TINYFORMER_REPO` 设为你的仓库地址。",
        "",
        "| page | items | the course's | tinyformer's own | answered with a command and every measured value |",
        "|---|---|---|---|---|",
    ]
    for p in pages:
        title = p.text.splitlines()[0].lstrip("# ")
        lines.append(f"| [{title}]({p.lang}/{p.name}) | {p.items} | {p.items - p.own} | {p.own} | {p.answered} |")
    return "\n".join(lines + provenance(facts or {})) + "\n"


def provenance(facts: dict) -> list[str]:
    """Where the facts come from: each source's stamp (commit, date, wall time), the stale ones, the last build."""
    stamps, stale = facts.get("stamps", {}), facts.get("stale", {})
    stamped = [r for r in stamps.values() if r.get("commit")]
    lines = ["", "## Where the facts come from", ""]
    build = facts.get("build")
    if build:
        planned = "?" if build.get("planned_s") is None else f"{build['planned_s'] / 60:.1f}"
        unplanned = build.get("unplanned", 0)
        lines += [
            f"The last `make lab TRAIN=1` made {build['made']} sources in {build['elapsed_s'] / 60:.1f} minutes of "
            f"wall time, {build['workers']} at a time ({build['date'][:10]}), against a plan of {planned} minutes"
            + (
                f" for the {build['made'] - unplanned} that had an estimate ({unplanned} had never been stamped)"
                if unplanned
                else ""
            )
            + "; its report card is `runs/lab-card.md` on the machine that ran it.",
            "",
        ]
    hours = sum(r.get("wall_s", 0) for r in stamped) / 3600
    checked = sum(bool(r.get("checked")) for r in stamped)
    lines += [
        f"{len(stamped)} of {len(stamps)} sources carry a stamp, {hours:.2f} hours of commands in all; "
        + (
            f"stale, as their behaviour at CI size moved or their code changed unchecked: {', '.join(sorted(stale))}."
            if stale
            else "none is stale."
        )
        + (f" {checked} were checked by behaviour (`make lab VERIFY=1`)." if checked else ""),
        "",
        "| source | made at (commit, date) | machine | minutes |",
        "|---|---|---|---|",
    ]
    for name, record in sorted(stamps.items()):
        wall = f"{record['wall_s'] / 60:.1f}" if record.get("wall_s") is not None else "?"
        machine = facts.get("machines", {}).get(name, "?")
        lines.append(f"| {name} | {made_text(record, stale.get(name))} | {machine} | {wall} |")
    return lines
