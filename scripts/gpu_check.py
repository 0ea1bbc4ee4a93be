"""Every GPU figure the README promises, measured in one go on one GPU, printed and written as JSON.

    make gpu-check                                  # = python scripts/gpu_check.py --out runs/gpu_check
    python scripts/gpu_check.py --dry --out DIR     # any machine: each command at a tiny size on the CPU

A GPU is lent to a session for minutes, so this is one script sized to finish within 8 minutes on
one GPU (about 6 on an A100-class card):
  1. `tinyformer bench all --device cuda`: attention, manual vs SDPA, fp32 and bf16, L = 512..2048;
     training tokens/s and MFU of the seed recipe against the course lab's MiniGPT;
  2. the GPU preset (configs/gpt_shakespeare_gpu.toml) trained to its validation loss: seconds of
     training, without and with --compile;
  3. cached vs uncached generation speed of that trained model, ms per token.
Each step is a `tinyformer` command run as a user would (its output streams through), then read
back from what it wrote: bench's --json, the run folder's trainer_state.pt.

--dry runs the same commands with tiny sizes on the CPU, so a test checks that each one still
parses and starts (a flag renamed in the CLI breaks it there, not on the day a GPU is lent).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PRESET = "configs/gpt_shakespeare_gpu.toml"
TINY = [
    *("--set", "model.n_layer=1", "--set", "model.n_head=2", "--set", "model.n_embd=16"),
    *("--set", "model.block_size=32", "--set", "train.batch_size=2", "--set", "train.max_iters=2"),
    *("--set", "train.eval_interval=2", "--set", "train.eval_iters=1", "--set", "sample.tokens=4"),
]


def commands(out: Path, dry: bool) -> dict[str, list[str]]:
    """name -> the tinyformer command line (without the program name)."""
    device = "cpu" if dry else "cuda"
    bench = ["bench", "all", "--device", device, "--json", str(out / "bench.json")]
    bench += ["--iters", "2", "--repeats", "1", "--lengths", "64"] if dry else ["--repeats", "3"]
    train = ["train", "gpt", "--config", PRESET, "--device", device] + (TINY if dry else [])
    return {
        "bench": bench,
        "train": [*train, "--out", str(out / "preset")],
        "train_compile": [*train, "--compile", "--out", str(out / "preset_compile")],
    }


def tinyformer(args: list[str]) -> float:
    """Run one command, its output streaming through; wall seconds. A failure stops the check."""
    print(f"\n$ tinyformer {' '.join(args)}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tinyformer", *args], check=False)
    if done.returncode != 0:
        sys.exit(f"gpu check: `tinyformer {' '.join(args)}` failed with exit status {done.returncode}")
    return time.perf_counter() - t0


def trained(run: Path, wall: float) -> dict:
    """What a run folder says about its training."""
    from tinyformer.runfolder import STATE, read_state

    s = read_state(run / STATE)
    figures = dict(step=s.step, best_val=s.best_val, train_seconds=s.train_seconds, tokens_seen=s.tokens_seen)
    return figures | {"precision": s.precision, "wall_seconds": wall}


def generation_speed(run: Path) -> dict:
    """ms per new token of the trained model, with and without the KV cache, in the run's precision.

    block_size - 1 tokens after a one-token prompt: the context never slides (a slide rebuilds the cache).
    """
    import torch

    from tinyformer.generate.sampling import generate
    from tinyformer.runs import load_run

    r = load_run(run, device="auto")
    device = next(r.model.parameters()).device
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    tokens = r.config.model.block_size - 1
    result = {"device": device.type, "tokens": tokens}
    with r.autocast():
        for cache in (True, False):
            generate(r.model, prompt, 8, use_cache=cache)  # warm-up: kernels, allocator
            sync(device)
            t0 = time.perf_counter()
            generate(r.model, prompt, tokens, temperature=0.0, use_cache=cache)
            sync(device)
            result["cached_ms" if cache else "uncached_ms"] = (time.perf_counter() - t0) / tokens * 1e3
    result["speedup"] = result["uncached_ms"] / result["cached_ms"]
    return result


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summary(figures: dict) -> str:
    bench, gen = figures["bench"], figures["generation"]
    m = bench["machine"]
    lines = [f"machine: {m['gpu'] or 'no GPU'}; {m['cpu']}; torch {m['torch']}"]
    for row in bench.get("attention", []):
        lines.append(
            f"attention {row['dtype']} L={row['L']}: manual {row['manual_ms']:.2f} ms, sdpa {row['sdpa_ms']:.2f} ms "
            f"({row['manual_ms'] / row['sdpa_ms']:.1f}x); "
            f"memory {row['manual_peak_mb']:.0f} vs {row['sdpa_peak_mb']:.0f} MB"
        )
    train = bench.get("train", {})
    if "mfu" in train:
        lines.append(f"seed-recipe training: MFU {train['mfu']:.1%}")
    for name in ("train", "train_compile"):
        t = figures[name]
        lines.append(
            f"{name}: best val {t['best_val']:.4f} after {t['step']} steps, {t['train_seconds']:.0f} s of "
            f"training ({t['wall_seconds']:.0f} s wall), {t['precision']}"
        )
    lines.append(
        f"generation, {gen['tokens']} tokens: {gen['cached_ms']:.2f} ms/token cached, {gen['uncached_ms']:.2f} "
        f"uncached ({gen['speedup']:.1f}x)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/gpu_check", help="folder for the runs and gpu_check.json (must be new)")
    p.add_argument("--dry", action="store_true", help="every command at a tiny size on the CPU")
    a = p.parse_args(argv)
    out = Path(a.out)
    if out.exists() and any(out.iterdir()):
        sys.exit(f"gpu check: {out} is not empty; give a new --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        sys.exit(f"gpu check: cannot make {out}: {e.strerror}")
    if not a.dry:
        import torch

        if not torch.cuda.is_available():
            sys.exit("gpu check: no CUDA GPU is visible (use --dry to check the commands on a CPU)")
    figures: dict = {}
    cmds = commands(out, a.dry)
    tinyformer(cmds["bench"])
    figures["bench"] = json.loads((out / "bench.json").read_text())
    for name in ("train", "train_compile"):
        wall = tinyformer(cmds[name])
        figures[name] = trained(Path(cmds[name][-1]), wall)
    figures["generation"] = generation_speed(out / "preset")
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("\n" + summary(figures) + f"\nwrote {out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
