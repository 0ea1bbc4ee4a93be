"""Time to result: which of the GPT-2 speedrun's tricks still pay for the character GPT on a CPU.

The public GPT-2 speedrun went from 45 minutes to about a minute and a quarter mostly by needing fewer tokens.
This study asks which of its tricks buy time at 0.8M parameters on a laptop CPU, each as a config switch of
MiniGPT (see `tinyformer.models.gpt` and `tinyformer.train.optim`):

1. the CPU preset `gpt_cpu_quick` (the baseline), then each trick added to it alone;
2. "best": every trick whose median time to the target beat the baseline's, together; then "best" with each of
   them removed in turn (what each still adds in company).

Every cell trains with 3 seeds (`train.seed`), evaluating every 100 steps, until the first evaluation at val
loss <= 1.88 (`train.stop_at`) or the end of its schedule (the CPU preset's 3,000 steps; fewer where a cell
shortens it). The seeds run in turn (every cell's first seed, then
every cell's second, ...), and the preset in turn with nanoGPT's runs, so the machine's drift is spread over the
cells compared rather than landing on one. Per run: the training seconds to that evaluation
(evaluations excluded), and the best val loss within the first `BUDGET_S` seconds of training.

3. What the preset and nanoGPT reach in 1, 3 and 10 minutes of training (`BUDGETS`): each command's schedule
   sized to end at the budget (its steps = the budget x the steps per training second it ran at above), so the
   learning rate has decayed when time is up, as a user with that much time would set it.

`--nanogpt DIR` also runs nanoGPT's tuned CPU command (`NANOGPT_ARGS`) from a checkout at DIR, on the same
text split the same way, each run after one of the preset's, and puts it on the same figure. nanoGPT trains in
fp32 on a CPU (it autocasts on GPUs only); ours in `train.precision=auto`, bf16 where the CPU has it.

    tinyformer experiment speedrun [--quick] [--out DIR] [--nanogpt DIR]
"""

from __future__ import annotations

import json
import pickle
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tinyformer.config import load_toml
from tinyformer.errors import UserError
from tinyformer.experiments.gpt_studies import BASE_PRESET, run_study
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import Cell, CellResult
from tinyformer.files import make_dir, write_text
from tinyformer.plots import plot_series

TARGET = 1.88  # val loss (nats per character) that every cell is timed to
BUDGET_S = 10.0  # seconds of training after which each run's best val loss is compared
SEEDS, QUICK_SEEDS = (1337, 1, 2), (1337,)
BUDGETS = {1: SEEDS, 3: SEEDS, 10: SEEDS[:1]}  # minutes of training -> seeds (3 seeds of ten minutes: 40 more)
QUICK_BUDGETS = {0.01: QUICK_SEEDS}
EVALS = 5  # evaluations in a budget run, the last at its end (and one at step 0)
EVERY = ["train.eval_interval=100", "train.eval_iters=50"]  # the target is checked every 100 steps
STOP = f"train.stop_at=loss<={TARGET}"  # and a run ends at the first evaluation that meets it


@dataclass(frozen=True)
class Trick:
    name: str
    overrides: tuple[str, ...]
    about: str


TRICKS = (
    Trick("muon", ("train.optimizer=muon",), "Muon for the blocks' weight matrices, AdamW for the rest"),
    Trick("qk-norm", ("model.qk_norm=true",), "queries and keys RMS-normalised per head"),
    Trick("relu2", ("model.ffn=relu2",), "ReLU² MLP instead of GELU"),
    Trick("zero-init", ("model.zero_init=true",), "attention and MLP output projections start at zero"),
    Trick("softcap", ("model.logit_softcap=15",), "logits soft-capped at 15"),
    Trick("wsd", ("train.schedule=wsd",), "warmup-stable-decay (the last 20% decays) instead of cosine"),
    Trick("seq-warmup", ("data.seq_warmup=300",), "the window grows from 8 to 64 tokens over 300 steps"),
    Trick("rope", ("model.positions=rope",), "rotary positions instead of learned ones"),
    Trick("tied", ("model.tie_weights=true",), "the head tied to the token embedding"),
    Trick("short", ("train.max_iters=1200",), "the cosine ends at step 1,200 (the baseline meets 1.88 there)"),
)
QUICK_TRICKS = TRICKS[:2]
PRESET = "gpt_speedrun"  # configs/gpt_speedrun.toml: the fastest combination found, timed as a cell of its own

# nanoGPT's CPU command from its README, tuned (a 10x learning rate, a short warmup), evaluated every 100 steps
NANOGPT_ARGS = (
    "config/train_shakespeare_char.py --device=cpu --compile=False --block_size=64 --batch_size=12 --n_layer=4 "
    "--n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --learning_rate=3e-3 "
    "--warmup_iters=50 --eval_interval=100 --log_interval=1"
).split()
NANOGPT_QUICK = ["--max_iters=20", "--lr_decay_iters=20", "--eval_interval=10", "--eval_iters=2"]
NANOGPT_TOKENS = 12 * 64  # tokens per iteration of that command: batch_size x block_size
DATASET = "tinyformer_char"  # the folder under the checkout's data/ that holds the text in nanoGPT's format


# ---- our cells ----------------------------------------------------------------------------------------------
def seeded(name: str, overrides: list[str], about: str, seeds: tuple[int, ...]) -> list[Cell]:
    return [Cell(f"{name}-seed{s}", [*overrides, STOP, f"train.seed={s}"], about) for s in seeds]


Point = tuple[float, float, int]  # (training seconds, val loss, step) at one evaluation


def first_reach(curve: list[Point], target: float) -> Point | None:
    """The first evaluation at or under `target` (None: never)."""
    return next((p for p in curve if p[1] <= target), None)


def best_within(curve: list[Point], seconds: float) -> float:
    """The lowest val loss among the evaluations made within `seconds` of training (step 0's at least)."""
    return min(v for t, v, _ in curve if t <= seconds or t == curve[0][0])


def curve(r: CellResult) -> list[Point]:
    return [(m["train_seconds"], m["loss"], m["step"]) for m in r.metrics if m.get("split") == "val" and "loss" in m]


def median_or_inf(xs: list[float | None]) -> float:
    """The median, a run that never reached the target counting as infinitely slow."""
    return statistics.median(x if x is not None else float("inf") for x in xs)


@dataclass
class Group:
    """One cell's runs over the seeds, and each run's median training speed (tokens per second)."""

    name: str
    about: str
    curves: list[list[Point]]
    speeds: list[float]

    @property
    def times(self) -> list[float | None]:
        return [p[0] if (p := first_reach(c, TARGET)) else None for c in self.curves]

    @property
    def steps(self) -> list[int | None]:
        return [p[2] if (p := first_reach(c, TARGET)) else None for c in self.curves]

    @property
    def median_time(self) -> float:
        return median_or_inf(self.times)

    @property
    def median_steps(self) -> float:
        return median_or_inf(self.steps)

    @property
    def bests(self) -> list[float]:
        return [best_within(c, BUDGET_S) for c in self.curves]


def speed(r: CellResult) -> float:
    return statistics.median(m["tokens_per_s"] for m in r.metrics if m.get("split") == "train" and "tokens_per_s" in m)


Spec = tuple[str, list[str], str]  # a cell: (name, overrides, what it is)


def train_groups(specs: list[Spec], seeds, out: Path, quick: bool, data) -> list[Group]:
    """Every cell of `specs` over `seeds`, seed by seed (each cell's first seed, then each one's second, ...), so
    a slow stretch of a shared machine lands on every cell a little rather than on one cell's every run."""
    cells = [c for s in seeds for name, overrides, about in specs for c in seeded(name, overrides, about, (s,))]
    _, results = run_study("speedrun", cells, out, quick, data, budget=EVERY)
    return [
        Group(name, about, [curve(r) for r in results[i :: len(specs)]], [speed(r) for r in results[i :: len(specs)]])
        for i, (name, _, about) in enumerate(specs)
    ]


def trick_spec(t: Trick) -> Spec:
    return t.name, list(t.overrides), t.about


def pays(g: Group, base: Group) -> bool:
    """A trick pays when it needs fewer steps to the target (a count no other job on the machine can move) and
    less time (what the user waits for: a cheaper step count is no use if each step costs more)."""
    return g.median_steps < base.median_steps and g.median_time < base.median_time


def preset_overrides(name: str) -> list[str]:
    """Where a shipped preset differs from the study's base preset, as `section.key=value` overrides."""

    def literal(v) -> str:
        return json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else repr(v)

    base, layer = load_toml(BASE_PRESET), load_toml(name)
    return [
        f"{sec}.{k}={literal(v)}"
        for sec, keys in layer.items()
        if isinstance(keys, dict)
        for k, v in keys.items()
        if base.get(sec, {}).get(k) != v
    ]


# ---- nanoGPT ------------------------------------------------------------------------------------------------
def nanogpt_data(checkout: Path, text: str) -> Path:
    """Write `text` in nanoGPT's character format (sorted characters, the first 90% to train.bin, uint16 ids,
    meta.pkl with vocab_size, itos and stoi) under checkout/data/DATASET; -> that folder."""
    import numpy as np

    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(len(text) * 0.9)  # the same split as ours: the last 10% of the characters are the val text
    folder = make_dir(checkout / "data" / DATASET)
    ids[:n].tofile(folder / "train.bin")
    ids[n:].tofile(folder / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))
    return folder


STEP = re.compile(r"^step (\d+): train loss [\d.]+, val loss ([\d.]+)")
ITER = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")


def nanogpt_curve(log: str) -> list[Point]:
    """nanoGPT's printed log -> (training seconds, val loss) at each evaluation. Its `time` of an iteration that
    starts with an evaluation (and a checkpoint) includes them; that one counts as the median iteration, so the
    seconds, like ours, leave evaluations out. The val loss printed at step N is that of the first N steps."""
    vals = {int(m[1]): float(m[2]) for m in map(STEP.match, log.splitlines()) if m}
    times = {int(m[1]): float(m[2]) / 1e3 for m in map(ITER.match, log.splitlines()) if m}
    if not vals or not times:
        raise UserError("nanoGPT's log has no 'step N: ... val loss' or 'iter N: ... time' lines; see its log file")
    every = sorted(vals)
    plain = statistics.median(dt for i, dt in times.items() if i not in vals)
    dt = [plain if i in vals else times.get(i, plain) for i in range(max(every) + 1)]
    return [(sum(dt[:n]), vals[n], n) for n in every]


def nanogpt_run(checkout: Path, command: list[str], log_file: Path) -> str:
    """nanoGPT's `command` run in `checkout` (unless `log_file` already holds a finished run) -> its log."""
    if not log_file.is_file() or "iter " not in log_file.read_text():
        out = f"--out_dir={log_file.with_suffix('').resolve()}"
        done = subprocess.run([sys.executable, *command[1:], out], cwd=checkout, capture_output=True, text=True)
        if done.returncode:
            write_text(log_file.with_suffix(".err"), done.stdout + done.stderr)
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"nanoGPT ended with exit code {done.returncode}: {last}")
        write_text(log_file, done.stdout)
    return log_file.read_text()


def preset_and_nanogpt(checkout: Path | None, text: str, seeds, folder: Path, quick: bool, data):
    """The preset's runs and, from a nanoGPT checkout, nanoGPT's command as many times, in turn (ours, theirs,
    ours, ...): the ratio the study answers is measured side by side. -> (preset, nanoGPT or None, the
    checkout's commit, the command)."""
    spec = (PRESET, preset_overrides(PRESET), f"configs/{PRESET}.toml")
    if checkout is None:
        return train_groups([spec], seeds, folder, quick, data)[0], None, "", []
    if not (checkout / "train.py").is_file() or not (checkout / "model.py").is_file():
        raise UserError(f"--nanogpt {str(checkout)!r}: no nanoGPT checkout there (train.py and model.py)")
    nanogpt_data(checkout, text)
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    command = ["python", "train.py", *NANOGPT_ARGS, *(NANOGPT_QUICK if quick else []), f"--dataset={DATASET}"]
    ours, curves, speeds = [], [], []
    for k, seed in enumerate(seeds):
        ours.append(train_groups([spec], (seed,), folder, quick, data)[0])
        log = nanogpt_run(checkout, command, folder / f"nanogpt-{k}.log")
        curves.append(nanogpt_curve(log))
        times = [float(m[2]) / 1e3 for m in map(ITER.match, log.splitlines()) if m]
        speeds.append(NANOGPT_TOKENS / statistics.median(times))
    preset = Group(spec[0], spec[2], [g.curves[0] for g in ours], [g.speeds[0] for g in ours])
    nano = Group("nanoGPT", "nanoGPT's tuned CPU command", curves, speeds)
    return preset, nano, commit.stdout.strip() or "unknown", command


# ---- time budgets -------------------------------------------------------------------------------------------
def steps_per_second(g: Group) -> float:
    """Median over its runs of the steps per training second at each run's last evaluation."""
    return statistics.median(c[-1][2] / c[-1][0] for c in g.curves if c[-1][0] > 0)


def steps_in(seconds: float, per_second: float) -> int:
    """The steps that fill `seconds` of training at `per_second`: a multiple of EVALS, at least EVALS."""
    n = round(seconds * per_second)
    return max(EVALS, n - n % EVALS)


@dataclass
class Budget:
    """One command's runs sized to `minutes` of training: `steps` each, their curves."""

    minutes: float
    steps: int
    curves: list[list[Point]]

    @property
    def bests(self) -> list[float]:
        return [min(v for _, v, _ in c) for c in self.curves]

    @property
    def seconds(self) -> list[float]:
        return [c[-1][0] for c in self.curves]

    def text(self) -> list[str]:
        b, s = self.bests, self.seconds
        spread = f" ({min(b):.4f}-{max(b):.4f})" if len(b) > 1 else ""
        return [f"{self.steps:,}", f"{statistics.median(b):.4f}{spread}", f"{statistics.median(s):.0f}", str(len(b))]


def budget_row(b: Budget, nano: Budget | None) -> list[str]:
    return [f"{b.minutes:g}", *b.text(), *(nano.text() if nano else [])]


def budget_runs(preset: Group, nano: Group | None, checkout, command, folder: Path, quick: bool, data):
    """The preset's and nanoGPT's runs sized to each budget of BUDGETS, from the speeds of their runs above."""
    budgets = QUICK_BUDGETS if quick else BUDGETS
    ours, theirs = [], []
    for minutes, seeds in budgets.items():
        n = steps_in(minutes * 60, steps_per_second(preset))
        sized = [
            f"train.max_iters={n}",
            f"train.eval_interval={n // EVALS}",
            *([] if quick else ["train.eval_iters=100"]),
        ]
        about = f"configs/{PRESET}.toml sized to {minutes:g} minutes"
        cells = [
            Cell(f"{PRESET}-{minutes:g}min-seed{s}", [*preset_overrides(PRESET), *sized, f"train.seed={s}"], about)
            for s in seeds
        ]
        _, results = run_study("speedrun", cells, folder, quick, data)
        ours.append(Budget(minutes, n, [curve(r) for r in results]))
    for minutes in budgets if nano is not None else ():
        n = steps_in(minutes * 60, steps_per_second(nano))
        sized = [f"--max_iters={n}", f"--lr_decay_iters={n}", f"--eval_interval={n // EVALS}"]
        log = nanogpt_run(checkout, [*command, *sized], folder / f"nanogpt-{minutes:g}min.log")
        theirs.append(Budget(minutes, n, [nanogpt_curve(log)]))
    return ours, theirs


def budget_part(ours: list[Budget], theirs: list[Budget], folder: Path) -> list[str]:
    """The report's section on the time budgets: a table and the curves of each budget's first run."""
    cols = ["minutes", "steps", "best val (median, range)", "training s", "seeds"]
    cols += ["nanoGPT steps", "nanoGPT best val", "nanoGPT training s", "nanoGPT runs"] if theirs else []
    rows = [budget_row(b, n) for b, n in zip(ours, theirs or [None] * len(ours), strict=True)]
    curves = {f"{PRESET}, {b.minutes:g} min": [(t, v) for t, v, _ in b.curves[0]] for b in ours}
    curves |= {f"nanoGPT, {b.minutes:g} min": [(t, v) for t, v, _ in b.curves[0]] for b in theirs}
    plot_series(curves, folder / "budgets.png", "training seconds", "val loss", "Each schedule sized to its budget")
    return [
        "## Best val loss in a time budget",
        "",
        f"configs/{PRESET}.toml{' and nanoGPT' if theirs else ''} with the schedule sized to end at each budget "
        "(steps = the budget x the steps per training second measured above; the learning rate has decayed when "
        "time is up). Training seconds leave evaluations out; a run a little over its budget ran slower than the "
        "runs that sized it. nanoGPT's seed is fixed, so one run per budget.",
        "",
        markdown_table(cols, rows),
        "",
        figure("budgets.png", "val loss against training seconds, each schedule sized to its budget"),
    ]


# ---- the study ----------------------------------------------------------------------------------------------
def finite(t: float) -> float | None:
    return None if t == float("inf") else t


def seconds(t: float | None) -> str:
    return "not reached" if t is None or t == float("inf") else f"{t:.1f}"


def ratio_text(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if 0 < b < float("inf") and a < float("inf") else "-"


def row(g: Group, base: Group, nano: Group | None) -> list:
    reached = [t for t in g.times if t is not None]
    spread = f"{min(reached):.1f}-{max(reached):.1f}" if reached else "-"
    steps = "-" if g.median_steps == float("inf") else f"{g.median_steps:,.0f}"
    return [
        g.name,
        g.about,
        f"{len(reached)}/{len(g.times)}",
        steps,
        seconds(g.median_time),
        spread,
        ratio_text(g.median_time, base.median_time),
        *([ratio_text(g.median_time, nano.median_time)] if nano else []),
        f"{statistics.median(g.speeds) / 1e3:,.1f}k",
        f"{statistics.median(g.bests):.4f} ({min(g.bests):.4f}-{max(g.bests):.4f})",
    ]


def verdicts(tricks: tuple[Trick, ...], alone: list[Group], base: Group) -> list[str]:
    """One line per trick, in the direction its numbers point."""
    out = []
    for t, g in zip(tricks, alone, strict=True):
        steps, time = ratio_text(g.median_steps, base.median_steps), ratio_text(g.median_time, base.median_time)
        speed = statistics.median(g.speeds) / statistics.median(base.speeds)
        if pays(g, base):
            what = "pays: fewer steps and less time"
        elif g.median_steps < base.median_steps:
            what = f"needs fewer steps, but each costs more here ({speed:.2f}x the tokens/s), so no time is saved"
        elif g.median_time < base.median_time:
            what = "as many steps or more; its shorter time is the machine's noise, not the trick"
        else:
            what = "does not pay here"
        out.append(f"- **{t.name}** ({t.about}): {steps} the steps and {time} the time of the baseline; {what}.")
    return out


def run(out: Path | None = None, quick: bool = False, data: str | None = None, nanogpt: str | None = None) -> Path:
    from tinyformer.data.tinyshakespeare import read_text, resolve_path

    seeds, tricks = (QUICK_SEEDS, QUICK_TRICKS) if quick else (SEEDS, TRICKS)
    checkout = Path(nanogpt).expanduser() if nanogpt else None
    if checkout is not None and not (checkout / "train.py").is_file():
        raise UserError(f"--nanogpt {nanogpt!r}: no nanoGPT checkout there (its train.py)")
    folder = make_dir(Path(out or f"runs/experiments/speedrun{'-quick' if quick else ''}"))

    def groups_of(specs: list[Spec]) -> list[Group]:
        return train_groups(specs, seeds, folder, quick, data)

    base, *alone = groups_of([("baseline", [], "the CPU preset gpt_cpu_quick")] + [trick_spec(t) for t in tricks])
    best_tricks = [t for t, g in zip(tricks, alone, strict=True) if pays(g, base)]
    best, without = base, []
    specs = []
    if best_tricks:
        specs.append(("best", [o for t in best_tricks for o in t.overrides], "+".join(t.name for t in best_tricks)))
    if len(best_tricks) > 1:
        specs += [
            (f"best-no-{t.name}", [o for u in best_tricks if u is not t for o in u.overrides], f"best - {t.name}")
            for t in best_tricks
        ]
    if specs:
        best, *without = groups_of(specs)
    text = read_text(resolve_path(data)) if checkout is not None else ""
    preset, nano, commit, command = preset_and_nanogpt(checkout, text, seeds, folder, quick, data)

    ours_b, nano_b = budget_runs(preset, nano, checkout, command, folder, quick, data)

    groups = [base, *alone, *([best] if best is not base else []), *without, preset, *([nano] if nano else [])]
    curves = {g.name: [(t, v) for t, v, _ in g.curves[0]] for g in groups}
    title = f"Val loss against training time, seed {seeds[0]} (nanoGPT: its own seed)"
    plot_series(curves, folder / "val_vs_time.png", "training seconds", "val loss", title, target=TARGET)
    cols = ["cell", "what", "reached", f"median steps to {TARGET}", "median s", "range s", "vs baseline"]
    cols += [*(["vs nanoGPT"] if nano else []), "median tokens/s", f"best val in {BUDGET_S:.0f} s (range)"]
    figures = {
        "target": TARGET,
        "budget_s": BUDGET_S,
        "seeds": list(seeds),
        "best": [t.name for t in best_tricks],
        "cells": {
            g.name: {
                "times": g.times,
                "steps": g.steps,
                "tokens_per_s": g.speeds,
                "bests": g.bests,
                "median_time": finite(g.median_time),
            }
            for g in groups
        },
    }
    table = markdown_table(cols, [row(g, base, nano) for g in groups])
    said = [
        *verdicts(tricks, alone, base),
        "",
        f"Best combination: {best.about if best is not base else 'none: no trick paid, so the baseline stays'}. "
        "A step count is the same whatever else the machine runs; a time is not: read the tokens/s column for "
        "how much the machine itself moved between runs.",
    ]
    write_text(folder / "table.md", table + "\n")  # the guide quotes both as they are
    write_text(folder / "verdicts.md", "\n".join(said) + "\n")
    parts = [
        table,
        "",
        figure("val_vs_time.png", "val loss against training seconds"),
        "",
        "## What each trick does here",
        "",
        *said,
        "",
    ]
    if nano is not None:
        figures["nanogpt"] = {
            "commit": commit,
            "command": " ".join(command),
            "preset_over_nanogpt": finite(preset.median_time / nano.median_time),
            "best_over_nanogpt": finite(best.median_time / nano.median_time),
            "baseline_over_nanogpt": finite(base.median_time / nano.median_time),
        }
        parts += [
            f"**configs/{PRESET}.toml against nanoGPT: {ratio_text(preset.median_time, nano.median_time)}** its "
            f"median time to {TARGET} ({seconds(preset.median_time)} s against {seconds(nano.median_time)} s); the "
            f"baseline {ratio_text(base.median_time, nano.median_time)}. Measured in this run, one after the other.",
            "",
            f"nanoGPT at commit `{commit}`, run from its checkout as `{' '.join(command)}` "
            f"(its seed is fixed: its {len(seeds)} runs differ only by the machine's noise; it trains in fp32 "
            "on a CPU, ours in bf16 autocast where the CPU has it).",
        ]
    parts += ["", *budget_part(ours_b, nano_b, folder)]
    figures["budgets"] = {
        f"{b.minutes:g}": {
            name: {"steps": x.steps, "bests": x.bests, "seconds": x.seconds}
            for name, x in ((PRESET, b), ("nanoGPT", n))
            if x is not None
        }
        for b, n in zip(ours_b, nano_b or [None] * len(ours_b), strict=True)
    }
    return write_report(
        folder, "Time to result: the speedrun's tricks at 0.8M parameters", quick, parts, figures=figures
    )
