"""Where a training step's time goes (issue 58): the two sides of `bench train` (tinyformer's Trainer and the
course lab's MiniGPT loop, on the lab's recipe) or of `bench reverse` (the Trainer on the reverse recipe and the
chapter-20 encoder-decoder's loop over its DataLoader), each under `torch.profiler`, op by op, in fp32 and in
bf16 (the reference with its one autocast line). Every op listed is PyTorch's own (`aten::`); the shapes of the
matrix products and copies show which layer each belongs to.

    python scripts/step_profile.py [--bench train|reverse] [--steps 20] [--top 24]

Per op: self CPU milliseconds a step, ours against the reference's, the largest first, and the ops each side
calls a step (each call costs a dispatch, whatever its size); then, per side, the matrix products and copies by
input shape; then the median step and the minor page faults a step of each side, measured without the
profiler. The profiler slows every op, so read the ratios between the two sides, not the milliseconds;
`tinyformer bench train` and `bench reverse` give the speeds. Reverse's steps leave evaluation out (the bench's
time per epoch does too): ours evaluates a constant, the reference's loop never evaluates.
"""

from __future__ import annotations

import argparse
import collections
import resource
import statistics
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

from tinyformer.bench import train as bench
from tinyformer.device import machine

SIDES = ("tinyformer", "reference")
SHAPED = ("aten::mm", "aten::addmm", "aten::bmm", "aten::copy_")  # listed by input shape


def measure(which: str, side: str, precision: str, steps: int) -> list[float]:
    """The seconds of each timed step of one side of `bench train` or `bench reverse` (`which`)."""
    if which == "reverse":
        return reverse_steps(side, precision, steps)
    config = bench._seed_recipe(precision)
    if side == "tinyformer":
        return bench._measure_tinyformer(config, steps)[0]
    return bench._measure_reference(config, steps, bf16=precision == "bf16")[0]


def reverse_steps(side: str, precision: str, steps: int) -> list[float]:
    """`bench reverse`'s two sides on their first `bench.WARMUP + steps` batches, evaluation left out."""
    from tinyformer.bench import reference as ch
    from tinyformer.bench.reverse import configs
    from tinyformer.device import keep_freed_memory, seed_everything
    from tinyformer.tasks import ReverseTask
    from tinyformer.train.trainer import Trainer

    ours, ref = configs(precision=precision)
    n = bench.WARMUP + steps
    if side == "tinyformer":
        seed_everything(ours.train.seed)
        task = ReverseTask.prepare(ours)
        task.evaluate = lambda model: {"loss": 1.0, task.select: 0.0}  # evaluation is outside the epoch's time
        with tempfile.TemporaryDirectory() as run_dir:
            trainer = Trainer(task.build_model(), task, task.config.train, run_dir, progress=False)
            trainer.fit(until=n)
        return trainer.step_seconds[bench.WARMUP :]
    keep_freed_memory()  # as `reverse_sides.train_reference`, over `n` batches
    torch.manual_seed(0)
    loader = ch.chapter_loader(*ch.chapter_pairs(ref.data.n_train, seed=0), batch_size=64)
    model = ch.ChapterSeq2Seq()
    opt, schedule = ch.chapter_optimizer(model, d=128, warmup=1000)
    model.train()
    times, batches = [], iter(loader)
    for _ in range(n):
        t0 = time.perf_counter()
        src, tgt = next(batches)
        with ch.chapter_autocast(torch.device("cpu"), precision == "bf16"):
            loss = ch.chapter_loss(model, src, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        schedule.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    return times[bench.WARMUP :]


def profiled(which: str, side: str, precision: str, steps: int):
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        measure(which, side, precision, steps)
    return prof


def per_step(prof, steps: int, by_shape: bool = False) -> dict[str, float]:
    """Self CPU ms a step of each op (by op and input shape when `by_shape`), warm-up steps included."""
    out: dict[str, float] = collections.defaultdict(float)
    for e in prof.key_averages(group_by_input_shape=by_shape):
        if not by_shape or e.key in SHAPED:
            out[f"{e.key} {e.input_shapes}" if by_shape else e.key] += e.self_cpu_time_total / 1000 / steps
    return out


def calls(prof, steps: int) -> float:
    """aten ops called a step (warm-up steps included)."""
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::")) / steps


def faults(which: str, side: str, precision: str, steps: int) -> tuple[float, float]:
    """(median step ms, minor page faults a step) of one unprofiled run."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    seconds = measure(which, side, precision, steps)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    return 1000 * statistics.median(seconds), (after - before) / (steps + bench.WARMUP)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", choices=("train", "reverse"), default="train", help="whose two sides")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=24)
    a = p.parse_args()
    m = machine()
    print(f"machine: {m['cpu']}, native bf16: {m['cpu_native_bf16']}; {m['torch_threads']} threads, torch {m['torch']}")
    print(f"bench {a.bench}: {a.steps} steps a side after {bench.WARMUP} of warm-up")
    for precision in ("fp32", "bf16"):
        n = a.steps + bench.WARMUP
        profs = {side: profiled(a.bench, side, precision, a.steps) for side in SIDES}
        ops = {side: per_step(prof, n) for side, prof in profs.items()}
        total = {side: sum(v.values()) for side, v in ops.items()}
        print(
            f"\n## {precision}: self CPU ms a step under the profiler, tinyformer {total['tinyformer']:.1f}, "
            f"reference {total['reference']:.1f}; aten ops called a step, tinyformer "
            f"{calls(profs['tinyformer'], n):,.0f}, reference {calls(profs['reference'], n):,.0f}"
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
            ms, per = faults(a.bench, side, precision, a.steps)
            print(f"{side} unprofiled: median step {ms:.1f} ms, {per:,.0f} minor page faults a step")


if __name__ == "__main__":
    main()
