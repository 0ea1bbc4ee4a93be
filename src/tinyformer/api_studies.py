"""The Python API's studies and benchmarks (`tinyformer.api` re-exports them): `experiment` trains (or reuses) a
study's grid and returns its `Report`, `bench` runs a benchmark and returns its figures. Each checks what
the command line would refuse, in one line, before minutes of work.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinyformer.errors import UserError
from tinyformer.results import Report

BENCH_OPTIONS = ("iters", "max_epochs", "config", "precision", "lengths", "data", "run")  # beside repeats, device


def experiment(name: str, *, out=None, quick: bool = False, data=None, mlm=None, nanogpt=None) -> Report:
    """`tinyformer experiment NAME`: train (or reuse) its grid of runs and write its report -> the `Report`.
    `quick`: CI sizes, which check the pipeline and answer nothing."""
    from tinyformer.experiments import EXPERIMENTS
    from tinyformer.extras import need

    if name not in EXPERIMENTS:
        raise UserError(f"experiment {name!r} is not one of {', '.join(EXPERIMENTS)}")
    study = EXPERIMENTS[name]
    if mlm and not study.mlm:
        takers = " and ".join(k for k, s in EXPERIMENTS.items() if s.mlm)
        raise UserError(f"--mlm applies to the {takers} experiments, not {name!r}")
    if nanogpt and not study.nanogpt:
        raise UserError(f"--nanogpt applies to the speedrun experiment, not {name!r}")
    need(f"experiment {name}", *study.needs)
    extra = ({"mlm": str(mlm)} if mlm else {}) | ({"nanogpt": str(nanogpt)} if nanogpt else {})
    return Report(Path(study(str(out) if out else None, quick=quick, data=data, **extra)))


def bench(name: str, *, repeats: int = 3, device: str = "auto", json_path=None, **options: Any) -> dict:
    """`tinyformer bench NAME` -> its figures by section ({} for a benchmark that only prints). Options as the
    command's flags: iters, max_epochs, config, precision, lengths, data, run; `json_path` also writes them."""
    from argparse import Namespace

    from tinyformer.bench import BENCHMARKS
    from tinyformer.device import machine, pick_device
    from tinyformer.extras import need
    from tinyformer.files import input_file, make_dir, output_path, write_text

    if name not in BENCHMARKS:
        raise UserError(f"benchmark {name!r} is not one of {', '.join(BENCHMARKS)}")
    b = BENCHMARKS[name]
    need(f"bench {name}", *b.needs)
    if json_path and not b.json:
        raise UserError(
            f"--json is written by bench {', '.join(k for k, x in BENCHMARKS.items() if x.json)}, not {name}"
        )
    for option, value in options.items():
        if option not in BENCH_OPTIONS:
            raise UserError(f"bench takes no option {option!r}; its options: {', '.join(BENCH_OPTIONS)}")
        if value is not None and option not in b.reads:
            readers = ", ".join(k for k, x in BENCHMARKS.items() if option in x.reads)
            raise UserError(f"--{option.replace('_', '-')} is read by bench {readers}, not by bench {name}")
    path = output_path(json_path) if json_path else None  # checked before minutes of measuring
    a = Namespace(**(dict.fromkeys(BENCH_OPTIONS) | options), repeats=repeats, device=pick_device(device).type)
    a.data = str(input_file(a.data, "data file")) if a.data else None
    figures = b.run(a) or {}
    if path:
        make_dir(path.parent)
        write_text(path, json.dumps({"machine": machine(), **figures}, indent=2) + "\n")
        print(f"wrote {path}")
    return figures
