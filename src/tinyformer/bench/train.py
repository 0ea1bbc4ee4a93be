"""Training throughput of the seed recipe: tinyformer's Trainer vs a plain reference.

Each measurement runs in a fresh process (so its peak RSS is its own), and the
two implementations alternate (reference, tinyformer, reference, ...) so that
noise on a shared machine hits both alike. Per measurement: the median step
time over `iters` steps after `warmup` untimed ones -> tokens per second.
Reported: per-pair ratios, the median of each, and peak RSS.

    tinyformer bench train [--iters 40] [--repeats 3]
    python -m tinyformer.bench.train --impl tinyformer --iters 40   # one worker
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from tinyformer.device import machine

IMPLS = ("reference", "tinyformer", "tinyformer+ckpt")  # +ckpt: model.grad_checkpoint=true
WARMUP = 5


def _seed_recipe():
    from tinyformer import config as cfg
    from tinyformer.tasks import GPTTask

    config = cfg.resolve(GPTTask.default_config(), [], [])
    config.train.device = "cpu"  # the reference and the matmul peak run on the CPU: compare like with like
    return config


def _measure_tinyformer(config, iters: int) -> list[float]:
    from tinyformer.tasks import GPTTask
    from tinyformer.train.trainer import Trainer

    torch.manual_seed(config.train.seed)
    task = GPTTask.prepare(config)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(task.build_model(), task, config.train, run_dir, progress=False)
        trainer.fit(until=WARMUP + iters)  # stops before any evaluation
        return trainer.step_seconds[WARMUP:]


def _measure_reference(config, iters: int) -> list[float]:
    from tinyformer.bench.reference import RefGPT, reference_optimizer
    from tinyformer.tasks import GPTTask

    torch.manual_seed(config.train.seed)
    task = GPTTask.prepare(config)  # the same data and batches
    m, c = task.config.model, config.train
    model = RefGPT(m.vocab_size, m.block_size, m.n_embd, m.n_head, m.n_layer, m.dropout)
    opt = reference_optimizer(model, c.lr)
    g = torch.Generator().manual_seed(c.seed)
    times = []
    for _ in range(WARMUP + iters):
        t0 = time.perf_counter()
        x, y = task.train_batch(c.batch_size, g)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times[WARMUP:]


def worker(impl: str, iters: int, data: str | None) -> dict:
    """One measurement in this process -> {"impl", "tokens_per_s", "peak_rss_mb"}."""
    config = _seed_recipe()
    config.data.path = data or ""
    config.model.grad_checkpoint = impl == "tinyformer+ckpt"
    measure = _measure_reference if impl == "reference" else _measure_tinyformer
    times = measure(config, iters)
    tokens = config.train.batch_size * config.model.block_size
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return {"impl": impl, "tokens_per_s": tokens / statistics.median(times), "peak_rss_mb": rss_mb}


def _spawn(impl: str, iters: int, data: str | None) -> dict:
    cmd = [sys.executable, "-m", "tinyformer.bench.train", "--impl", impl, "--iters", str(iters)]
    cmd += ["--data", data] if data else []
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark worker failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def matmul_peak_gflops(n: int = 2048, repeats: int = 10) -> float:
    """The machine's measured fp32 matmul rate: 2 n^3 FLOPs per (n x n) @ (n x n), best of `repeats`."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def flops_per_token(config) -> float:
    """Training FLOPs per token: 6N for the matmuls forward and backward, N = parameters outside the embedding
    tables (a lookup is not a matmul; the untied head is one), plus attention's 12 * n_layer * D * T (QK^T and
    AV, forward and backward; the count of the PaLM paper's appendix B)."""
    from tinyformer.models.gpt import param_count

    m = config.model
    tables = m.vocab_size * m.n_embd + (m.block_size * m.n_embd if m.positions == "learned" else 0)
    return 6 * (param_count(m) - tables) + 12 * m.n_layer * m.n_embd * m.block_size


def run_benchmark(iters: int = 40, repeats: int = 3, data: str | None = None) -> dict:
    """Alternate the two implementations `repeats` times and print the comparison."""
    from tqdm import tqdm

    c = _seed_recipe()
    print(
        f"seed recipe: block {c.model.block_size}, batch {c.train.batch_size}, {c.model.n_layer} layers, "
        f"{c.model.n_head} heads, width {c.model.n_embd}, dropout {c.model.dropout}; "
        f"{iters} timed steps after {WARMUP} warm-up, {repeats} alternating repeats"
    )
    print(f"machine: {machine()['cpu']}, {torch.get_num_threads()} torch threads, torch {torch.__version__}")
    rows = []
    for _ in tqdm(range(repeats), desc="bench", unit="pair"):
        rows.append({impl: _spawn(impl, iters, data) for impl in IMPLS})
    print(f"\n{'pair':>4} {'reference tok/s':>16} {'tinyformer tok/s':>17} {'ratio':>7}")  # +ckpt: see below
    for i, r in enumerate(rows):
        ref, ours = r["reference"]["tokens_per_s"], r["tinyformer"]["tokens_per_s"]
        print(f"{i + 1:>4} {ref:>16,.0f} {ours:>17,.0f} {ours / ref:>6.3f}x")
    med = {impl: statistics.median(r[impl]["tokens_per_s"] for r in rows) for impl in IMPLS}
    ratio = statistics.median(r["tinyformer"]["tokens_per_s"] / r["reference"]["tokens_per_s"] for r in rows)
    rss = {impl: max(r[impl]["peak_rss_mb"] for r in rows) for impl in IMPLS}
    print(f"\nmedian tokens/s: reference {med['reference']:,.0f}, tinyformer {med['tinyformer']:,.0f}")
    print(f"median ratio tinyformer/reference: {ratio:.3f}x")
    print(
        f"peak RSS of one training process: reference {rss['reference']:.0f} MB, tinyformer {rss['tinyformer']:.0f} "
        f"MB, tinyformer with activation checkpointing {rss['tinyformer+ckpt']:.0f} MB "
        f"({med['tinyformer+ckpt']:,.0f} tokens/s)"
    )
    peak = matmul_peak_gflops()
    fpt = flops_per_token(c)
    mfu = fpt * med["tinyformer"] / (peak * 1e9)
    print(
        f"model FLOPs utilisation: {fpt / 1e6:.2f} MFLOP/token x {med['tinyformer']:,.0f} tokens/s = "
        f"{fpt * med['tinyformer'] / 1e9:.1f} GFLOP/s of a measured {peak:.1f} GFLOP/s fp32 matmul peak: MFU {mfu:.1%}"
    )
    return {
        "tokens_per_s": med,
        "ratio_tinyformer_over_reference": ratio,
        "peak_rss_mb": rss,
        "flops_per_token": fpt,
        "matmul_peak_gflops": peak,
        "mfu": mfu,
    }


def _main() -> None:
    p = argparse.ArgumentParser(description="one benchmark measurement (used by `tinyformer bench train`)")
    p.add_argument("--impl", choices=IMPLS, required=True)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--data")
    a = p.parse_args()
    print(json.dumps(worker(a.impl, a.iters, a.data)))


if __name__ == "__main__":
    _main()
