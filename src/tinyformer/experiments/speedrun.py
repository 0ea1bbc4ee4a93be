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

What a command reaches in a fixed time (1 to 30 minutes) is the budgets study's question (`budgets.py`).

`--nanogpt DIR` also runs nanoGPT's tuned CPU command (`experiments/nanogpt.py`) from a checkout at DIR, on the same
text split the same way, each run after one of the preset's, and puts it on the same figure. nanoGPT trains in
fp32 on a CPU (it autocasts on GPUs only); ours in `train.precision=auto`, bf16 where the CPU has it.

    tinyformer experiment speedrun [--quick] [--out DIR] [--nanogpt DIR]

The cells and what a run measures are in `speedrun_cells.py`, nanoGPT's side in `nanogpt.py`; this module is the
tricks, the order the study runs in and its report.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.experiments.nanogpt import preset_and_nanogpt
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.speedrun_cells import (
    BUDGET_S,
    PRESET,
    QUICK_SEEDS,
    SEEDS,
    TARGET,
    Group,
    Spec,
    train_groups,
)
from tinyformer.files import make_dir, write_text
from tinyformer.plots import plot_series


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
BASELINE: Spec = ("baseline", [], "the CPU preset gpt_cpu_quick")


def trick_spec(t: Trick) -> Spec:
    return t.name, list(t.overrides), t.about


def pays(g: Group, base: Group) -> bool:
    """A trick pays when it needs fewer steps to the target (a count no other job on the machine can move) and
    less time (what the user waits for: a cheaper step count is no use if each step costs more)."""
    return g.median_steps < base.median_steps and g.median_time < base.median_time


def combination_specs(best_tricks: list[Trick]) -> list[Spec]:
    """The cell "best": every trick that paid, together; with two or more, "best" with each one removed in turn."""
    specs = []
    if best_tricks:
        specs.append(("best", [o for t in best_tricks for o in t.overrides], "+".join(t.name for t in best_tricks)))
    if len(best_tricks) > 1:
        specs += [
            (f"best-no-{t.name}", [o for u in best_tricks if u is not t for o in u.overrides], f"best - {t.name}")
            for t in best_tricks
        ]
    return specs


# ---- the report ---------------------------------------------------------------------------------------------
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


def table_of(groups: list[Group], base: Group, nano: Group | None) -> str:
    cols = ["cell", "what", "reached", f"median steps to {TARGET}", "median s", "range s", "vs baseline"]
    cols += [*(["vs nanoGPT"] if nano else []), "median tokens/s", f"best val in {BUDGET_S:.0f} s (range)"]
    return markdown_table(cols, [row(g, base, nano) for g in groups])


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


def findings(tricks: tuple[Trick, ...], alone: list[Group], base: Group, best: Group) -> list[str]:
    """The report's verdicts: one line per trick, then the best combination (verdicts.md, quoted by the guide)."""
    return [
        *verdicts(tricks, alone, base),
        "",
        f"Best combination: {best.about if best is not base else 'none: no trick paid, so the baseline stays'}. "
        "A step count is the same whatever else the machine runs; a time is not: read the tokens/s column for "
        "how much the machine itself moved between runs.",
    ]


def cell_figures(groups: list[Group]) -> dict:
    """figures.json's "cells": each cell's times and steps to the target, speeds and best val losses."""
    return {
        g.name: {
            "times": g.times,
            "steps": g.steps,
            "tokens_per_s": g.speeds,
            "bests": g.bests,
            "median_time": finite(g.median_time),
        }
        for g in groups
    }


def nanogpt_part(preset: Group, nano: Group, base: Group, best: Group, commit: str, command, seeds):
    """-> (figures.json's "nanogpt", the report's paragraphs on the preset against nanoGPT)."""
    figures = {
        "commit": commit,
        "command": " ".join(command),
        "preset_over_nanogpt": finite(preset.median_time / nano.median_time),
        "best_over_nanogpt": finite(best.median_time / nano.median_time),
        "baseline_over_nanogpt": finite(base.median_time / nano.median_time),
    }
    return figures, [
        f"**configs/{PRESET}.toml against nanoGPT: {ratio_text(preset.median_time, nano.median_time)}** its "
        f"median time to {TARGET} ({seconds(preset.median_time)} s against {seconds(nano.median_time)} s); the "
        f"baseline {ratio_text(base.median_time, nano.median_time)}. Measured in this run, one after the other.",
        "",
        f"nanoGPT at commit `{commit}`, run from its checkout as `{' '.join(command)}` "
        f"(its seed is fixed: its {len(seeds)} runs differ only by the machine's noise; it trains in fp32 "
        "on a CPU, ours in bf16 autocast where the CPU has it).",
    ]


# ---- the study ----------------------------------------------------------------------------------------------
def run(out: Path | None = None, quick: bool = False, data: str | None = None, nanogpt: str | None = None) -> Path:
    from tinyformer.data.tinyshakespeare import read_text, resolve_path

    seeds, tricks = (QUICK_SEEDS, QUICK_TRICKS) if quick else (SEEDS, TRICKS)
    checkout = Path(nanogpt).expanduser() if nanogpt else None
    if checkout is not None and not (checkout / "train.py").is_file():
        raise UserError(f"--nanogpt {nanogpt!r}: no nanoGPT checkout there (its train.py)")
    folder = make_dir(Path(out or f"runs/experiments/speedrun{'-quick' if quick else ''}"))

    base, *alone = train_groups([BASELINE] + [trick_spec(t) for t in tricks], seeds, folder, quick, data)
    best_tricks = [t for t, g in zip(tricks, alone, strict=True) if pays(g, base)]
    best, without = base, []
    if specs := combination_specs(best_tricks):
        best, *without = train_groups(specs, seeds, folder, quick, data)
    text = read_text(resolve_path(data)) if checkout is not None else ""
    preset, nano, commit, command = preset_and_nanogpt(checkout, text, seeds, folder, quick, data)

    groups = [base, *alone, *([best] if best is not base else []), *without, preset, *([nano] if nano else [])]
    curves = {g.name: [(t, v) for t, v, _ in g.curves[0]] for g in groups}
    title = f"Val loss against training time, seed {seeds[0]} (nanoGPT: its own seed)"
    plot_series(curves, folder / "val_vs_time.png", "training seconds", "val loss", title, target=TARGET)
    figures = {"target": TARGET, "budget_s": BUDGET_S, "seeds": list(seeds), "best": [t.name for t in best_tricks]}
    figures["cells"] = cell_figures(groups)
    table = table_of(groups, base, nano)
    said = findings(tricks, alone, base, best)
    write_text(folder / "table.md", table + "\n")  # the guide quotes both as they are
    write_text(folder / "verdicts.md", "\n".join(said) + "\n")
    parts = [table, "", figure("val_vs_time.png", "val loss against training seconds"), ""]
    parts += ["## What each trick does here", "", *said, ""]
    if nano is not None:
        figures["nanogpt"], against = nanogpt_part(preset, nano, base, best, commit, command, seeds)
        parts += against
    return write_report(
        folder, "Time to result: the speedrun's tricks at 0.8M parameters", quick, parts, figures=figures
    )
