"""The MiniGPT lab's questions as studies, each one command that trains a grid and writes `report.md`.

- `ablation`   depth 4 vs 1, heads 4 vs 1 at fixed width, and the causal mask removed (Radford et al., 2018's
               decoder needs it: without it the teacher-forced loss can read the answer).
- `scale`      8 layers and width 256 beside the base model: parameter formula vs count, loss vs step and vs
               wall time, tokens per parameter next to Chinchilla's ~20 (Hoffmann et al., 2022).
- `positions`  learned, sinusoidal and rotary positions trained at one context with the same budget, then
               evaluated at 1x, 2x and 4x that context, RoPE with and without NTK-aware scaling.

    tinyformer experiment ablation|scale|positions [--quick] [--out DIR]

The full size is the real answer (minutes on a laptop CPU); `--quick` only checks the pipeline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from tinyformer.config import load_toml
from tinyformer.device import inference
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


@torch.no_grad()
def val_loss_at(r: CellResult, context: int, batches: int, batch_size: int = 8) -> float:
    """Mean val loss over fixed, seeded windows of `context` tokens (every position of each window counts)."""
    from tinyformer.data.tinyshakespeare import TokenSplits, read_text, resolve_path

    text = read_text(resolve_path(r.run.config.data.path or None))
    ids = torch.tensor(r.run.tokenizer.encode(text))
    splits = TokenSplits(ids, r.run.config.data.val_fraction, context)
    g = torch.Generator().manual_seed(0)
    with inference(r.run.model) as model:
        return sum(model(*splits.batch("val", batch_size, g)).loss.item() for _ in range(batches)) / batches


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
    samples = {r.cell.name: sample_text(r) for r in results}
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
        "## Samples (300 characters each, temperature and top-k from each run's config, seed 1)",
        "",
        *[f"### {n}\n\n```\n{s}\n```\n" for n, s in samples.items()],
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
        f"## Samples ({SAMPLE_CHARS} characters each, the run's own sampling settings, seed 1; sample-CELL.txt)",
        "",
    ]
    for r in results:  # the course asks how generation quality changes: each sample also a file the guide quotes
        text = sample_text(r)
        write_text(folder / f"sample-{r.cell.name}.txt", text + "\n")
        parts.append(f"### {r.cell.name}\n\n```\n{text}\n```\n")
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


# ---- positions ------------------------------------------------------------------------------------------
TRAIN_CONTEXT = 128
POSITIONS_BUDGET = [f"model.block_size={TRAIN_CONTEXT}", "train.max_iters=1500"]
POSITION_CELLS = [
    Cell(kind, [f"model.positions={kind}"], about)
    for kind, about in [
        ("learned", "a trained vector per position (GPT-2)"),
        ("sinusoidal", "the fixed sin/cos table (Vaswani et al.)"),
        ("rope", "rotary queries and keys (Su et al.)"),
    ]
]


def llama_sets() -> list[str]:
    """The `gpt_llama` preset's model keys that differ from the base preset's, as --set overrides: the one place
    the Llama-style GPT is described (RMSNorm, SwiGLU, rotary, GQA, no biases) at MiniGPT's size."""
    from tinyformer.config import preset_path

    base = load_toml(preset_path(BASE_PRESET))["model"]
    ours = load_toml(preset_path("gpt_llama"))["model"]
    return [f"model.{k}={json.dumps(v)}" for k, v in ours.items() if base.get(k) != v]


POSITION_CELLS.append(Cell("llama", llama_sets(), "the Llama-style GPT, rotary (gpt_llama): same size as learned"))


def same_size(results: list[CellResult]) -> list[str]:
    """MiniGPT (learned positions) beside the Llama-style GPT: parameters, val loss, training tokens/s."""
    rows = []
    for r in (r for r in results if r.cell.name in ("learned", "llama")):
        seconds, tokens = r.run.state.train_seconds, r.run.state.tokens_seen
        rows.append([r.cell.name, f"{params(r):,}", best_val(r), f"{tokens / seconds:,.0f}" if seconds else "n/a"])
    return [
        "MiniGPT (learned positions, LayerNorm, GELU) and the Llama-style GPT, at the same size and steps:",
        "",
        markdown_table(["cell", "parameters", "best val loss", "training tokens/s"], rows),
    ]


def positions(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    from tinyformer.attention.positions import ntk_base

    folder, results = run_study("positions", POSITION_CELLS, out, quick, data, POSITIONS_BUDGET)
    trained = results[0].run.config.model.block_size
    contexts = [trained, 2 * trained, 4 * trained]
    batches = 2 if quick else 12
    table: dict[str, list[float | None]] = {}
    for r in results:
        kind = r.cell.name
        limit = r.run.model.max_context or math.inf  # learned positions stop at the trained context
        table[kind] = [None if L > limit else val_loss_at(r, L, batches) for L in contexts]
        if kind == "rope":
            table["rope + NTK"] = []
            for L in contexts:
                r.run.model.set_ntk(L)  # NTK-aware scaling for this context; no retraining
                table["rope + NTK"].append(val_loss_at(r, L, batches))
            r.run.model.set_ntk(trained)
    na = f"n/a: learned positions stop at {trained}"
    rows = [[k, *(na if v is None else f"{v:.4f}" for v in vals)] for k, vals in table.items()]
    lines = {k: [(L, v) for L, v in zip(contexts, vals, strict=True) if v is not None] for k, vals in table.items()}
    plot_series(lines, folder / "loss_vs_context.png", "evaluation context (tokens)", "val loss", "Positions")
    plot_series(
        {r.cell.name: r.series("val", "loss") for r in results},
        folder / "val_loss.png",
        "step",
        f"val loss at context {trained}",
        "Positions: training curves",
    )
    m = results[0].run.config.model
    dh, base = m.n_embd // m.n_head, m.rope_base
    parts = [
        "Each model trains with the same steps, batch and schedule; only `model.positions` differs, but in the "
        "llama cell (the `gpt_llama` preset's model: RMSNorm, SwiGLU, grouped-query attention, no biases). The val "
        f"loss at context L is the mean over every position of {batches} x 8 fixed val windows of L characters.",
        "",
        markdown_table(["positions", *(f"val loss @ {L}" for L in contexts)], rows),
        "",
        positions_summary(table, contexts),
        "",
        *same_size(results),
        "",
        "NTK-aware scaling changes nothing but the RoPE base at evaluation: for a context alpha times the "
        f"training one, base b = {base:g} becomes b * alpha^(Dh/(Dh-2)) (Dh = {dh}): "
        + ", ".join(f"{ntk_base(base, L / trained, dh):,.0f} at {L}" for L in contexts[1:])
        + ".",
        "",
        figure("loss_vs_context.png", "loss vs context"),
        "",
        figure("val_loss.png", "training curves"),
    ]
    title = f"Positions: trained at context {trained}, evaluated at {', '.join(map(str, contexts))}"
    return write_report(folder, title, quick, parts)


def positions_summary(table: dict[str, list[float | None]], contexts: list[int]) -> str:
    first = min(table, key=lambda k: table[k][0])
    moves = ", ".join(
        f"{k} from {v[0]:.3f} to {v[1]:.3f} at {contexts[1]} and {v[2]:.3f} at {contexts[2]}"
        for k, v in table.items()
        if v[-1] is not None
    )
    return (
        f"At the trained context the lowest val loss is {first}'s ({table[first][0]:.3f}). Past it, learned "
        f"positions have no vector to add and cannot run; the others can, and their loss moves: {moves}."
    )
