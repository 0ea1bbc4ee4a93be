"""`tinyformer export hf RUN OUT`: a MiniGPT run as a Hugging Face GPT-2 folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from tinyformer.cli.common import add_run_args, load


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=("hf",), help="hf: a Hugging Face GPT-2 folder (config.json + model.safetensors)")
    add_run_args(p, device=False)  # written from the CPU
    p.add_argument("out", help="folder to write (new or empty)")
    p.add_argument("--force", action="store_true", help="write into a folder that already holds files")


def cmd_export(a: argparse.Namespace) -> int:
    from tinyformer.export import check_target, export_hf

    check_target(Path(a.out), a.force)  # before loading anything
    run = load(a)
    out = export_hf(run.model, a.out, run.tokenizer, force=a.force)
    print(f"wrote {out}/config.json, {out}/model.safetensors and {out}/tokenizer.json")
    print(
        f"load it with transformers.GPT2LMHeadModel.from_pretrained({str(out)!r}) and "
        f"AutoTokenizer.from_pretrained({str(out)!r}); --set model.init_from={out} starts a new run from it"
    )
    return 0
