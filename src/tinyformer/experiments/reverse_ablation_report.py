"""The reverse-ablation study's report, read from its finished runs: the summary table, each run's curves, and
the tables of the chapter's questions (embedding init and scale, the feed-forward, Post- vs Pre-Norm, the sort
task's cross-attention, length extrapolation). The grid and its recipe are `reverse_ablation.py`.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import CellResult
from tinyformer.models import count_parameters
from tinyformer.plots import plot_series
from tinyformer.tasks.reverse import cross_alignment

PROBE = "7 3 0 9 5 1 8"  # the source whose cross-attention each run's alignment is read from
TARGET = 0.99  # held-out exact match at which a cell has learned the task (and, but for the baseline, stops)
# Chapter 20.12.1's log of its first version (PyTorch's default init for the embeddings and every Linear, the
# sqrt(d) scale kept): held-out exact match after each epoch, a fact of the course as CHAPTER_LOG is.
FIRST_VERSION_LOG = {1: 0.02, 2: 0.046, 3: 0.04, 4: 0.118, 5: 0.166, 6: 0.186, 7: 0.37, 8: 0.482, 9: 0.66, 10: 0.604}


def precision_text(results: list[CellResult]) -> str:
    """What `train.precision=auto` became in these runs (each records it): bf16 autocast or fp32."""
    used = sorted({r.run.state.precision or "fp32" for r in results})
    return " and ".join("bf16 autocast" if p == "bf16" else p for p in used)


def epochs(r: CellResult) -> float:
    c = r.run.config
    return c.data.n_train / c.train.batch_size  # steps per epoch


def summary_rows(results: list[CellResult]) -> list[list]:
    rows = []
    for r in results:
        em = r.series("val", "exact_match")
        loss = [v for _, v in r.series("val", "loss")]
        align = alignment(r)
        rows.append(
            [
                r.cell.name,
                r.cell.about,
                count_parameters(r.run.model),
                em[-1][1] if em else math.nan,
                min(loss) if loss else math.nan,
                "-" if align is None else f"{align:.3f}",
                f"{r.run.state.train_seconds:.0f}",
            ]
        )
    return rows


def alignment(r: CellResult) -> float | None:
    if r.run.config.model.impl == "torch":
        return None  # nn.Transformer returns no attention weights
    src = r.run.tokenizer.encode_source(PROBE, r.run.config.data.longest)
    return cross_alignment(r.run.model, src, r.run.config.data.variant)[0]


def per_epoch_table(results: list[CellResult], names: tuple[str, ...]) -> str:
    """Exact match after each epoch, one column per cell; "done" once a cell has stopped at 0.99 (DONE)."""
    chosen = [r for r in results if r.cell.name in names]
    series = {r.cell.name: {round(s / epochs(r), 1): v for s, v in r.series("val", "exact_match")} for r in chosen}
    ended = {r.cell.name: bool(r.run.state.reached) for r in chosen}
    marks = sorted({e for s in series.values() for e in s})
    rows = [
        [f"{e:g}", *(series[n].get(e, "done" if ended[n] and e > max(series[n]) else math.nan) for n in series)]
        for e in marks
    ]
    return markdown_table(["epoch", *series], rows)


def sort_matrix(results: list[CellResult], folder: Path) -> str:
    from tinyformer.viz import heatmaps as hm
    from tinyformer.viz.capture import AttentionMaps

    r = next(r for r in results if r.cell.name == "sort")
    src = r.run.tokenizer.encode_source(PROBE, r.run.config.data.longest)
    score, w = cross_alignment(r.run.model, src, "sort")
    keys = [*PROBE.split(), "EOS"]
    queries = ["BOS", *sorted(PROBE.split())]
    maps = AttentionMaps([w[None, None]], [queries], [keys], "cross", "sort")
    hm.plot_head(maps, 0, 0, folder / "sort-cross", title="sort task: last layer cross-attention, mean of heads")
    rows = [[q, *(f"{x:.2f}" for x in row)] for q, row in zip(queries, w.tolist(), strict=True)]
    table = markdown_table(["query \\ key", *keys], rows)
    return f"{table}\n\nAlignment with the source position of each sorted digit: {score:.3f}.\n"


def length_table(r: CellResult) -> str:
    from tinyformer.data.reversal import make_split
    from tinyformer.tasks.reverse import evaluate_split

    d = r.run.config.data
    src, tgt = make_split(d.n_val, d.min_len, d.val_max_len, d.seed + 1, d.variant, d.longest)
    per = evaluate_split(r.run.model, src, tgt)["per_length"]
    return markdown_table(
        ["digits", "exact match", "seen in training"],
        [[n, acc, "yes" if n <= d.max_len else "no"] for n, acc in sorted(per.items())],
    )


def against_the_chapter(results: list[CellResult]) -> str:
    """The baseline (`tinyformer train reverse`, the chapter's recipe) and the first-version cell epoch by epoch,
    each beside the chapter's log of the same model; "done" once the first version has stopped at TARGET."""
    from tinyformer.course import CHAPTER_LOG

    by = {r.cell.name: r for r in results}
    ours, first = (
        {round(s / epochs(by[n])): v for s, v in by[n].series("val", "exact_match") if s}
        for n in ("baseline", "first-version")
    )
    stopped = bool(by["first-version"].run.state.reached)
    rows = [
        [e, chapter, ours.get(e, math.nan), FIRST_VERSION_LOG[e], first.get(e, "done" if stopped else math.nan)]
        for e, chapter in CHAPTER_LOG.items()
    ]
    header = ["epoch", "the chapter's log (RTX 4090, bf16)", "baseline here", "the chapter's first version"]
    return markdown_table([*header, "first-version here"], rows)


def reaching(results: list[CellResult]) -> str:
    """Each cell at its first evaluation with exact match >= TARGET: the epoch, the held-out loss there and the
    training seconds until then ("-" if it never got there). A cell that reaches it stops there; the baseline
    trains on, so its own first such epoch, not its tenth, is what compares with theirs."""
    rows = []
    for r in results:
        val = [m for m in r.metrics if m.get("split") == "val" and "exact_match" in m]
        hit = next((m for m in val if m["exact_match"] >= TARGET), None)
        if hit is None:
            rows.append([r.cell.name, "-", "-", "-", "-"])
            continue
        seconds = hit.get("train_seconds", math.nan)
        row = [f"{round(hit['step'] / epochs(r), 1):g}", f"{hit['exact_match']:.4f}", f"{hit['loss']:.4f}"]
        rows.append([r.cell.name, *row, f"{seconds:.0f}"])
    header = ["cell", f"epoch reaching {TARGET}", "its exact match", "its val loss", "train s to it"]
    return markdown_table(header, rows)


def position_contrast(results: list[CellResult]) -> str:
    """Question 4 of the chapter, in numbers: at initialisation, how much a dot product between inputs moves
    when one position changes to its neighbour, against the size of the token part of the same dot product.
    Inputs are x_i = e(token) * sqrt(d) + p_i; p_i . p_i - p_i . p_(i+1) is all that tells neighbours apart."""
    from tinyformer.models.seq2seq import build_seq2seq

    rows = []
    for r in results:
        if r.cell.name not in ("baseline", "default-embedding-init"):
            continue
        torch.manual_seed(r.run.config.train.seed)
        embed = build_seq2seq(r.run.config.model).embed  # a fresh draw with the cell's init
        tokens = embed.tok.weight[3:13].detach() * embed.scale  # (10, D): the digits as the model adds them
        pe = embed.pe[:14]  # (14, D)
        token = float((tokens * tokens).sum(1).mean())
        neighbour = float(((pe[:-1] * pe[:-1]).sum(1) - (pe[:-1] * pe[1:]).sum(1)).mean())
        rows.append(
            [
                r.cell.name,
                f"{token:.1f}",
                f"{float((pe * pe).sum(1).mean()):.1f}",
                f"{neighbour:.2f}",
                f"{neighbour / token:.4f}",
            ]
        )
    header = ["cell", "token norm^2", "position norm^2", "neighbour contrast", "contrast share"]
    return markdown_table(header, rows)


def plot_curves(results: list[CellResult], folder: Path) -> None:
    """exact_match.png and val_loss.png: each cell's held-out curve against epochs (a diverged loss left out)."""
    curves = {r.cell.name: [(s / epochs(r), v) for s, v in r.series("val", "exact_match")] for r in results}
    plot_series(curves, folder / "exact_match.png", "epoch", "held-out exact match", "Exact match per epoch")
    losses = {
        r.cell.name: [(s / epochs(r), v) for s, v in r.series("val", "loss") if math.isfinite(v)] for r in results
    }
    plot_series(losses, folder / "val_loss.png", "epoch", "held-out loss", "Validation loss per epoch")


def overview(results: list[CellResult]) -> list[str]:
    """The report's opening: the summary table, the curves, how the cells end, the baseline beside the chapter."""
    rows = summary_rows(results)
    header = ["cell", "what changes", "parameters", "final exact match", "best val loss", "alignment", "train s"]
    return [
        markdown_table(header, rows),
        "",
        figure("exact_match.png", "exact match"),
        "",
        figure("val_loss.png", "val loss"),
        "",
        f"Every cell but the baseline ends at the first epoch whose held-out exact match reaches {TARGET} (it has "
        "learned the task); the 6+6-layer cells without warmup, and the cell without positions, end after 3 "
        "epochs. The baseline runs all 10. Every cell trains with `train.precision=auto`: "
        f"{precision_text(results)} here.",
        "",
        f"Each cell at its first evaluation with exact match >= {TARGET}, where it stops; the baseline trains on, "
        'and its own first such epoch is what compares with the others ("-": never reached):',
        "",
        reaching(results),
        "",
        "The baseline is the chapter's recipe, and the first-version cell the chapter's first version (20.12.1);",
        "their held-out exact match after each epoch, beside the chapter's logs of the same models (another",
        "machine, and the chapter's own random draws of batches and dropout):",
        "",
        against_the_chapter(results),
        "",
    ]


def report(results: list[CellResult], folder: Path, quick: bool) -> Path:
    by = {r.cell.name: r for r in results}
    plot_curves(results, folder)
    parts = [
        *overview(results),
        "## 1. Embedding initialisation and scale, Linear initialisation",
        "",
        per_epoch_table(
            results,
            (
                "baseline",
                "default-embedding-init",
                "no-embedding-scale",
                "default-init-no-scale",
                "default-init",
                "first-version",
            ),
        ),
        "",
        "At initialisation, what tells neighbouring positions apart in a dot product, against the token part:",
        "",
        position_contrast(results),
        "",
        "## 2. Feed-forward: GELU (baseline), the paper's ReLU, SwiGLU at matched size",
        "",
        per_epoch_table(results, ("baseline", "relu-ffn", "swiglu")),
        "",
        "## 4. Post-Norm vs Pre-Norm at 6+6 layers",
        "",
        per_epoch_table(results, ("pre6-warmup1000", "pre6-warmup1", "post6-warmup1000", "post6-warmup1")),
        "",
        _divergence(by),
        "",
        "## 5. The sort task's cross-attention",
        "",
        figure("sort-cross.png", "sort"),
        "",
        sort_matrix(results, folder),
        "## 8. Length extrapolation",
        "",
        length_table(by["extrapolate"]),
    ]
    return write_report(folder, "Encoder-decoder ablation on digit reversal", quick, parts)


def _divergence(by: dict[str, CellResult]) -> str:
    lines = []
    for name in ("pre6-warmup1000", "pre6-warmup1", "post6-warmup1000", "post6-warmup1"):
        em = [v for _, v in by[name].series("val", "exact_match")]
        loss = [v for _, v in by[name].series("val", "loss")]
        bad = not loss or not math.isfinite(loss[-1]) or (em and em[-1] < 0.1)
        lines.append(
            f"- {name}: final exact match {em[-1] if em else math.nan:.3f}, final val loss "
            f"{loss[-1] if loss else math.nan:.4f} -> {'fails to train (diverged or stuck)' if bad else 'trains'}"
        )
    return "\n".join(lines)
