"""Model FLOPs utilisation (MFU): the FLOPs a training step's matmuls need per token, times the tokens per
second measured, against the device's own matmul rate, measured here too (not a datasheet's peak).
"""

from __future__ import annotations

import time

import torch


def matmul_peak_gflops(
    n: int = 2048, repeats: int = 10, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> float:
    """The device's measured matmul rate in `dtype`: 2 n^3 FLOPs per (n x n) @ (n x n), best of `repeats`."""
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    a @ b  # warm-up
    best = min(_seconds(lambda: a @ b, device) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _seconds(fn, device: str = "cpu") -> float:
    t0 = time.perf_counter()
    fn()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()  # kernels run asynchronously: wait for them before reading the clock
    return time.perf_counter() - t0


def flops_per_token(config) -> float:
    """Training FLOPs per token: 6N for the matmuls forward and backward, N = parameters outside the embedding
    tables (a lookup is not a matmul; the untied head is one), plus attention's 12 * n_layer * D * T (QK^T and
    AV, forward and backward; the count of the PaLM paper's appendix B). `config` must be fitted (its
    vocab_size known): `GPTTask.prepare(config).config`."""
    from tinyformer.models.gpt import param_count

    m = config.model
    if m.vocab_size <= 0:
        raise ValueError("flops_per_token needs the fitted config (vocab_size > 0): GPTTask.prepare(config).config")
    tables = m.vocab_size * m.n_embd + (m.block_size * m.n_embd if m.positions == "learned" else 0)
    return 6 * (param_count(m) - tables) + 12 * m.n_layer * m.n_embd * m.block_size


def mfu(c, tokens_per_s: float, precision: str) -> dict:
    """Model FLOPs utilisation of ours, against the measured matmul peak in the precision it ran in (printed)."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    peak, fpt = matmul_peak_gflops(dtype=dtype, device=c.train.device), flops_per_token(c)
    rate = fpt * tokens_per_s / (peak * 1e9)
    print(
        f"model FLOPs utilisation: {fpt / 1e6:.2f} MFLOP/token x {tokens_per_s:,.0f} tokens/s = "
        f"{fpt * tokens_per_s / 1e9:.1f} GFLOP/s of a measured {peak:.1f} GFLOP/s {precision} matmul peak: "
        f"MFU {rate:.1%}"
    )
    return {"flops_per_token": fpt, "matmul_peak_gflops": peak, "mfu": rate}
