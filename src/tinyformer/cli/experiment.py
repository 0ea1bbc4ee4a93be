"""`tinyformer experiment NAME`: train a grid of runs and write its report (see `tinyformer.experiments`)."""

from __future__ import annotations

import argparse

MLM_STUDIES = ("tagging", "qa")  # the studies that take --mlm


def add_experiment(p: argparse.ArgumentParser) -> None:
    from tinyformer.experiments import EXPERIMENTS

    p.add_argument("name", choices=list(EXPERIMENTS), help="which study")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for CI): checks the pipeline, not the answer")
    p.add_argument(
        "--out",
        help="experiment folder (default: runs/experiments/NAME; NAME-quick with --quick); finished cells are reused",
    )
    p.add_argument(
        "--data",
        help="the play for the MiniGPT, tagging and qa studies (default: $TINYFORMER_DATA, then cache/download)",
    )
    p.add_argument("--mlm", metavar="RUN", help="tagging, qa: the masked-LM run to start from (default: train one)")


def cmd_experiment(a: argparse.Namespace) -> int:
    from tinyformer.errors import UserError
    from tinyformer.experiments import EXPERIMENTS

    if a.mlm and a.name not in MLM_STUDIES:
        raise UserError(f"--mlm applies to the {' and '.join(MLM_STUDIES)} experiments, not {a.name!r}")
    EXPERIMENTS[a.name](a.out, quick=a.quick, data=a.data, **({"mlm": a.mlm} if a.mlm else {}))
    return 0
