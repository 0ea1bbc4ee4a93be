"""The encoder-decoder chapter's experiments as one report: what each part of the
Transformer contributes to learning digit reversal.

Cells (each a run of chapter 20's recipe, `tinyformer train reverse`, with one change):
embedding init, the sqrt(d) embedding scale, both (exercise 1's second half: PyTorch's
N(0, 1) init without the scale), PyTorch's default Linear init, the chapter's first version
(PyTorch's default init for the embeddings and every Linear), positions, heads,
Post- vs Pre-Norm at 6+6 layers with warmup 1,000 and 1, the sort task, the paper's
ReLU feed-forward, SwiGLU at matched size, torch.nn.Transformer as exercise 7
configures it (its default ReLU), and length extrapolation (train on <= 12 digits,
test on up to 20).

    tinyformer experiment reverse-ablation [--quick] [--out DIR]

This module is the grid and how it runs; its report is read from the runs by `reverse_ablation_report.py`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tinyformer.config import parse_override
from tinyformer.errors import UserError
from tinyformer.experiments.report import study_folder
from tinyformer.experiments.reverse_ablation_report import TARGET, report
from tinyformer.experiments.runner import Cell, run_grid
from tinyformer.runfolder import CONFIG, saved_config

WARMUP1_LR = f"train.lr={128**-0.5:.6f}"  # Noam with warmup 1 peaks at d^-1/2 (our lr is the peak)
DEEP = ["model.n_encoder_layers=6", "model.n_decoder_layers=6"]
# A cell ends once it has answered its question: at the first epoch whose held-out exact match reaches 0.99
# (it has learned the task; the baseline alone runs all 10 epochs, to sit beside the chapter's log) ...
DONE = f"train.stop_at=exact_match>={TARGET}"
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
        Cell(
            "first-version",
            ["model.embedding_init=default", "model.init=default"],
            "the chapter's first version (20.12.1): PyTorch's default init for the embeddings and every Linear",
        ),
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
