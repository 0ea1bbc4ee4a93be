"""Where a training step's time goes (issue 58): `bench train`'s two sides, tinyformer's Trainer and the course
lab's MiniGPT loop (`tinyformer.bench.reference`), on the lab's recipe, each under `torch.profiler`, op by op,
in fp32 and in bf16 (the reference with its one autocast line). Every op listed is PyTorch's own (`aten::`);
the shapes of the matrix products and copies show which layer each belongs to.

    python scripts/step_profile.py [--steps 20] [--top 24]

Per op: self CPU milliseconds a step, ours against the reference's, the largest first; then, per side, the
matrix products and copies by input shape; then the minor page faults a step of each side, measured without
the profiler. The profiler slows every op, so read the ratios between the two sides, not the milliseconds;
`tinyformer bench train` gives the speeds.
"""

from __future__ import annotations

import argparse
import collections
import resource
import statistics

from torch.profiler import ProfilerActivity, profile

from tinyformer.bench import train as bench
from tinyformer.device import machine

SIDES = ("tinyformer", "reference")
SHAPED = ("aten::mm", "aten::addmm", "aten::bmm", "aten::copy_")  # listed by input shape


def measure(side: str, precision: str, steps: int) -> tuple[list[float], list[float]]:
    config = bench._seed_recipe(precision)
    if side == "tinyformer":
        return bench._measure_tinyformer(config, steps)[:2]
    return bench._measure_reference(config, steps, bf16=precision == "bf16")


def profiled(side: str, precision: str, steps: int):
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        measure(side, precision, steps)
    return prof


def per_step(prof, steps: int, by_shape: bool = False) -> dict[str, float]:
    """Self CPU ms a step of each op (by op and input shape when `by_shape`), warm-up steps included."""
    out: dict[str, float] = collections.defaultdict(float)
    for e in prof.key_averages(group_by_input_shape=by_shape):
        if not by_shape or e.key in SHAPED:
            out[f"{e.key} {e.input_shapes}" if by_shape else e.key] += e.self_cpu_time_total / 1000 / steps
    return out


def faults(side: str, precision: str, steps: int) -> tuple[float, float]:
    """(median step ms, minor page faults a step) of one unprofiled run."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds, _ = measure(side, precision, steps)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return 1000 * statistics.median(seconds), (after - before) / (steps + bench.WARMUP)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=24)
    a = p.parse_args()
    m = machine()
    print(f"machine: {m['cpu']}, native bf16: {m['cpu_native_bf16']}; {m['torch_threads']} threads, torch {m['torch']}")
    for precision in ("fp32", "bf16"):
        n = a.steps + bench.WARMUP
        profs = {side: profiled(side, precision, a.steps) for side in SIDES}
        ops = {side: per_step(prof, n) for side, prof in profs.items()}
        total = {side: sum(v.values()) for side, v in ops.items()}
        print(
            f"\n## {precision}: self CPU ms a step under the profiler, tinyformer {total['tinyformer']:.1f}, "
            f"reference {total['reference']:.1f}"
        )
        print("| op | tinyformer | reference | difference |\n|---|---|---|---|")
        names = sorted(
            set(ops["tinyformer"]) | set(ops["reference"]), key=lambda k: -max(o.get(k, 0) for o in ops.values())
        )
        for k in names[: a.top]:
            x, y = ops["tinyformer"].get(k, 0.0), ops["reference"].get(k, 0.0)
            print(f"| {k} | {x:.2f} | {y:.2f} | {x - y:+.2f} |")
        for side, prof in profs.items():
            shaped = per_step(prof, n, by_shape=True)
            print(f"\n{side}, matrix products and copies by input shape (ms a step):")
            for k in sorted(shaped, key=lambda k: -shaped[k])[:10]:
                print(f"  {shaped[k]:7.2f}  {k}")
        for side in SIDES:
            ms, per = faults(side, precision, a.steps)
            print(f"{side} unprofiled: median step {ms:.1f} ms, {per:,.0f} minor page faults a step")


if __name__ == "__main__":
    main()
