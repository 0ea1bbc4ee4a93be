"""Cost of attention against context length L: one training step and one generated token, with peak memory.

The cases of `experiment attention-variants`' second section. Each case (attention kind, L, what) runs in a
fresh Python process (`python -m tinyformer.experiments.context`), so its peak memory is its own, measured as
`tinyformer.measure` measures: on a CPU the process's peak resident set size, reset once the model is built,
minus what it held then; on CUDA `max_memory_allocated` after a reset.

- "train": forward + backward of MiniGPT on one sequence of L tokens (no optimizer step), median of repeats.
- "generate": the prompt of L tokens is prefilled into the cache (softmax: a `KVCache` of L positions;
  linear: a `LinearState`), then the median time of one more token, over `GEN_TOKENS` steps.

The model is MiniGPT at the seed width (D = 128, 4 heads) with 2 layers and no position table (positions
"none"), so any L fits; weights are random (speed does not depend on them).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import torch

from tinyformer.measure import peak_bytes, reset_peak, timed
from tinyformer.models.gpt import GPTConfig, MiniGPT

KINDS = {  # name -> the config fields that select it
    "sdpa": dict(backend="sdpa"),
    "manual": dict(backend="manual"),
    "linear": dict(attention="linear"),
}
GEN_TOKENS = 64  # generated tokens timed per generation case (the median of 63 steps after the first)
WIDTH = dict(vocab_size=65, n_layer=2, n_head=4, n_embd=128, dropout=0.0, positions="none")


def case_config(kind: str, L: int, quick: bool = False) -> GPTConfig:
    width = dict(WIDTH, n_embd=32, n_head=2) if quick else WIDTH
    return GPTConfig(block_size=L + GEN_TOKENS, **width, **KINDS[kind])


def predicted_gib(kind: str, L: int, what: str, c: GPTConfig) -> float:
    """What the manual path's (B, H, L, L) matrices need: ~3 kept per layer for backward, 2 at a time in a
    prefill. The fused SDPA kernel and linear attention keep nothing of size L x L."""
    if kind != "manual":
        return 0.0
    per = c.n_head * L * L * 4 / 2**30
    return per * (3 * c.n_layer if what == "train" else 2)


def measure_case(kind: str, L: int, what: str, repeats: int, quick: bool = False, device: str = "cpu") -> dict:
    """In this process: -> {"ms": median milliseconds, "peak_mib": memory above the built model's}."""
    dev = torch.device(device)
    torch.manual_seed(0)
    model = MiniGPT(case_config(kind, L, quick)).to(dev)
    idx = torch.randint(0, 65, (1, L + GEN_TOKENS), device=dev)
    base = reset_peak(dev)
    if what == "train":
        model.train()

        def step() -> None:
            model(idx[:, :L], idx[:, 1 : L + 1]).loss.backward()
            model.zero_grad(set_to_none=True)

        times = [timed(step, dev) for _ in range(repeats + 1)][1:]  # the first warms up
    else:
        model.eval()
        times = []
        with torch.inference_mode():
            cache = model.new_cache(1, L + GEN_TOKENS)
            model(idx[:, :L], cache=cache, start=0)  # prefill: not timed
            for t in range(L, L + GEN_TOKENS):
                times.append(timed(lambda t=t: model(idx[:, t : t + 1], cache=cache, start=t), dev))
            times = times[1:]
    return {"ms": statistics.median(times) * 1e3, "peak_mib": (peak_bytes(dev) - base) / 2**20}


def in_fresh_process(
    kind: str, L: int, what: str, repeats: int, quick: bool, device: str, timeout: float = 900
) -> dict:
    """`measure_case` in a new Python process; {"error": why} when it runs out of memory or time."""
    args = [kind, str(L), what, str(repeats), str(int(quick)), device, str(torch.get_num_threads())]
    try:
        worker = [sys.executable, "-m", "tinyformer.experiments.context", *args]
        done = subprocess.run(worker, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if done.returncode:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return {"error": "out of memory" if done.returncode in (-9, 137) or "memory" in last.lower() else last}
    return json.loads(done.stdout.strip().splitlines()[-1])


# the worker: python -m tinyformer.experiments.context KIND L WHAT REPEATS QUICK DEVICE THREADS
if __name__ == "__main__":
    kind, L, what, repeats, quick, device, threads = sys.argv[1:8]
    torch.set_num_threads(int(threads))  # the parent's count, so a case runs as the study was started
    print(json.dumps(measure_case(kind, int(L), what, int(repeats), bool(int(quick)), device)))
