"""Manual attention vs SDPA: time, memory and agreement at growing sequence length.

The manual path materialises the (B, H, L, L) scores, the mask fill and the softmax; SDPA's causal kernel
works in tiles and never holds an L x L matrix. Per case: median time of `repeats` calls after a warm-up,
peak memory (CUDA: the allocator's peak; CPU: growth of the peak resident set size in a fresh
subprocess, so each case's number is its own), and the largest absolute difference of the outputs.

    tinyformer bench attention [--repeats 3]      # L = 128, 256, 512, 1024, 2048
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import torch

from tinyformer.attention.multihead import attend
from tinyformer.device import native_bf16, pick_device
from tinyformer.measure import peak_bytes, reset_peak, timed

B, H, D = 8, 8, 512
LENGTHS = (128, 256, 512, 1024, 2048)


def inputs(L: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cpu").manual_seed(L)
    return tuple(torch.randn(B, H, L, D // H, generator=g).to(device, dtype) for _ in range(3))  # (B, H, L, Dh)


def run_once(backend: str, q, k, v) -> torch.Tensor:
    with torch.no_grad():
        return attend(q, k, v, causal=True, backend=backend)[0]  # (B, H, L, Dh)


def time_case(backend: str, L: int, device: torch.device, dtype: torch.dtype, repeats: int) -> tuple[float, float]:
    """-> (median ms, peak MB): CUDA measures itself; CPU memory comes from `cpu_peak_mb`."""
    q, k, v = inputs(L, device, dtype)
    run_once(backend, q, k, v)  # warm-up
    base = reset_peak(device) if device.type == "cuda" else 0
    times = [timed(lambda: run_once(backend, q, k, v), device) * 1e3 for _ in range(repeats)]
    peak = (peak_bytes(device) - base) / 2**20 if device.type == "cuda" else float("nan")
    return statistics.median(times), peak


def cpu_peak_mb(backend: str, L: int) -> float:
    """Peak RSS growth (MB) of one call, in a fresh process: inputs first, then the call."""
    code = (
        "import torch, json;"
        "from tinyformer.bench.attention import inputs, run_once;"
        "from tinyformer.measure import peak_rss_mb;"
        f"q, k, v = inputs({L}, torch.device('cpu'), torch.float32);"
        "run_once('sdpa', q[:, :, :8], k[:, :, :8], v[:, :, :8]);"  # load kernels before the baseline
        "before = peak_rss_mb();"
        f"run_once({backend!r}, q, k, v);"
        "print(json.dumps(peak_rss_mb() - before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(repeats: int = 5, lengths: tuple[int, ...] = LENGTHS, device: str = "auto") -> list[dict]:
    """fp32 everywhere, and bf16 where the device multiplies it natively (a GPU, a CPU with AVX-512 BF16/AMX)."""
    device = pick_device(device)
    dtypes = [torch.float32] + ([torch.bfloat16] if native_bf16(device) else [])
    rows = []
    for dtype in dtypes:
        for L in lengths:
            q, k, v = inputs(L, device, dtype)
            diff = (run_once("manual", q, k, v).float() - run_once("sdpa", q, k, v).float()).abs().max().item()
            del q, k, v
            row = {"device": device.type, "dtype": str(dtype).removeprefix("torch."), "L": L, "max_abs_diff": diff}
            for backend in ("manual", "sdpa"):
                ms, mb = time_case(backend, L, device, dtype, repeats)
                row[f"{backend}_ms"] = ms
                row[f"{backend}_peak_mb"] = mb if device.type == "cuda" else cpu_peak_mb(backend, L)
            rows.append(row)
            print(
                f"  {row['dtype']} L={L}: manual {row['manual_ms']:.2f} ms / {row['manual_peak_mb']:.0f} MB, "
                f"sdpa {row['sdpa_ms']:.2f} ms / {row['sdpa_peak_mb']:.0f} MB, max |diff| {diff:.1e}",
                flush=True,
            )
    return rows


def table(rows: list[dict]) -> str:
    head = "dtype     L   manual ms  sdpa ms  speed-up  manual MB  sdpa MB  memory  max |diff|"
    lines = [head]
    for r in rows:
        sdpa_mb = r["sdpa_peak_mb"]
        mem = f"{r['manual_peak_mb'] / sdpa_mb:>7.1f}x" if sdpa_mb >= 1 else f"{'n/a':>8}"  # under 1 MB: no ratio
        lines.append(
            f"{r['dtype']:<8}{r['L']:>5}{r['manual_ms']:>11.2f}{r['sdpa_ms']:>9.2f}"
            f"{r['manual_ms'] / r['sdpa_ms']:>9.1f}x{r['manual_peak_mb']:>10.0f}{sdpa_mb:>9.0f}"
            f"{mem}{r['max_abs_diff']:>12.1e}"
        )
    return "\n".join(lines)


def run_attention_benchmark(repeats: int = 5, lengths: tuple[int, ...] = LENGTHS, device: str = "auto") -> list[dict]:
    print(f"causal attention, B={B}, H={H}, D={D} (Dh={D // H}); median of {repeats} calls")
    rows = measure(repeats, lengths, device)
    print(table(rows))
    return rows


if __name__ == "__main__":
    print(json.dumps(run_attention_benchmark(repeats=int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
