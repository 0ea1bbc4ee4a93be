"""`tinyformer bench`: speed and memory figures, printed (never asserted)."""

from __future__ import annotations

import argparse

from tinyformer.bench import BENCHMARKS, Benchmark
from tinyformer.cli.common import positive_int
from tinyformer.config import PRECISIONS
from tinyformer.serve import BENCHMARK as SERVE


def benchmarks() -> dict[str, Benchmark]:
    """Every benchmark the command runs: the library's, and the playground's (`bench serve`), which sits above
    the library and the API and so is added here rather than in `tinyformer.bench`."""
    return {**BENCHMARKS, "serve": SERVE}


def add_bench(p: argparse.ArgumentParser) -> None:
    every = benchmarks()
    p.add_argument("what", choices=list(every), help="; ".join(f"{k}: {b.about}" for k, b in every.items()))
    p.add_argument(
        "--iters", type=positive_int, help="train, gpt2, rnn: timed steps per measurement (default 40, gpt2 3, rnn 5)"
    )
    p.add_argument("--repeats", type=positive_int, default=3, help="alternating measurements of each")
    p.add_argument("--max-epochs", type=positive_int, help="reverse: epochs before 'not reached' (default 15)")
    p.add_argument("--config", help="train, reverse: tinyformer's side, a preset (default: the course's recipe)")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="tinyformer's train.precision (default: fp32 for train, beside bf16 where native; the config's for "
        "reverse); the course's code runs in fp32 (and in bf16 with its autocast line where native)",
    )
    p.add_argument("--device", default="auto", help="train, attention, gpt2, rnn: auto (cuda > mps > cpu), cpu or cuda")
    p.add_argument(
        "--lengths", type=_lengths, help="attention: comma-separated sequence lengths (default 128,256,512,1024,2048)"
    )
    p.add_argument("--run", help="serve: the language-model run to serve (e.g. runs/demo)")
    p.add_argument("--data", help="train, save: text file (default: $TINYFORMER_DATA, then cache/download)")
    p.add_argument("--json", metavar="FILE", help="also write every figure, with the machine description, to FILE")


def _lengths(text: str) -> tuple[int, ...]:
    """argparse type: "128,1024" -> (128, 1024), each a whole number >= 1."""
    return tuple(positive_int(part) for part in text.split(","))


def cmd_bench(a: argparse.Namespace) -> int:
    from tinyformer.api import BENCH_OPTIONS, bench

    options = {o: getattr(a, o) for o in BENCH_OPTIONS}
    bench(a.what, repeats=a.repeats, device=a.device, json_path=a.json, benchmarks=benchmarks(), **options)
    return 0
