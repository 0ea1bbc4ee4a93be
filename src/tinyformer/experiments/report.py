"""One report builder for every study: its folder, its header, its tables and figures, the file itself.

A study computes its numbers, assembles the body of its report as a list of Markdown blocks, and calls
`write_report`, which puts the one header on top (the title with the one --quick note, the one machine line),
writes `figures.json` when the study has figures to keep, writes the report and prints `report: PATH`.
The lab guide reads facts from these reports: from their tables by "ROW / COLUMN" and from figures.json by key
(`tinyformer.lab.sources`), and it tells a --quick report by `QUICK_MARK` in its first line.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path

from tinyformer.device import machine, torch_threads
from tinyformer.files import make_dir, write_text

QUICK_MARK = "--quick size"  # in the first line of every --quick report, and only there
QUICK_NOTE = f" ({QUICK_MARK}: the numbers check the pipeline, they answer nothing)"
FROM_RUNS = "Every number below is read from the run folders next to this file."


def study_folder(name: str, out: Path | str | None, quick: bool) -> Path:
    """The study's folder, created: `out`, else runs/experiments/NAME (NAME-quick at the --quick size)."""
    return make_dir(Path(out or f"runs/experiments/{name}{'-quick' if quick else ''}"))


def machine_line(m: dict, device: str | None = None) -> str:
    """Where the numbers were made; `device` for a study that measures on one (cpu, cuda, mps)."""
    gpu = f", {m['gpu']}" if m["gpu"] else ""
    on = f"; measured on {device}" if device else ""
    return f"Machine: {m['cpu']}{gpu}, {torch_threads(m['torch_threads'])}, torch {m['torch']}{on}."


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; floats get 4 decimals, everything else is shown as str() shows it."""

    def cell(x) -> str:
        return f"{x:.4f}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_sd(xs: list[float]) -> str:
    """A table cell for figures over seeds: mean ± sample sd, or the one figure."""
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def figure(png: str, alt: str) -> str:
    """The Markdown link to a figure saved next to the report."""
    return f"![{alt}]({png})"


def write_report(
    folder: Path,
    title: str,
    quick: bool,
    body: Iterable[str],
    *,
    name: str = "report.md",
    figures: dict | None = None,
    device: str | None = None,
    from_runs: bool = True,
) -> Path:
    """Write folder/NAME: the header, then `body` (Markdown blocks, one per line), and folder/figures.json with
    the machine (and `device`) first when `figures` is given. `from_runs`: the numbers come from run folders."""
    m = machine()
    if figures is not None:
        measured = {"machine": m} | ({"device": device} if device else {})
        write_text(folder / "figures.json", json.dumps(measured | figures, indent=2) + "\n")
    head = [
        f"# {title}{QUICK_NOTE if quick else ''}",
        "",
        machine_line(m, device) + (f" {FROM_RUNS}" if from_runs else ""),
        "",
    ]
    path = write_text(folder / name, "\n".join([*head, *body]).rstrip("\n") + "\n")
    print(f"report: {path}")
    return path
