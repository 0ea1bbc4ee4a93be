"""`tinyformer experiment NAME`: train a grid of runs and write its report (see `tinyformer.experiments`)."""

from __future__ import annotations

import argparse


def add_experiment(p: argparse.ArgumentParser) -> None:
    from tinyformer.experiments import EXPERIMENTS

    p.add_argument("name", choices=list(EXPERIMENTS), help="which study")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for CI): checks the pipeline, not the answer")
    p.add_argument("--out", help="experiment folder (default: runs/experiments/NAME); finished cells are reused")
    p.add_argument("--data", help="text file for the MiniGPT studies (default: $TINYFORMER_DATA, then cache/download)")


def cmd_experiment(a: argparse.Namespace) -> int:
    from tinyformer.experiments import EXPERIMENTS

    EXPERIMENTS[a.name](a.out, quick=a.quick, data=a.data)
    return 0
