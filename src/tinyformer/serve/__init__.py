"""`tinyformer serve`: a local web playground over the runs of a folder (see `tinyformer.serve.app`).

`BENCHMARK` is its entry of `tinyformer bench` (`bench serve`, measured in `serve/bench.py`): the playground sits
above the library's benchmarks (`tinyformer.bench.BENCHMARKS`), so the command line adds it to them
(`cli/bench.py`) and none of them imports the server.
"""

from __future__ import annotations

from argparse import Namespace

from tinyformer.bench import Benchmark


def _serve(a: Namespace) -> dict:
    from tinyformer.serve.bench import run_serve_benchmark

    return {"serve": run_serve_benchmark(a.run, max(a.repeats, 5))}


BENCHMARK = Benchmark(
    "the playground's ms/token vs tinyformer sample, 8 concurrent clients' p50/p95, page weight",
    _serve,
    ("run",),
    needs=("fastapi", "httpx"),
)
