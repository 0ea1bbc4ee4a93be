"""Where the lab guide's numbers come from: the commands that produce each source folder, and its facts.

A source is a folder under a runs root (`experiments/ablation`, `lab/gpt`) that one or more
`tinyformer` commands write. Its *facts* are every number the folder states, read, never typed:

- each Markdown table in its `report.md`: `ROW / COLUMN` -> the cell (first column names the row; the
  first row and table that has it), `table N: ROW / COLUMN` for the N-th table, and `ROW, SECOND / COLUMN`
  where the first two cells name a row (a layer and a head);
- each JSON file but the tokenizer, flattened: `figures.speed.train.sdpa.0.1.ms` -> the value;
- a training run (`metrics.jsonl`): `best val loss`, `final val KEY`, `steps`, `train seconds`, `parameters`;
- `machine`: the machine the lab build recorded in `lab.json` when it ran (or first read) the folder.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

GPT_QUICK = [
    "--set",
    "model.block_size=32",
    "--set",
    "model.n_embd=32",
    "--set",
    "model.n_layer=2",
    "--set",
    "train.max_iters=30",
    "--set",
    "train.eval_interval=10",
    "--set",
    "train.eval_iters=2",
]
SENTENCE = "The man saw the bird with the telescope"
PROBE = "7 3 0 9 5 1 8"


@dataclass(frozen=True)
class Source:
    name: str  # folder under the runs root
    commands: tuple[tuple[str, ...], ...]  # tinyformer argv; "{dir}" is this folder, "{runs}" the root
    quick: tuple[tuple[str, ...], ...] = ()  # the same at CI size (default: `commands`, unchanged)
    stdout: bool = False  # keep the last command's printed output as stdout.txt
    done: str = ""  # the file whose presence means the folder is complete (default: report.md)

    def argv(self, quick: bool) -> list[list[str]]:
        return [list(c) for c in ((self.quick or self.commands) if quick else self.commands)]


def _study(name: str) -> Source:
    return Source(
        f"experiments/{name}",
        (("experiment", name, "--out", "{dir}"),),
        (("experiment", name, "--quick", "--out", "{dir}"),),
        done="report_minilm.md" if name == "classifiers-minilm" else "",  # it can share a folder with classifiers
    )


STUDIES = (
    "ablation",
    "scale",
    "positions",
    "kv-cache",
    "reverse-ablation",
    "seq2seq-decoding",
    "classifiers",
    "classifiers-minilm",
    "tagging",
    "qa",
    "attention-variants",
    "practice",
)


def _reverse_cells() -> list[Source]:
    """Each cell of the reverse-ablation study on its own, so a page can quote the cells trained so far."""
    from tinyformer.experiments import reverse_ablation as ra

    def sets(overrides: list[str]) -> tuple[str, ...]:
        return tuple(x for o in overrides for x in ("--set", o))

    quick = {c.name: c for c in ra.cells(d_ff=64)}
    return [
        Source(
            f"experiments/reverse-ablation/{c.name}",
            (("train", "reverse", *sets(c.overrides), "--out", "{dir}"),),
            (("train", "reverse", *sets([*ra.QUICK, *quick[c.name].overrides]), "--out", "{dir}"),),
            done="trainer_state.pt",
        )
        for c in ra.cells()
    ]


BERT_VIEWS = ("viz", "bert", "--sentence", SENTENCE, "--out", "{dir}")
SOURCES: dict[str, Source] = {  # in the order they are made: a run comes before the views that read it
    s.name: s
    for s in (
        Source(
            "lab/gpt",
            (("train", "gpt", "--out", "{dir}"),),
            (("train", "gpt", *GPT_QUICK, "--out", "{dir}"),),
            done="trainer_state.pt",
        ),
        Source("lab/gpt-info", (("info", "{runs}/lab/gpt"),), stdout=True, done="stdout.txt"),
        Source(
            "lab/gpt-sample",
            (
                (
                    "sample",
                    "{runs}/lab/gpt",
                    "--prompt",
                    "ROMEO:",
                    "--tokens",
                    "300",
                    "--temperature",
                    "0.8",
                    "--top-k",
                    "40",
                    "--seed",
                    "1",
                ),
            ),
            stdout=True,
            done="stdout.txt",
        ),
        Source(
            "lab/bert",
            (
                (
                    *BERT_VIEWS,
                    "--layer",
                    "0",
                    "--head",
                    "0",
                    "--all-heads",
                    "--flow-to",
                    "bird",
                    "--roles",
                    "--html",
                    "{dir}/attention.html",
                    "--report",
                    "{dir}",
                ),
            ),
        ),
        Source("lab/bert-deep", ((*BERT_VIEWS, "--layer", "5", "--all-heads", "--report", "{dir}"),)),
        Source(
            "lab/bench-attention",
            (("bench", "attention", "--repeats", "3", "--json", "{dir}/bench.json"),),
            (("bench", "attention", "--repeats", "1", "--lengths", "64,128", "--json", "{dir}/bench.json"),),
            done="bench.json",
        ),
        Source(
            "lab/bench-rnn",
            (("bench", "rnn", "--iters", "3", "--repeats", "3", "--json", "{dir}/bench.json"),),
            (("bench", "rnn", "--iters", "1", "--repeats", "1", "--json", "{dir}/bench.json"),),
            done="bench.json",
        ),
        *(_study(name) for name in STUDIES),
        *_reverse_cells(),
        Source(
            "lab/reverse-cross",
            (("viz", "cross-attention", "{runs}/experiments/reverse-ablation/baseline", PROBE, "--out", "{dir}"),),
            stdout=True,
            done="stdout.txt",
        ),
    )
}


def complete(source: Source, folder: Path) -> bool:
    """The folder holds all the source makes: its report, its output, or a training run that finished."""
    if source.done == "trainer_state.pt":
        from tinyformer.experiments.runner import finished

        return finished(folder)
    return (folder / (source.done or "report.md")).is_file()


def facts(folder: Path) -> dict[str, str]:
    """Every fact the folder states (see the module docstring), as the text the guide will show."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.md")):
        for key, value in table_facts(path.read_text(encoding="utf-8")).items():
            out.setdefault(key, value)
    for path in sorted(folder.glob("*.json")):
        if path.name not in ("tokenizer.json", "lab.json"):
            flatten(json.loads(path.read_text(encoding="utf-8")), path.stem, out)
    if (folder / "metrics.jsonl").is_file():
        out.update(run_facts(folder))
    lab = folder / "lab.json"
    if lab.is_file():
        out["machine"] = json.loads(lab.read_text(encoding="utf-8"))["machine"]
    return out


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


def flatten(value, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}", out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = str(value)


def run_facts(folder: Path) -> dict[str, str]:
    """A training run's figures from its metrics log and weights."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    out: dict[str, str] = {}
    val = [r for r in rows if r.get("split") == "val"]
    losses = [r["loss"] for r in val if isinstance(r.get("loss"), float) and math.isfinite(r["loss"])]
    if losses:
        out["best val loss"] = f"{min(losses):.4f}"
    for split in ("train", "val"):
        last = next((r for r in reversed(rows) if r.get("split") == split), None)
        for key, v in (last or {}).items():
            if isinstance(v, float) and key not in ("step", "split"):
                out[f"final {split} {key}"] = f"{v:.4f}"
    if rows:
        out["steps"] = f"{max(r.get('step', 0) for r in rows):,}"
        seconds = [r["train_seconds"] for r in rows if "train_seconds" in r]
        if seconds:
            out["train seconds"] = f"{max(seconds):.0f}"
    weights = folder / "model.safetensors"
    if weights.is_file():
        out["parameters"] = f"{count_weights(weights):,}"
    return out


def count_weights(path: Path) -> int:
    """Numbers stored in a safetensors file, read from its header (no tensor is loaded)."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
