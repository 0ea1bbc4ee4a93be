"""What the lab guide's notebooks (notebooks/{en,zh}/*.ipynb) share: their size, their runs folder, and the
guide's own figures beside the ones the learner's run just produced.

    guide = Guide("1-char-gpt")                # TINYFORMER_SIZE: ci | laptop (default) | full
    run = api.train("gpt", set=guide.sets("lab/gpt"), out=guide.runs / "lab/gpt")
    guide.compare("lab/gpt: best val loss")    # this notebook's value | the guide's | its stamp

A notebook's runs folder is laid out as the guide's (`tinyformer.lab.sources`: lab/gpt, experiments/ablation,
...), so the values it compares are read from both by the same code, and `sets(SOURCE)` gives the `--set`
overrides the guide's build trains SOURCE with at this size: the size changes step counts and widths, never
the code a learner reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.lab.guide_facts import read_facts

SIZES = {
    "ci": "seconds per cell, every run at the size the tests use: the numbers check the code, they answer nothing",
    "laptop": "the guide's own sizes: each headline result on a 2-core CPU, within the hour the guide's build takes",
    "full": "the laptop size, and what the guide's hour leaves out (the course's recipes beyond it, the speedrun, "
    "the budgets study's 1-minute budget)",
}
SIZE_ENV, RUNS_ENV, ROOT_ENV = "TINYFORMER_SIZE", "TINYFORMER_RUNS", "TINYFORMER_ROOT"
FACTS = Path("docs") / "lab" / "facts.json"


def size_from_env() -> str:
    size = os.environ.get(SIZE_ENV, "laptop").strip() or "laptop"
    if size not in SIZES:
        raise UserError(f"{SIZE_ENV}={size!r} is not one of {', '.join(SIZES)}")
    return size


def find_root(start: Path | None = None) -> Path:
    """The repository the notebook sits in ($TINYFORMER_ROOT, else the first folder up from here that holds
    the guide's facts.json)."""
    if os.environ.get(ROOT_ENV):
        return checked_root(os.environ[ROOT_ENV], f"{ROOT_ENV}={os.environ[ROOT_ENV]!r}")
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        if (folder / FACTS).is_file():
            return folder
    raise UserError(f"no {FACTS} above {here}: open the notebook inside a clone of tinyformer, or set {ROOT_ENV}")


def checked_root(root: str | Path, said: str) -> Path:
    """`root` (as `said`: the variable or argument that gave it) as a folder holding a tinyformer clone."""
    try:
        folder = Path(root).expanduser().resolve()
    except RuntimeError:  # "~someone" of no such user
        raise UserError(f"{said}: no such home folder; give the path of a clone of tinyformer") from None
    if not folder.is_dir():
        raise UserError(f"{said} is not a folder; give the path of a clone of tinyformer")
    if not (folder / FACTS).is_file():
        raise UserError(f"{said} holds no tinyformer repository (no {FACTS}); give the path of a clone of tinyformer")
    return folder


@dataclass
class Guide:
    page: str  # the guide's page the notebook is made from, e.g. "1-char-gpt"
    size: str = ""  # ci | laptop | full (default: $TINYFORMER_SIZE, else laptop)
    runs: Path | None = None  # where its runs go (default: $TINYFORMER_RUNS, else ROOT/runs/notebooks/SIZE)
    root: Path | None = None  # the repository (default: `find_root`)

    def __post_init__(self) -> None:
        self.size = self.size or size_from_env()
        if self.size not in SIZES:
            raise UserError(f"size={self.size!r} is not one of {', '.join(SIZES)}")
        self.root = checked_root(self.root, f"root={str(self.root)!r}") if self.root else find_root()
        default = self.root / "runs" / "notebooks" / self.size
        self.runs = Path(self.runs or os.environ.get(RUNS_ENV) or default).resolve()
        self.facts = read_facts(self.root / FACTS)

    @property
    def quick(self) -> bool:
        """Studies at their --quick size (ci)."""
        return self.size == "ci"

    @property
    def full(self) -> bool:
        return self.size == "full"

    def describe(self) -> str:
        from tinyformer.device import machine, pick_device

        m = machine()
        return (
            f"size {self.size}: {SIZES[self.size]}\nruns: {self.runs}\n"
            f"machine: {m['cpu']}{', ' + m['gpu'] if m['gpu'] else ''}, torch {m['torch']}; "
            f"device auto: {pick_device('auto').type}"
        )

    def sets(self, source: str) -> list[str]:
        """The `--set` overrides the guide's build trains `source` (e.g. "lab/gpt") with at this size."""
        from tinyformer.lab.sources import SOURCES

        if source not in SOURCES:
            raise UserError(f"the guide has no source {source!r}")
        (argv, *_) = SOURCES[source].argv(self.quick)
        return [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]

    def compare(self, *keys: str) -> Comparison:
        """For each placeholder of the guide ("lab/gpt: best val loss", "experiments/ablation: baseline / best
        val loss | .4f"): the value this notebook's runs give and the value the guide quotes, with the stamp
        (commit, date, machine) of each source the guide's values come from."""
        from tinyformer.lab.placeholders import made_text

        rows = [self._row(k) for k in keys]
        stamps = {}
        for name in dict.fromkeys(r[0].split(": ", 1)[0] for r in rows):
            stamp = self.facts.get("stamps", {}).get(name)
            made = made_text(stamp, self.facts.get("stale", {}).get(name)) if stamp else "not stamped"
            stamps[name] = f"{made}, on {self.facts.get('machines', {}).get(name, 'an unrecorded machine')}"
        return Comparison(rows, stamps, self.size)

    def quoted(self, key: str) -> str:
        """The value the guide quotes for one placeholder, with where and when it was made."""
        comparison = self.compare(key)
        return f"{comparison.rows[0][2]} (the guide's, made at {next(iter(comparison.stamps.values()))})"

    def _row(self, text: str) -> tuple[str, str, str]:
        from tinyformer.lab.placeholders import PLACEHOLDER, key
        from tinyformer.lab.sources import SOURCES, facts, shown_value
        from tinyformer.runfolder import METRICS

        m = PLACEHOLDER.fullmatch("{{" + text + "}}")
        if m is None or m.group(1) or m.group(2) not in SOURCES:
            raise UserError(f"{text!r} is not a fact of the guide (SOURCE: FACT [| FORMAT])")
        name, fact, spec = m.group(2), m.group(3).strip(), m.group(4)
        source = SOURCES[name]
        folder = self.runs / source.path
        mine = "not made yet"
        if (folder / source.done).is_file() or (folder / METRICS).is_file():
            try:
                mine = shown_value(facts(source, folder), name, fact, spec)
            except UserError:
                mine = "not at this size"
        return f"{name}: {fact}", mine, self.facts.get("values", {}).get(key(m), "not in the guide")


@dataclass
class Comparison:
    rows: list[tuple[str, str, str]]  # (what, this notebook's value, the guide's)
    stamps: dict[str, str]  # source -> where and when the guide's values of it were made
    size: str

    def _repr_markdown_(self) -> str:
        lines = [f"| what | this notebook ({self.size}) | the guide |", "|---|---|---|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self.rows]
        lines += [""] + [f"The guide's `{name}`: made at {made}.  " for name, made in self.stamps.items()]
        if self.size == "ci" and any(mine != quoted for _, mine, quoted in self.rows):
            lines += ["*At ci size this notebook's numbers check the code; they answer nothing.*"]
        return "\n".join(lines)

    def __repr__(self) -> str:
        width = max(len(r[0]) for r in self.rows)
        lines = [f"{'what':<{width}}  {'this notebook':>16}  {'the guide':>16}"]
        lines += [f"{r[0]:<{width}}  {r[1]:>16}  {r[2]:>16}" for r in self.rows]
        return "\n".join(lines + [f"the guide's {name}: made at {made}" for name, made in self.stamps.items()])

    def __getitem__(self, what: str) -> tuple[str, str]:
        """(this notebook's value, the guide's) of one row."""
        row = next((r for r in self.rows if r[0] == what), None)
        if row is None:
            raise KeyError(what)
        return row[1], row[2]


def chinese_bert(runs: Path, sentence: str = "他用望远镜看到了那只鸟") -> str:
    """bert-base-chinese when it loads (cached, or the network allows), else a small BERT with random weights
    whose vocabulary is `sentence`'s characters, saved under `runs`: it draws every view of the course's
    experiment with Chinese labels, but what its heads do means nothing."""
    from tinyformer.hub import hub_reachable

    cached = Path.home() / ".cache" / "huggingface" / "hub" / "models--bert-base-chinese"
    if cached.is_dir() or hub_reachable():
        return "bert-base-chinese"
    import torch
    import transformers
    from transformers.utils import logging

    logging.disable_progress_bar()
    folder = runs / "bert-zh-offline"
    if not (folder / "config.json").is_file():
        vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(sentence)]
        transformers.BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=False).save_pretrained(
            folder
        )
        torch.manual_seed(0)
        shape = dict(hidden_size=48, num_hidden_layers=12, num_attention_heads=12, intermediate_size=96)
        transformers.BertModel(transformers.BertConfig(vocab_size=len(vocab), **shape)).save_pretrained(folder)
    print(f"bert-base-chinese is not reachable from here: {folder} stands in (random weights, the same views)")
    return str(folder)
