"""What the Python API returns besides runs and texts: a `Figure` (the files a view or a plot wrote), a
`Report` (a study's report.md: its tables as facts, its figures, its runs) and a `CrossAttention`; and
`table_facts`, how a report's tables are read, by the Report and by the lab guide alike.

Each shows itself in Jupyter (`_repr_png_`, `_repr_markdown_`) and prints as one line elsewhere; the files
are the same ones the command line writes, so a notebook and a terminal see the same picture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import read_text


def table_facts(markdown: str) -> dict[str, str]:
    """`ROW / COLUMN` -> cell for every Markdown table (a header row, a --- row, then rows)."""
    out: dict[str, str] = {}
    header: list[str] | None = None
    tables = 0
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header, tables = cells, tables + 1
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            for column, value in zip(header[1:], cells[1:], strict=False):
                out.setdefault(f"{cells[0]} / {column}", value)  # the first table that has it
                out.setdefault(f"table {tables}: {cells[0]} / {column}", value)
                out.setdefault(f"{cells[0]}, {cells[1]} / {column}", value)  # rows named by two cells (layer, head)
    return out


@dataclass
class Figure:
    paths: list[Path]  # what was written: a PNG first when there is one (its SVG twin, an HTML page, ...)

    def __post_init__(self) -> None:
        self.paths = [Path(p) for p in self.paths]

    @property
    def png(self) -> Path | None:
        return next((p for p in self.paths if p.suffix == ".png"), None)

    def _repr_png_(self) -> bytes | None:  # Jupyter draws the PNG inline
        return self.png.read_bytes() if self.png else None

    def __repr__(self) -> str:
        return f"Figure({', '.join(str(p) for p in self.paths)})"


@dataclass
class Report:
    path: Path  # the report's Markdown file; its figures and cell runs sit beside it
    facts: dict[str, str] = field(init=False)  # "ROW / COLUMN" -> cell of every table (`table_facts`)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.facts = table_facts(self.text)

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def text(self) -> str:
        return read_text(self.path)

    def __getitem__(self, key: str) -> str:
        """A cell of a table by "ROW / COLUMN", e.g. report["baseline / best val loss"]."""
        if key not in self.facts:
            rows = sorted({k.split(" / ")[0] for k in self.facts if not k.startswith("table ")})
            raise UserError(f"{self.path} has no {key!r}; its rows: {', '.join(rows)}")
        return self.facts[key]

    @property
    def figures(self) -> list[str]:
        """The names of the PNG figures beside the report."""
        return sorted(p.name for p in self.folder.glob("*.png"))

    def figure(self, name: str) -> Figure:
        path = self.folder / name
        if not path.is_file():
            raise UserError(f"{self.folder} has no figure {name!r}; it has: {', '.join(self.figures) or 'none'}")
        return Figure([path])

    def run(self, cell: str, weights: str = "latest"):
        """The `Run` of one cell of the study (its final weights by default, as the report's curves end)."""
        from tinyformer.runs import load_run

        return load_run(self.folder / cell, weights=weights)

    def _repr_markdown_(self) -> str:  # the tables and prose; figures are shown by `figure(name)`
        return re.sub(r"!\[[^\]]*\]\([^)]*\)", "", self.text)

    def __repr__(self) -> str:
        return f"Report({self.path})"


@dataclass
class CrossAttention:
    output: str  # what the model decoded (greedy), the decoder input after BOS
    weights: torch.Tensor  # (T, S): the last layer's cross-attention, mean of its heads
    rows: list[str]  # T decoder-input tokens
    cols: list[str]  # S source tokens
    layer: int
    heads: int
    score: float | None  # the task's alignment score (0-1), None when the task defines none
    figure: Figure  # the mean of the heads
    every_head: Figure  # each head of the layer

    def matrix_text(self) -> str:
        """The mean weights as a text table, rows = decoder inputs, columns = source tokens."""
        lines = ["      " + "".join(f"{c:>6}" for c in self.cols)]
        for label, row in zip(self.rows, self.weights.tolist(), strict=True):
            lines.append(f"{label:>5} " + "".join(f"{x:6.2f}" for x in row))
        return "\n".join(lines)

    def _repr_png_(self) -> bytes | None:
        return self.figure._repr_png_()

    def __repr__(self) -> str:
        score = "" if self.score is None else f", alignment {self.score:.3f}"
        return f"CrossAttention(output={self.output!r}{score}, {self.figure.png})"
