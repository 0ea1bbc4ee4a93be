"""The positions study: learned, sinusoidal and rotary positions (Su et al., 2021) trained at one context with
the same budget, then evaluated at 1x, 2x and 4x that context, RoPE with and without NTK-aware scaling.

    tinyformer experiment positions [--quick] [--out DIR]

It trains on the MiniGPT lab's base (`gpt_studies.run_study`); only `model.positions` differs between cells, but
in the llama cell (the `gpt_llama` preset's model), set beside MiniGPT at the same size and steps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from tinyformer.config import load_toml
from tinyformer.device import inference
from tinyformer.experiments.gpt_studies import BASE_PRESET, best_val, params, run_study
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import Cell, CellResult
from tinyformer.plots import plot_series

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


def context_losses(results: list[CellResult], contexts: list[int], batches: int) -> dict[str, list[float | None]]:
    """Each cell's val loss at each context (None where learned positions have no vector), and RoPE's again
    with NTK-aware scaling set for each context (a row "rope + NTK")."""
    trained = contexts[0]
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
    return table


def plot_positions(table: dict[str, list[float | None]], contexts: list[int], results, folder: Path) -> None:
    """loss_vs_context.png (each row of `table` against the context) and val_loss.png (the training curves)."""
    lines = {k: [(L, v) for L, v in zip(contexts, vals, strict=True) if v is not None] for k, vals in table.items()}
    plot_series(lines, folder / "loss_vs_context.png", "evaluation context (tokens)", "val loss", "Positions")
    plot_series(
        {r.cell.name: r.series("val", "loss") for r in results},
        folder / "val_loss.png",
        "step",
        f"val loss at context {contexts[0]}",
        "Positions: training curves",
    )


def positions(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    from tinyformer.attention.positions import ntk_base

    folder, results = run_study("positions", POSITION_CELLS, out, quick, data, POSITIONS_BUDGET)
    trained = results[0].run.config.model.block_size
    contexts = [trained, 2 * trained, 4 * trained]
    batches = 2 if quick else 12
    table = context_losses(results, contexts, batches)
    na = f"n/a: learned positions stop at {trained}"
    rows = [[k, *(na if v is None else f"{v:.4f}" for v in vals)] for k, vals in table.items()]
    plot_positions(table, contexts, results, folder)
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
