"""The guide as notebooks: notebooks/{en,zh}/PAGE.ipynb for each page of the lab guide, and minigpt.ipynb, the
course's deliverable, each made from one source and committed without outputs (`tinyformer lab notebooks`).

- A page's notebook is the page as the guide renders it (its template filled from facts.json), with the page's
  code (docs/lab/notebooks/PAGE.py, one file for both languages) after each item's first command block. In
  that file `# %% N. LABEL` starts item N's cells (LABEL begins the item's English heading), a bare `# %%`
  starts another cell of the same item, and `# %% setup` a cell before the first item.
- minigpt.ipynb is examples/minigpt.py cell by cell (`# %% NAME`; `main()`'s body, split at its own markers,
  as top-level cells), each cell after its prose (docs/lab/notebooks/minigpt.LANG.md, `<!-- cell: NAME -->`).

Every notebook opens with the same two cells: what it is and how to run it, and the cell that installs
tinyformer where it is missing (Colab) and reads the size.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import read_text, write_text
from tinyformer.lab.guide_facts import read_facts
from tools.lab.render import FENCE, LANGS, render, templates

SOURCE = Path("docs/lab/notebooks")  # the pages' code, minigpt's prose and the shared cells
OUT = Path("notebooks")
EXAMPLE = Path("examples/minigpt.py")
MARK = re.compile(r"^# %%(?: (?P<label>.*))?$")
ITEM = re.compile(r"^(?P<n>\d+)\. (?P<label>.+)$")
PROSE_MARK = re.compile(r"^<!-- cell: (?P<name>[\w-]+) -->$", re.M)


# ---- cells --------------------------------------------------------------------------------------------------
def markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": _lines(text.strip("\n"))}


def code(text: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": _lines(text)}


def _lines(text: str) -> list[str]:
    return text.strip("\n").splitlines(keepends=True)


def notebook(cells: list[dict]) -> dict:
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i:03d}"
    meta = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


# ---- the shared opening ---------------------------------------------------------------------------------
def opening(root: Path, lang: str, title: str) -> list[dict]:
    header = read_text(root / SOURCE / f"header.{lang}.md").replace("{title}", title)
    return [markdown(header), code(read_text(root / SOURCE / "install.py"))]


# ---- a page of the guide --------------------------------------------------------------------------------
def page_code(path: Path) -> dict[str, list[str]]:
    """{"setup": [cells], "1": [cells], ...} from a page's code file, with each item's label under "label N"."""
    cells: dict[str, list[str]] = {}
    current: str | None = None
    for line in read_text(path).splitlines(keepends=True):
        m = MARK.match(line.rstrip("\n"))
        if m is None:
            if current is None:  # the file's own comments, before its first cell
                if line.strip() and not line.lstrip().startswith("#"):
                    raise UserError(f"{path}: code before the first '# %%' marker: {line.strip()!r}")
                continue
            cells[current][-1] += line
            continue
        label = (m.group("label") or "").strip()
        item = ITEM.match(label)
        if label == "setup" or item:
            current = "setup" if label == "setup" else item.group("n")
            if current in cells:
                raise UserError(f"{path}: '# %% {label}' appears twice")
            cells[current] = [""]
            if item:
                cells[f"label {current}"] = [item.group("label")]
        elif not label and current is not None:
            cells[current].append("")
        else:
            raise UserError(f"{path}: '# %% {label}' is neither 'setup', 'N. LABEL' nor a bare '# %%'")
    return {k: [c.strip("\n") for c in v] for k, v in cells.items()}


def page_notebook(root: Path, lang: str, name: str, text: str, cells: dict[str, list[str]]) -> dict:
    """The rendered page `text` (docs/lab/LANG/NAME) with `cells` of its code file in their places."""
    sections = re.split(r"(?m)^(?=### )", _relinked(text, lang))
    title, _, intro = sections[0].partition("\n")
    out = [*opening(root, lang, title.lstrip("# ").strip()), *map(code, cells.get("setup", []))]
    out.append(markdown(intro))
    for n, section in enumerate(sections[1:], start=1):
        mine = cells.get(str(n))
        if mine is None:
            raise UserError(f"{SOURCE / name.replace('.md', '.py')}: no cells for item {n} ({section.splitlines()[0]})")
        before, after = _split_after_first_block(section)
        out += [markdown(before), *map(code, mine)] + ([markdown(after)] if after.strip() else [])
    extra = [k for k in cells if k.isdigit() and int(k) > len(sections) - 1]
    if extra:
        raise UserError(f"{SOURCE / name.replace('.md', '.py')}: cells for items the page lacks: {', '.join(extra)}")
    return notebook(out)


def _split_after_first_block(section: str) -> tuple[str, str]:
    """(the item up to the end of its first fenced block, the rest); no block: (the whole item, "")."""
    lines, fence = section.splitlines(keepends=True), None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and m.group(1) == fence:
            return "".join(lines[: i + 1]), "".join(lines[i + 1 :])
    return section, ""


def _relinked(text: str, lang: str) -> str:
    """Relative links of a page in docs/lab/LANG/ made relative to notebooks/LANG/."""
    page, here = Path("docs/lab") / lang, OUT / lang

    def move(m: re.Match) -> str:
        target = m.group(1)
        if re.match(r"[a-z]+:|#|/", target):
            return m.group(0)
        moved = os.path.relpath(os.path.normpath(page / target), here)
        return f"]({Path(moved).as_posix()})"

    return re.sub(r"\]\(([^)\s]+)\)", move, text)


# ---- minigpt --------------------------------------------------------------------------------------------
def example_cells(path: Path) -> list[tuple[str, str]]:
    """[(name, code)] of examples/minigpt.py: its `# %% NAME` cells, `main()`'s body as cells of its own."""
    found: list[tuple[str, str]] = []
    for name, body in _marked(read_text(path), MARK):
        if name != "main":
            found.append((name, body))
            continue
        inner = body.split("def main(", 1)[1].split("\n", 1)[1]
        inner = inner.split('\nif __name__ == "__main__":', 1)[0]
        found += [(n, textwrap.dedent(b)) for n, b in _marked(textwrap.dedent(inner), MARK)]
    return [(n, b.strip("\n")) for n, b in found]


def _marked(text: str, mark: re.Pattern) -> list[tuple[str, str]]:
    """[(label, text up to the next marker)] for every marker line; what comes before the first is dropped."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        m = mark.match(line.rstrip("\n"))
        if m:
            out.append(((m.group("label") or "").strip(), ""))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + line)
    return out


def minigpt_notebook(root: Path, lang: str) -> dict:
    prose = read_text(root / SOURCE / f"minigpt.{lang}.md")
    parts = PROSE_MARK.split(prose)
    title, _, intro = parts[0].strip("\n").partition("\n")
    notes = dict(zip(parts[1::2], parts[2::2], strict=True))
    cells = example_cells(root / EXAMPLE)
    unknown = sorted(set(notes) - {n for n, _ in cells})
    if unknown:
        raise UserError(f"{SOURCE}/minigpt.{lang}.md: prose for cells {EXAMPLE} lacks: {', '.join(unknown)}")
    out = [*opening(root, lang, title.lstrip("# ").strip()), markdown(intro)]
    out.append(code(read_text(root / SOURCE / "minigpt-size.py")))
    for name, body in cells:
        if notes.get(name, "").strip():
            out.append(markdown(notes[name]))
        out.append(code(body))
    return notebook(out)


# ---- where ----
def repository() -> Path:
    """The clone the command runs in: its sources are relative to the repository root."""
    root = Path.cwd()
    if not (root / SOURCE).is_dir() or not (root / "docs/lab/facts.json").is_file():
        raise UserError(f"no {SOURCE} or docs/lab/facts.json here: run it from the root of a tinyformer clone")
    return root


# ---- all of them ----------------------------------------------------------------------------------------
def made(root: Path) -> dict[Path, str]:
    """{notebook path: its text} for every notebook the sources under `root` make."""
    facts = read_facts(root / "docs/lab/facts.json")
    pages = render(templates(root / "docs/lab/templates"), facts.get("values", {}))
    out: dict[Path, str] = {}
    for page in pages:
        cells = page_code(root / SOURCE / page.name.replace(".md", ".py"))
        nb = page_notebook(root, page.lang, page.name, page.text, cells)
        out[OUT / page.lang / page.name.replace(".md", ".ipynb")] = dumps(nb)
    for lang in LANGS:
        out[OUT / lang / "minigpt.ipynb"] = dumps(minigpt_notebook(root, lang))
    return out


def write_all(root: Path) -> list[Path]:
    written = []
    for rel, text in made(root).items():
        path = root / rel
        if not path.is_file() or read_text(path) != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text)
            written.append(rel)
    return written


def differing(root: Path) -> list[Path]:
    """The committed notebooks that are not what their sources make (missing ones included)."""
    return [rel for rel, text in made(root).items() if not (root / rel).is_file() or read_text(root / rel) != text]
