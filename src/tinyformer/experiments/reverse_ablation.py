"""The encoder-decoder chapter's experiments as one report: what each part of the
Transformer contributes to learning digit reversal.

Cells (each a run of chapter 20's recipe, `tinyformer train reverse`, with one change):
embedding init, the sqrt(d) embedding scale, both (exercise 1's second half: PyTorch's
N(0, 1) init without the scale), PyTorch's default Linear init, positions, heads,
Post- vs Pre-Norm at 6+6 layers with warmup 1,000 and 1, the sort task, the paper's
ReLU feed-forward, SwiGLU at matched size, torch.nn.Transformer as exercise 7
configures it (its default ReLU), and length extrapolation (train on <= 12 digits,
test on up to 20).

    tinyformer experiment reverse-ablation [--quick] [--out DIR]
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tinyformer.config import parse_override
from tinyformer.errors import UserError
from tinyformer.experiments.report import figure, markdown_table, study_folder, write_report
from tinyformer.experiments.runner import Cell, CellResult, run_grid
from tinyformer.models import count_parameters
from tinyformer.plots import plot_series
from tinyformer.runfolder import CONFIG, saved_config
from tinyformer.tasks.reverse import cross_alignment

PROBE = "7 3 0 9 5 1 8"
WARMUP1_LR = f"train.lr={128**-0.5:.6f}"  # Noam with warmup 1 peaks at d^-1/2 (our lr is the peak)
DEEP = ["model.n_encoder_layers=6", "model.n_decoder_layers=6"]
# A cell ends once it has answered its question: at the first epoch whose held-out exact match reaches 0.99
# (it has learned the task; the baseline alone runs all 10 epochs, to sit beside the chapter's log) ...
DONE = "train.stop_at=exact_match>=0.99"
# ... or, started at the peak rate with no warmup, after 3 epochs (936 steps): the 6+6-layer cells without
# warmup were at 0.0% after 10 epochs in an earlier build, and 3 show the same.
NO_WARMUP = ["train.warmup_iters=1", WARMUP1_LR, "train.max_iters=936"]
# A cell that cannot learn the task ends after the same 3 epochs: without positions, exact match sat at 2-4%
# from the first epoch to the tenth in an earlier build.
CANNOT = "train.max_iters=936"
# Every cell, the baseline too, trains in bf16 autocast where the CPU multiplies bf16 natively, as the chapter's
# log was made (on a GPU, in bf16), and in fp32 elsewhere; `tinyformer train reverse` alone keeps the chapter's
# CPU recipe, fp32. Measured at one thread on an AMD Zen 4: 1.85x (2+2 layers) and 2.1x (6+6) the steps per
# second, and the same 58.2% exact match after the first epoch as fp32.
PRECISION = "train.precision=auto"


def cells(d_ff: int = 512) -> list[Cell]:
    """The grid; SwiGLU's hidden width is 2/3 of the GELU one so both have the same parameter count."""
    swiglu = round(2 * d_ff / 3)
    grid = [
        Cell("baseline", [], "the chapter's recipe: N(0, d^-1/2) embeddings x sqrt(d), sinusoids, 4 heads, Pre-Norm"),
        Cell("default-embedding-init", ["model.embedding_init=default"], "PyTorch's default N(0, 1) embedding init"),
        Cell("no-embedding-scale", ["model.scale_embeddings=false"], "token embeddings not multiplied by sqrt(d)"),
        Cell(
            "default-init-no-scale",
            ["model.embedding_init=default", "model.scale_embeddings=false"],
            "PyTorch's N(0, 1) embedding init and no sqrt(d) scale (exercise 1, second half)",
        ),
        Cell("default-init", ["model.init=default"], "PyTorch's default (kaiming-uniform) init for every Linear"),
        Cell("no-positions", ["model.positions=none", CANNOT], "no positional encoding (3 epochs)"),
        Cell("one-head", ["model.n_head=1"], "one attention head (width unchanged)"),
        Cell("pre6-warmup1000", DEEP, "Pre-Norm, 6+6 layers, warmup 1,000"),
        Cell("pre6-warmup1", [*DEEP, *NO_WARMUP], "Pre-Norm, 6+6 layers, warmup 1 (3 epochs)"),
        Cell("post6-warmup1000", [*DEEP, "model.norm_first=false"], "Post-Norm, 6+6 layers, warmup 1,000"),
        Cell(
            "post6-warmup1", [*DEEP, "model.norm_first=false", *NO_WARMUP], "Post-Norm, 6+6 layers, warmup 1 (3 epochs)"
        ),
        Cell("sort", ["data.variant=sort"], "the sort task instead of reversal"),
        Cell("relu-ffn", ["model.ffn=relu"], "the paper's ReLU feed-forward instead of GELU (same parameters)"),
        Cell(
            "swiglu",
            ["model.ffn=swiglu", f"model.d_ff={swiglu}"],
            f"SwiGLU feed-forward, hidden 2/3 x {d_ff} = {swiglu}",
        ),
        Cell(
            "torch-transformer",
            ["model.impl=torch", "model.ffn=relu"],
            "torch.nn.Transformer as exercise 7 builds it: same sizes, Pre-Norm, its default ReLU",
        ),
        Cell(
            "extrapolate",
            ["data.val_max_len=20", "model.block_size=64"],
            "trained on 3-12 digits, tested on 3-20 (the position table widened to 64)",
        ),
    ]
    return [
        Cell(grid[0].name, [PRECISION], grid[0].about),
        *(Cell(c.name, [*c.overrides, DONE, PRECISION], c.about) for c in grid[1:]),
    ]


QUICK = [
    "data.n_train=400",
    "data.n_val=60",
    "train.max_iters=24",
    "train.eval_interval=8",
    "train.warmup_iters=8",
    "model.n_embd=32",
    "model.d_ff=64",
    "model.block_size=24",
]


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
    """The baseline (`tinyformer train reverse`, the chapter's recipe) epoch by epoch beside the chapter's log."""
    from tinyformer.course import CHAPTER_LOG

    r = next(r for r in results if r.cell.name == "baseline")
    ours = {round(s / epochs(r)): v for s, v in r.series("val", "exact_match") if s}
    rows = [[e, chapter, ours.get(e, math.nan)] for e, chapter in CHAPTER_LOG.items()]
    return markdown_table(["epoch", "the chapter's log (RTX 4090, bf16)", "baseline here"], rows)


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


def report(results: list[CellResult], folder: Path, quick: bool) -> Path:
    by = {r.cell.name: r for r in results}
    curves = {r.cell.name: [(s / epochs(r), v) for s, v in r.series("val", "exact_match")] for r in results}
    plot_series(curves, folder / "exact_match.png", "epoch", "held-out exact match", "Exact match per epoch")
    losses = {
        r.cell.name: [(s / epochs(r), v) for s, v in r.series("val", "loss") if math.isfinite(v)] for r in results
    }
    plot_series(losses, folder / "val_loss.png", "epoch", "held-out loss", "Validation loss per epoch")
    rows = summary_rows(results)
    header = ["cell", "what changes", "parameters", "final exact match", "best val loss", "alignment", "train s"]
    parts = [
        markdown_table(header, rows),
        "",
        figure("exact_match.png", "exact match"),
        "",
        figure("val_loss.png", "val loss"),
        "",
        "Every cell but the baseline ends at the first epoch whose held-out exact match reaches 0.99 (it has "
        "learned the task); the 6+6-layer cells without warmup, and the cell without positions, end after 3 "
        "epochs. The baseline runs all 10. Every cell trains with `train.precision=auto`: "
        f"{precision_text(results)} here.",
        "",
        "The baseline is the chapter's recipe; its held-out exact match after each epoch, beside the chapter's log",
        "(another machine, and the chapter's own random draws of batches and dropout):",
        "",
        against_the_chapter(results),
        "",
        "## 1. Embedding initialisation and scale, Linear initialisation",
        "",
        per_epoch_table(
            results,
            ("baseline", "default-embedding-init", "no-embedding-scale", "default-init-no-scale", "default-init"),
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


def check_saved_cells(grid: list[Cell], folder: Path) -> None:
    """A cell folder whose saved config lacks the cell's own overrides holds some other run (e.g. "default-init"
    once meant `embedding_init=default`): it would be reused as it is, so stop, in one line, instead."""
    for cell in grid:
        saved = saved_config(folder / cell.name) if (folder / cell.name / CONFIG).is_file() else None
        wanted = {tuple(k): v for k, v in map(parse_override, cell.overrides)}  # the last of a key wins, as in a run
        for (section, key), value in wanted.items() if saved else []:
            if section != "train" and saved.get(section, {}).get(key) != value:  # its budget may differ (cut, extended)
                raise UserError(
                    f"{folder / cell.name} holds a run with {section}.{key}={saved[section].get(key)!r}, "
                    f"not the cell's {value!r} (a cell renamed since?): move it away, or pass another --out"
                )


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    if data:
        raise UserError("reverse-ablation generates its digit sequences; it takes no --data")
    folder = study_folder("reverse-ablation", out, quick)
    torch.manual_seed(0)
    check_saved_cells(cells(d_ff=64) if quick else cells(), folder)  # each cell's own overrides
    return report(run_grid("reverse", [], [], quick_cells() if quick else cells(), folder), folder, quick)


def quick_cells() -> list[Cell]:
    """The grid at CI size: QUICK's sizes and steps, then each cell's overrides but its own step budget."""
    cut = [Cell(c.name, [o for o in c.overrides if not o.startswith("train.max_iters=")], c.about) for c in cells(64)]
    return [Cell(c.name, [*QUICK, *c.overrides], c.about) for c in cut]
