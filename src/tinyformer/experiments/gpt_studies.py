"""The MiniGPT lab's questions as studies, each one command that trains a grid and writes `report.md`.

- `ablation`   depth 4 vs 1, heads 4 vs 1 at fixed width, and the causal mask removed (Radford et al., 2018's
               decoder needs it: without it the teacher-forced loss can read the answer).
- `scale`      8 layers and width 256 beside the base model: parameter formula vs count, loss vs step and vs
               wall time, tokens per parameter next to Chinchilla's ~20 (Hoffmann et al., 2022).
- `positions`  learned, sinusoidal and rotary positions past the trained context: `positions.py`, on this
               module's base (`run_study`), as the other GPT studies are.

    tinyformer experiment ablation|scale [--quick] [--out DIR]

The full size is the real answer (minutes on a laptop CPU); `--quick` only checks the pipeline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from tinyformer.config import load_toml
from tinyformer.experiments.report import figure, markdown_table, study_folder, write_report
from tinyformer.experiments.runner import Cell, CellResult, run_grid
from tinyformer.files import write_text
from tinyformer.models import count_parameters
from tinyformer.plots import plot_series
from tinyformer.tasks.gpt import text_loss

# The base of every study: the CPU preset, gpt_cpu_quick (val ~1.65 in a minute or two on 2 cores), evaluated
# more often and on fewer batches, so that the curves have points.
BASE_PRESET = "gpt_cpu_quick"
BASE = ["train.eval_interval=250", "train.eval_iters=50"]
QUICK = [
    "model.block_size=32",
    "model.n_embd=32",
    "model.n_layer=2",
    "train.max_iters=30",
    "train.eval_interval=10",
    "train.eval_iters=2",
    "train.warmup_iters=5",
    "sample.tokens=60",
]
SAMPLE_CHARS = 300


# ---- shared measurements --------------------------------------------------------------------------------
@torch.no_grad()
def sample_text(r: CellResult, n: int = SAMPLE_CHARS) -> str:
    """`n` characters continuing "\\n", with the run's own sampling settings (seeded)."""
    from dataclasses import replace

    from tinyformer.generate.sampling import generate_text

    return generate_text(r.run.model, r.run.tokenizer, replace(r.run.config.sample, tokens=n))[1:]


def write_samples(folder: Path, results: list[CellResult]) -> tuple[dict[str, str], list[str]]:
    """Each cell's `sample_text`, written to sample-CELL.txt (the guide quotes the files; the course asks how
    generation quality changes) -> ({cell: its sample}, the report's section showing them)."""
    samples = {r.cell.name: sample_text(r) for r in results}
    for name, text in samples.items():
        write_text(folder / f"sample-{name}.txt", text + "\n")
    heading = f"## Samples ({SAMPLE_CHARS} characters each, the run's own sampling settings, seed 1; sample-CELL.txt)"
    return samples, [heading, "", *(f"### {n}\n\n```\n{s}\n```\n" for n, s in samples.items())]


def best_val(r: CellResult) -> float:
    return min(v for _, v in r.series("val", "loss"))


def params(r: CellResult) -> int:
    return count_parameters(r.run.model)


def run_study(
    name: str, cells: list[Cell], out: Path | None, quick: bool, data: str | None, budget: list[str] = ()
) -> tuple[Path, list[CellResult]]:
    """Train or reuse every cell on BASE (+ the study's `budget`, or QUICK sizes instead of both)."""
    folder = study_folder(name, out, quick)
    extra = [*BASE, *(QUICK if quick else budget)] + ([f"data.path={json.dumps(data)}"] if data else [])
    return folder, run_grid("gpt", [load_toml(BASE_PRESET)], extra, cells, folder)


# ---- ablation -------------------------------------------------------------------------------------------
ABLATION = [
    Cell("baseline", [], "4 layers, 4 heads, width 128, causal mask"),
    Cell("1-layer", ["model.n_layer=1"], "one layer instead of four"),
    Cell("1-head", ["model.n_head=1"], "one head of width 128 instead of four of 32"),
    Cell("no-mask", ["model.causal=false"], "causal mask removed: every position sees the whole window"),
]


def ablation(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    folder, results = run_study("ablation", ABLATION, out, quick, data)
    base = results[0]
    curves = {r.cell.name: r.series("val", "loss") for r in results}
    plot_series(curves, folder / "val_loss.png", "step", "val loss (teacher-forced)", "Ablation: val loss")
    samples, shown = write_samples(folder, results)
    ids = {n: torch.tensor(base.run.tokenizer.encode(s)) for n, s in samples.items()}
    judged = {n: text_loss(base.run.model, x) for n, x in ids.items()}
    rows = [
        [r.cell.name, r.cell.about, params(r), best_val(r), judged[r.cell.name], f"{r.run.state.train_seconds:.0f}"]
        for r in results
    ]
    cols = ["cell", "what changes", "parameters", "best val loss", "its sample's loss under baseline", "train s"]
    nm, bl = best_val(results[-1]), best_val(base)
    verdict = (
        f"The no-mask model's val loss ({nm:.3f}) is {'lower' if nm < bl else 'not lower'} than the baseline's "
        f"({bl:.3f}){'. That number is cheating' if nm < bl else ' at this size, but any gain would be cheating'}"
        ": the teacher-forced loss scores position t against token t+1, and without the causal mask position t "
        "can attend to token t+1 and copy it. At generation time the next token does not exist yet, so the model "
        "has learned to read an answer that is never there. " + free_generation_verdict(judged)
    )
    parts = [
        markdown_table(cols, rows),
        "",
        "The last numeric column judges free generation: each cell's seeded sample, scored by the baseline "
        "model (mean cross-entropy per character, nats).",
        "",
        figure("val_loss.png", "val loss"),
        "",
        "## The model without a causal mask",
        "",
        verdict,
        "",
        *shown,
    ]
    return write_report(folder, "MiniGPT ablation: depth, heads, causal mask", quick, parts)


def free_generation_verdict(judged: dict[str, float]) -> str:
    """What the samples say, in the direction the numbers point."""
    nm, bl = judged["no-mask"], judged["baseline"]
    scores = (
        f"its {SAMPLE_CHARS}-character sample scores {nm:.3f} nats per character under the causal baseline, "
        f"against {bl:.3f} for the baseline's own sample (lower = more like the text the baseline learned; "
        "the baseline judging its own sample favours it somewhat)."
    )
    if nm > bl + 0.5:
        return "Its free generation shows it: " + scores
    return "Here the samples do not separate them clearly: " + scores


# ---- scale ----------------------------------------------------------------------------------------------
SCALE = [
    Cell("base", [], "4 layers, width 128"),
    Cell("deep-8", ["model.n_layer=8"], "8 layers, width 128"),
    Cell("wide-256", ["model.n_embd=256"], "4 layers, width 256 (4 heads of 64)"),
]
CHINCHILLA_TOKENS_PER_PARAM = 20  # Hoffmann et al. (2022): compute-optimal training sees ~20 tokens per parameter


def scale(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    from tinyformer.models.gpt import param_count

    folder, results = run_study("scale", SCALE, out, quick, data)
    by_step = {r.cell.name: r.series("val", "loss") for r in results}
    by_time = {r.cell.name: r.series("val", "train_seconds") for r in results}
    plot_series(by_step, folder / "loss_vs_step.png", "step", "val loss", "Scale: val loss per step")
    timed = {n: [(t, v) for (_, t), (_, v) in zip(by_time[n], by_step[n], strict=True)] for n in by_step}
    plot_series(timed, folder / "loss_vs_time.png", "training seconds", "val loss", "Scale: val loss per second")
    rows, ratios = [], {}
    for r in results:
        n, tokens = params(r), r.run.state.tokens_seen
        ratios[r.cell.name] = tokens / n
        rows.append(
            [r.cell.name, r.cell.about, param_count(r.run.config.model), n, f"{tokens:,}", f"{tokens / n:.1f}"]
            + [best_val(r), f"{r.run.state.train_seconds:.0f}"]
        )
    cols = ["cell", "model", "params (formula)", "params (counted)", "tokens seen", "tokens/param", "best val loss"]
    parts = [
        markdown_table([*cols, "train s"], rows),
        "",
        figure("loss_vs_step.png", "loss vs step"),
        "",
        figure("loss_vs_time.png", "loss vs time"),
        "",
        "## Against compute-optimal scaling",
        "",
        chinchilla_paragraph(results, ratios),
        "",
        *write_samples(folder, results)[1],
    ]
    return write_report(folder, "MiniGPT scale-up: deeper and wider at the same number of steps", quick, parts)


def chinchilla_paragraph(results: list[CellResult], ratios: dict[str, float]) -> str:
    base, *bigger = results
    best = min(results, key=best_val)
    same_time = min(r.run.state.train_seconds for r in results)
    at_budget = {r.cell.name: _loss_within(r, same_time) for r in results}
    winner = min((n for n in at_budget if math.isfinite(at_budget[n])), key=lambda n: at_budget[n])
    needed = {r.cell.name: CHINCHILLA_TOKENS_PER_PARAM * params(r) for r in results}
    lines = [
        f"Chinchilla's rule of thumb is ~{CHINCHILLA_TOKENS_PER_PARAM} training tokens per parameter for the "
        "lowest loss at a fixed compute budget. These runs all take the same number of steps on the same "
        f"batches, so they see the same {base.run.state.tokens_seen:,} tokens: "
        + ", ".join(f"{n} {ratios[n]:.1f} tokens/param" for n in ratios)
        + ". Compute-optimal training would need "
        + ", ".join(f"{needed[n]:,} tokens for {n}" for n in needed)
        + ".",
        "",
        f"Per step, the lowest val loss is {best.cell.name}'s ({best_val(best):.4f})"
        + ("; the bigger models learn more per token. " if best is not base else ". ")
        + "Per second the comparison can change: at the smallest training time of the three, "
        f"{same_time:.0f} s, the best val loss reached so far is "
        + ", ".join(f"{n} {v:.4f}" if math.isfinite(v) else f"{n} not evaluated yet" for n, v in at_budget.items())
        + f", so {winner} wins when time is what you have. Every model here is trained on "
        f"{min(ratios.values()):.1f}-{max(ratios.values()):.1f} tokens per parameter, far below 20, so each is "
        "undertrained for its size; Chinchilla's analysis says that a fixed compute budget is better spent on a "
        "model small enough to see ~20 tokens per parameter, which is why the per-second curve, not the "
        "per-step one, is the one to read on a laptop.",
    ]
    return "\n".join(lines)


def _loss_within(r: CellResult, seconds: float) -> float:
    """The lowest val loss the run had logged by `seconds` of training (nan if none yet)."""
    pts = [(t, v) for (_, t), (_, v) in zip(r.series("val", "train_seconds"), r.series("val", "loss"), strict=True)]
    return min((v for t, v in pts if t <= seconds * 1.001), default=math.nan)
