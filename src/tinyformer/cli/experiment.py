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
    takers = ", ".join(k for k, s in EXPERIMENTS.items() if s.nanogpt)
    p.add_argument("--nanogpt", metavar="DIR", help=f"{takers}: a nanoGPT checkout, timed on the same text")
    takers = ", ".join(k for k, s in EXPERIMENTS.items() if s.minutes)
    p.add_argument("--minutes", metavar="M[,M]", help=f"{takers}: only these time budgets, e.g. 10 or 1,3")


def cmd_experiment(a: argparse.Namespace) -> int:
    from tinyformer.api import experiment

    experiment(a.name, out=a.out, quick=a.quick, data=a.data, mlm=a.mlm, nanogpt=a.nanogpt, minutes=a.minutes)
    return 0
