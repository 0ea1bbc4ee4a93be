"""Where rotary positions cost time in training (issue 58): the Trainer's own steps, learned against rotary
positions, at the positions study's shape and at the CPU preset's, with 1 and 2 torch threads; each pair side by
side in one process, then `torch.profiler` over the same steps, grouped by op, to show which ops hold the gap.

    python scripts/rotary_profile.py [--steps 40] [--repeats 3]

Every figure is the median over `--repeats` alternations (learned, rope, learned, rope, ...) of each run's median
step time; the ops table is one profiled run of each, in self CPU time per step. Prints the CPU and torch.
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import tempfile
from pathlib import Path

import torch

from tinyformer import config as cfg
from tinyformer.tasks import GPTTask
from tinyformer.train.trainer import Trainer

DATA = "TINYFORMER_DATA"
PRESETS = Path(__file__).resolve().parents[1] / "src/tinyformer/presets"
SHAPES = {  # what each shape sets; the rest is GPTTask's default recipe or the preset
    "positions study (block 128, batch 16)": (
        None,
        ["model.block_size=128", "train.batch_size=16", "model.dropout=0.0", "train.lr=3e-3", "train.precision=auto"],
    ),
    "gpt_cpu_quick preset": (PRESETS / "gpt_cpu_quick.toml", []),
}
WARMUP = 5


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text()
    flags = set(re.search(r"flags\s*:\s*(.*)", info)[1].split())
    extra = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    name = re.search(r"model name\s*:\s*(.*)", info)[1]
    return f"{name} ({', '.join(extra) or 'avx2'})"


def trainer(preset, sets: list[str], positions: str, run_dir: str) -> Trainer:
    config = cfg.resolve(
        GPTTask.default_config(), [cfg.load_toml(preset)] if preset else [], [*sets, f"model.positions={positions}"]
    )
    config.train.device = "cpu"
    config.train.log_interval = 1000
    config.train.eval_interval = 10**6  # no evaluation inside the timed steps
    task = GPTTask.prepare(config)
    torch.manual_seed(config.train.seed)
    return Trainer(task.build_model(), task, task.config.train, run_dir, progress=False)


def step_ms(preset, sets, positions: str, steps: int) -> tuple[float, str, str]:
    with tempfile.TemporaryDirectory() as d:
        t = trainer(preset, sets, positions, d)
        t.fit(until=WARMUP + steps)
        return 1000 * statistics.median(t.step_seconds[WARMUP:]), t.attention.name, t.precision


def profile(preset, sets, positions: str, steps: int) -> dict[str, float]:
    """Self CPU milliseconds per step of each op over `steps` Trainer steps after the warm-up."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with tempfile.TemporaryDirectory() as d:
        t = trainer(preset, sets, positions, d)
        t.fit(until=WARMUP)
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            t.fit(until=WARMUP + steps)
    found: dict[str, float] = collections.defaultdict(float)
    for e in prof.key_averages():
        found[e.key] += e.self_cpu_time_total / 1000 / steps
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--top", type=int, default=12)
    a = p.parse_args()
    print(f"machine: {cpu()}; torch {torch.__version__}")
    for shape, (preset, sets) in SHAPES.items():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            times = {"learned": [], "rope": []}
            what = ""
            for _ in range(a.repeats):
                for positions in times:
                    ms, backend, precision = step_ms(preset, sets, positions, a.steps)
                    times[positions].append(ms)
                    what = f"{precision}, attention {backend}"
            learned, rope = (statistics.median(times[k]) for k in ("learned", "rope"))
            print(
                f"\n## {shape}, {threads} thread(s), {what}: step {learned:.1f} ms learned, {rope:.1f} ms rope: "
                f"rope costs {100 * (rope / learned - 1):.0f}% more time a step, {100 * (1 - learned / rope):.0f}% "
                f"of the tokens/s (medians of {a.repeats}, each the median of {a.steps} steps)"
            )
            ops = {k: profile(preset, sets, k, a.steps) for k in ("learned", "rope")}
            total = {k: sum(v.values()) for k, v in ops.items()}
            names = set(ops["learned"]) | set(ops["rope"])
            diff = sorted(names, key=lambda n: ops["rope"].get(n, 0) - ops["learned"].get(n, 0), reverse=True)
            print(f"profiled self CPU ms a step: learned {total['learned']:.1f}, rope {total['rope']:.1f}")
            print("| op | learned ms/step | rope ms/step | rope - learned |")
            print("|---|---|---|---|")
            for n in diff[: a.top]:
                x, y = ops["learned"].get(n, 0.0), ops["rope"].get(n, 0.0)
                print(f"| {n} | {x:.2f} | {y:.2f} | {y - x:+.2f} |")


if __name__ == "__main__":
    main()
