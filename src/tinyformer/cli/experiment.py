"""`tinyformer experiment NAME`: train a grid of runs and write its report (see `tinyformer.experiments`)."""

from __future__ import annotations

import argparse

from tinyformer.experiments import EXPERIMENTS


def add_experiment(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=list(EXPERIMENTS), help="; ".join(f"{k}: {s.about}" for k, s in EXPERIMENTS.items()))
    p.add_argument("--quick", action="store_true", help="tiny sizes (for CI): checks the pipeline, not the answer")
    p.add_argument(
        "--out",
        help="experiment folder (default: runs/experiments/NAME; NAME-quick with --quick); finished cells are reused",
    )
    p.add_argument(
        "--data",
        help="the play for the MiniGPT, tagging and qa studies (default: $TINYFORMER_DATA, then cache/download)",
    )
    takers = ", ".join(k for k, s in EXPERIMENTS.items() if s.mlm)
    p.add_argument("--mlm", metavar="RUN", help=f"{takers}: the masked-LM run to start from (default: train one)")


def cmd_experiment(a: argparse.Namespace) -> int:
    from tinyformer.errors import UserError
    from tinyformer.extras import need

    study = EXPERIMENTS[a.name]
    if a.mlm and not study.mlm:
        takers = " and ".join(k for k, s in EXPERIMENTS.items() if s.mlm)
        raise UserError(f"--mlm applies to the {takers} experiments, not {a.name!r}")
    need(f"experiment {a.name}", *study.needs)
    study(a.out, quick=a.quick, data=a.data, **({"mlm": a.mlm} if a.mlm else {}))
    return 0
