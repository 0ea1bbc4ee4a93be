"""Training throughput of the lab's recipe (or a preset): tinyformer's Trainer vs the course lab's MiniGPT.

The reference is the lab's own model and loop (`tinyformer.bench.reference.LabGPT`, AdamW with its defaults,
fp32, as the lab runs on a CPU), fed the same batches from the same seed, at the recipe's sizes. Like is
timed with like: tinyformer in fp32 against it, and where the device multiplies bf16 natively, both again in
bf16, the reference with the course's one autocast line around its forward and loss ("reference+bf16"),
tinyformer with `train.precision=bf16` ("tinyformer+bf16").
Each measurement runs in a fresh process (so its peak RSS is its own), and the implementations alternate
(reference, tinyformer, ...) so that noise on a shared machine hits both alike. Per measurement: the median
step time over `iters` steps after `warmup` untimed ones -> tokens per second, and the mean train loss of the
last timed steps, which shows that the two did comparable work ("at equal loss"). Reported: per-pair ratios
and their median, peak RSS and MFU (`bench/mfu.py`). `--precision` sets tinyformer's fp32 side to another precision.

    tinyformer bench train [--iters 40] [--repeats 3] [--config gpt_cpu_quick] [--precision fp32]
    python -m tinyformer.bench.train --impl tinyformer --iters 40   # one worker
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tinyformer.bench.mfu import mfu
from tinyformer.bench.workers import machine_line, run_worker

# +ckpt: model.grad_checkpoint=true; the +bf16 sides only where the device multiplies bf16 natively
IMPLS = ("reference", "tinyformer", "reference+bf16", "tinyformer+bf16", "tinyformer+ckpt")
PAIRS = (("tinyformer", "reference"), ("tinyformer+bf16", "reference+bf16"))  # (ours, the reference it is timed by)
WARMUP = 5
LOSS_WINDOW = 10  # the last timed steps whose mean train loss is reported
REFERENCE = "the course lab's MiniGPT (fp32)"
REFERENCE_BF16 = (
    "the same code with the course's one line, torch.autocast(dtype=torch.bfloat16), around forward and loss"
)


def _seed_recipe(precision: str | None = None, data: str | None = None, device: str = "cpu", path: str | None = None):
    """The lab's recipe, or the preset at `path`; `precision` (None: the recipe's) is tinyformer's."""
    from tinyformer import config as cfg
    from tinyformer.tasks import GPTTask

    config = cfg.resolve(GPTTask.default_config(), [cfg.load_toml(path)] if path else [], [])
    config.train.device = device  # the reference, ours and the matmul peak all run here: like with like
    config.train.precision = precision or config.train.precision
    config.data.path = data or ""
    return config


def _measure_tinyformer(config, iters: int) -> tuple[list[float], list[float], str]:
    """-> (seconds, train loss) of each timed step of the Trainer, and its attention backend's line."""
    from tinyformer.runfolder import METRICS, read_metrics
    from tinyformer.tasks import GPTTask
    from tinyformer.train.trainer import Trainer

    torch.manual_seed(config.train.seed)
    config.train.log_interval = 1  # one metrics row per step: its loss (logging happens outside the timed step)
    task = GPTTask.prepare(config)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(task.build_model(), task, task.config.train, run_dir, progress=False)
        trainer.fit(until=WARMUP + iters)  # stops before any evaluation
        rows = read_metrics(Path(run_dir) / METRICS)
    losses = [r["loss"] for r in rows if r["split"] == "train"]
    return trainer.step_seconds[WARMUP:], losses[WARMUP:], trainer.attention.line()


def _measure_reference(config, iters: int, bf16: bool = False) -> tuple[list[float], list[float]]:
    """-> (seconds, train loss) of each timed step of the lab's loop, on the Trainer's batches; `bf16`: the
    forward and the loss under the chapter's one `torch.autocast` line, as a learner would add it. The loss is
    read (`.item()`, a device sync on a GPU) inside the step's time, as the Trainer reads it."""
    from tinyformer.bench.reference import LabGPT, lab_optimizer
    from tinyformer.device import keep_freed_memory
    from tinyformer.tasks import GPTTask

    torch.manual_seed(config.train.seed)
    task = GPTTask.prepare(config)  # the same data and batches
    m, c = task.config.model, config.train
    device = torch.device(c.device)
    if device.type == "cpu":  # the allocator setting the Trainer makes (`device.configure`): both sides get it
        keep_freed_memory()
    model = LabGPT(m.vocab_size, m.block_size, m.n_embd, m.n_head, m.n_layer, m.dropout).to(device)
    opt = lab_optimizer(model)
    g = torch.Generator().manual_seed(c.seed)
    times, losses = [], []
    for _ in range(WARMUP + iters):
        t0 = time.perf_counter()
        x, y = (t.to(device) for t in task.train_batch(c.batch_size, g))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return times[WARMUP:], losses[WARMUP:]


def worker(
    impl: str, iters: int, data: str | None, precision: str | None = None, device: str = "cpu", path: str | None = None
) -> dict:
    """One measurement in this process -> {"impl", "tokens_per_s", "loss", "precision", "peak_rss_mb", "attention",
    "freed_memory_kept"}."""
    from tinyformer import device as devices
    from tinyformer.device import resolve_precision

    ours = "bf16" if impl == "tinyformer+bf16" else precision or "fp32"
    config = _seed_recipe(ours, data, device, path)
    config.model.grad_checkpoint = impl == "tinyformer+ckpt"
    attention = None
    if impl.startswith("reference"):
        times, losses = _measure_reference(config, iters, bf16=impl == "reference+bf16")
    else:
        times, losses, attention = _measure_tinyformer(config, iters)
    tokens = config.train.batch_size * config.model.block_size
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return {
        "impl": impl,
        "tokens_per_s": tokens / statistics.median(times),
        "loss": statistics.fmean(losses[-LOSS_WINDOW:]),
        "precision": {"reference": "fp32", "reference+bf16": "bf16"}.get(impl)
        or resolve_precision(torch.device(device), ours),
        "peak_rss_mb": rss_mb,
        "attention": attention,  # tinyformer: the backend model.backend=auto took, with its measured rates
        "freed_memory_kept": devices.FREED_MEMORY_KEPT,  # glibc keeps freed tensor memory: the same on both sides
    }


def _spawn(impl: str, iters: int, data: str | None, precision: str | None, device: str, path: str | None) -> dict:
    args = ["--impl", impl, "--iters", str(iters), "--device", device]
    args += (["--precision", precision] if precision else []) + (["--data", data] if data else [])
    args += ["--config", path] if path else []
    return run_worker("tinyformer.bench.train", args)


def impls_here(device: str = "cpu") -> tuple[str, ...]:
    """The implementations measured on `device`: the "+bf16" ones only where it multiplies bf16 natively."""
    from tinyformer.device import native_bf16

    return tuple(i for i in IMPLS if not i.endswith("+bf16") or native_bf16(torch.device(device)))


def _print_header(c, iters: int, repeats: int, impls: tuple[str, ...], path: str | None) -> None:
    from tinyformer.device import describe_precision

    print(
        f"{path or 'the lab recipe'}: block {c.model.block_size}, batch {c.train.batch_size}, {c.model.n_layer} "
        f"layers, {c.model.n_head} heads, width {c.model.n_embd}, vocab {c.model.vocab_size}, dropout "
        f"{c.model.dropout}; {iters} timed steps after {WARMUP} warm-up, {repeats} alternating repeats, same seed "
        "and batches"
    )
    print(f"reference: {REFERENCE}: masked_fill causal attention, AdamW(lr=3e-4) with its defaults")
    if "reference+bf16" in impls:
        print(f"reference+bf16: {REFERENCE_BF16} (this device multiplies bf16 natively)")
    else:
        print("reference+bf16: not measured (no native bf16 here: autocast would emulate it)")
    where = torch.device(c.train.device)
    precision = describe_precision(where, c.train.precision)
    print(
        f"tinyformer: its Trainer on {path or 'the lab recipe'} on {where.type} in {precision}, model.backend="
        f"{c.model.backend}" + (" (and tinyformer+bf16: train.precision=bf16)" if "tinyformer+bf16" in impls else "")
    )
    print(machine_line())


def _ratios(rows: list[dict], ours: str, ref: str) -> list[float]:
    return [r[ours]["tokens_per_s"] / r[ref]["tokens_per_s"] for r in rows if ref in r and ours in r]


def _print_pairs(rows: list[dict], pairs: list[tuple[str, str]]) -> None:
    names = [name for pair in pairs for name in pair]
    head = "".join(f" {name + ' tok/s':>21}" for name in names)
    head += "".join(f" {ours + ' / ' + ref:>32}" for ours, ref in pairs) + f" {'ref loss':>9} {'our loss':>9}"
    print(f"\n{'pair':>4}{head}")
    for i, r in enumerate(rows):
        cells = "".join(f" {r[name]['tokens_per_s']:>21,.0f}" for name in names)
        cells += "".join(f" {r[ours]['tokens_per_s'] / r[ref]['tokens_per_s']:>31.3f}x" for ours, ref in pairs)
        print(f"{i + 1:>4}{cells} {r['reference']['loss']:>9.4f} {r['tinyformer']['loss']:>9.4f}")


def run_benchmark(
    iters: int = 40,
    repeats: int = 3,
    data: str | None = None,
    precision: str | None = None,
    device: str = "cpu",
    path: str | None = None,
) -> dict:
    """Alternate the implementations `repeats` times, print the comparison, return the figures."""
    from tqdm import tqdm

    from tinyformer.tasks import GPTTask

    c = GPTTask.prepare(_seed_recipe(precision or "fp32", data, device, path)).config  # fitted: vocabulary known
    impls = impls_here(device)
    pairs = [(ours, ref) for ours, ref in PAIRS if ours in impls and ref in impls]
    _print_header(c, iters, repeats, impls, path)
    rows = []
    for _ in tqdm(range(repeats), desc="bench", unit="pair"):
        rows.append({impl: _spawn(impl, iters, data, precision, device, path) for impl in impls})
    _print_pairs(rows, pairs)
    med, loss, ratio, rss = _medians(rows, impls, pairs, iters)
    return {
        "reference": REFERENCE,
        "config": path or "the lab recipe",
        "precision": rows[0]["tinyformer"]["precision"],
        "tokens_per_s": med,
        "loss": loss,
        "ratio_tinyformer_over_reference": ratio["reference"],
        "ratio_tinyformer_bf16_over_reference_bf16": ratio.get("reference+bf16"),
        "pair_ratios": {ref: _ratios(rows, ours, ref) for ours, ref in pairs},
        "peak_rss_mb": rss,
        **mfu(c, med["tinyformer"], rows[0]["tinyformer"]["precision"]),
    }


def _medians(rows: list[dict], impls: tuple[str, ...], pairs: list[tuple[str, str]], iters: int):
    """-> (median tokens/s, median loss of both fp32 sides, median per-pair ratio by reference, peak RSS), printed."""
    med = {impl: statistics.median(r[impl]["tokens_per_s"] for r in rows) for impl in impls}
    loss = {impl: statistics.median(r[impl]["loss"] for r in rows) for impl in ("reference", "tinyformer")}
    ratio = {ref: statistics.median(_ratios(rows, ours, ref)) for ours, ref in pairs}
    rss = {impl: max(r[impl]["peak_rss_mb"] for r in rows) for impl in impls}
    print("\nmedian tokens/s: " + ", ".join(f"{i} {med[i]:,.0f} ({rows[0][i]['precision']})" for i in impls))
    print(f"tinyformer's {rows[-1]['tinyformer']['attention']} (last pair)")
    for ours, ref in pairs:
        print(f"median of the per-pair ratios {ours}/{ref}: {ratio[ref]:.3f}x")
    _print_loss_and_memory(loss, rss, med, iters)
    return med, loss, ratio, rss


def _print_loss_and_memory(loss: dict, rss: dict, med: dict, iters: int) -> None:
    print(
        f"mean train loss of the last {min(LOSS_WINDOW, iters)} timed steps (median over pairs): "
        f"reference {loss['reference']:.4f}, tinyformer {loss['tinyformer']:.4f}"
    )
    print(
        f"peak RSS of one training process: reference {rss['reference']:.0f} MB, tinyformer {rss['tinyformer']:.0f} "
        f"MB, tinyformer with activation checkpointing {rss['tinyformer+ckpt']:.0f} MB "
        f"({med['tinyformer+ckpt']:,.0f} tokens/s)"
    )


def _main() -> None:
    from tinyformer.config import PRECISIONS

    p = argparse.ArgumentParser(description="one benchmark measurement (used by `tinyformer bench train`)")
    p.add_argument("--impl", choices=IMPLS, required=True)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--data")
    p.add_argument("--precision", choices=PRECISIONS, help="tinyformer's train.precision (default: fp32)")
    p.add_argument("--device", default="cpu", help="where both implementations train")
    p.add_argument("--config", help="a gpt preset (default: the lab recipe)")
    a = p.parse_args()
    print(json.dumps(worker(a.impl, a.iters, a.data, a.precision, a.device, a.config)))


if __name__ == "__main__":
    _main()
