"""Training practice on MiniGPT: what clipping, warmup, gradient accumulation, activation checkpointing
and bf16 autocast change, each one switch on the CPU preset at the same steps and batches.

Besides the loss and the wall time, each cell reports the activation memory one training forward keeps
for backward: the bytes of every tensor autograd saves (`torch.autograd.graph.saved_tensors_hooks`),
parameters excluded, each storage counted once. That is the memory checkpointing and a smaller
micro-batch cut, measured exactly rather than read off a noisy process peak.

    tinyformer experiment practice [--quick] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import torch

from tinyformer.device import autocast, native_bf16, resolve_precision
from tinyformer.experiments.gpt_studies import best_val, run_study
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import Cell, CellResult
from tinyformer.plots import plot_series

FP32 = "train.precision=fp32"  # not `auto`, which is bf16 where the hardware has it: the baseline must be fp32
CELLS = [
    Cell("baseline", [FP32], "CPU preset: lr 3e-3, 100 warmup steps, clipping at norm 1, batch 16, fp32"),
    Cell("no-clip", [FP32, "train.grad_clip=0"], "no gradient clipping"),
    Cell("no-warmup", [FP32, "train.warmup_iters=0"], "no warmup: the peak learning rate from step 1"),
    Cell("accum-4", [FP32, "train.batch_size=4", "train.grad_accum=4"], "4 micro-batches of 4 per step (still 16)"),
    Cell("grad-checkpoint", [FP32, "model.grad_checkpoint=true"], "activation checkpointing: recomputed in backward"),
    Cell("bf16", ["train.precision=bf16"], "bf16 autocast (weights and optimizer state stay fp32)"),
]
BUDGET = ["train.max_iters=600", "train.eval_interval=100"]


def saved_mib(r: CellResult) -> float:
    """MiB autograd keeps for backward during one training forward of a micro-batch: parameters excluded, but
    under bf16 autocast its bf16 copies of the weights count (they are kept for backward too)."""
    model, c = r.run.model, r.run.config
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    idx = torch.randint(c.model.vocab_size, (c.train.batch_size, c.model.block_size))  # (B, T)
    cpu = torch.device("cpu")
    model.train()
    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        autocast(cpu, resolve_precision(cpu, c.train.precision)),
    ):
        model(idx, idx)  # what the forward keeps is the figure; no backward is needed to see it
    model.eval()
    return sum(seen.values()) / 2**20


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    folder, results = run_study("practice", CELLS, out, quick, data, BUDGET)
    curves = {r.cell.name: r.series("val", "loss") for r in results}
    plot_series(curves, folder / "val_loss.png", "step", "val loss", "Training practice: val loss")
    train = {r.cell.name: r.series("train", "loss") for r in results}
    plot_series(train, folder / "train_loss.png", "step", "train loss", "Training practice: train loss")
    rows = [
        [r.cell.name, r.cell.about, best_val(r), f"{r.run.state.train_seconds:.0f}", f"{saved_mib(r):.1f}"]
        for r in results
    ]
    bf16 = "yes" if native_bf16(torch.device("cpu")) else "no (bf16 is emulated: slower, not faster)"
    parts = [
        f"Native bf16 on this CPU: {bf16}.",
        "",
        markdown_table(["cell", "what changes", "best val loss", "train s", "saved activations MiB"], rows),
        "",
        "`saved activations MiB`: what one training forward of a micro-batch keeps for backward "
        "(parameters excluded, autocast's bf16 weight copies included; with checkpointing, the blocks' own "
        "tensors are recomputed and not kept). "
        "`train s` is each run's wall time, trained one after another: compare them as rough costs only.",
        "",
        figure("val_loss.png", "val loss"),
        "",
        figure("train_loss.png", "train loss"),
    ]
    return write_report(folder, "Training practice: clipping, warmup, accumulation, checkpointing, bf16", quick, parts)
