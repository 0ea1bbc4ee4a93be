"""`tinyformer export hf RUN OUT`: a MiniGPT run as a Hugging Face GPT-2 folder."""

from __future__ import annotations

import argparse

from tinyformer.cli.infer import add_run_args, load


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=("hf",), help="hf: a Hugging Face GPT-2 folder (config.json + model.safetensors)")
    add_run_args(p, device=False)  # written from the CPU
    p.add_argument("out", help="folder to write")


def cmd_export(a: argparse.Namespace) -> int:
    from tinyformer.export import export_hf
    from tinyformer.train import checkpoint as ckpt

    run = load(a)
    out = export_hf(run.model, a.out, run.path / ckpt.TOKENIZER)
    print(f"wrote {out}/config.json and {out}/model.safetensors")
    print(f"load it with transformers.GPT2LMHeadModel.from_pretrained({str(out)!r})")
    return 0
