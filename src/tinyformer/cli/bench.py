"""`tinyformer bench`: speed and memory figures, printed (never asserted)."""

from __future__ import annotations

import argparse
import json

from tinyformer.cli.common import positive_int
from tinyformer.errors import UserError
from tinyformer.files import input_file, make_dir, output_path, write_text

WHAT = {
    "train": "training tokens/s, peak memory and MFU vs a plain reference",
    "attention": "manual vs SDPA time, memory and agreement for L = 128 .. 2048",
    "viz": "time to render every attention view of a 12x12-head BERT",
    "bert-parity": "our BERT encoder vs Hugging Face's on the offline checkpoint",
    "all": "train + attention",
}


def add_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=list(WHAT), help="; ".join(f"{k}: {v}" for k, v in WHAT.items()))
    p.add_argument("--iters", type=positive_int, default=40, help="timed steps per measurement")
    p.add_argument("--repeats", type=positive_int, default=3, help="alternating measurements of each")
    p.add_argument("--data", help="text file (default: $TINYFORMER_DATA, then cache/download)")
    p.add_argument("--json", metavar="FILE", help="also write every figure, with the machine description, to FILE")


def cmd_bench(a: argparse.Namespace) -> int:
    if a.json and a.what not in ("train", "attention", "all"):
        raise UserError(f"--json is written by bench train, attention and all, not by bench {a.what}")
    json_path = output_path(a.json) if a.json else None  # checked before minutes of measuring
    data = str(input_file(a.data, "data file")) if a.data else None
    if a.what == "bert-parity":
        from tinyformer.bench.parity import run_parity

        return run_parity()
    if a.what == "viz":
        from tinyformer.bench.viz import run_viz_benchmark

        return run_viz_benchmark(repeats=a.repeats)
    from tinyformer.bench.attention import run_attention_benchmark
    from tinyformer.bench.train import run_benchmark
    from tinyformer.device import machine

    figures: dict = {"machine": machine()}
    if a.what in ("train", "all"):
        figures["train"] = run_benchmark(iters=a.iters, repeats=a.repeats, data=data)
    if a.what in ("attention", "all"):
        figures["attention"] = run_attention_benchmark(repeats=max(a.repeats, 3))
    if json_path:
        make_dir(json_path.parent)
        write_text(json_path, json.dumps(figures, indent=2) + "\n")
        print(f"wrote {json_path}")
    return 0
