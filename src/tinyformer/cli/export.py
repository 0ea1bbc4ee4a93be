"""`tinyformer export FORMAT RUN OUT`: a run taken elsewhere (see `tinyformer.export`).

- `hf`    a MiniGPT run as a Hugging Face GPT-2 folder
- `page`  a MiniGPT run as one HTML file that runs it in a browser, offline
- `onnx`  a language model or the reversal encoder-decoder as ONNX graphs, checked against onnxruntime
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tinyformer.cli.common import add_run_args, load

FORMATS = {
    "hf": "a Hugging Face GPT-2 folder (config.json + model.safetensors)",
    "page": "one HTML file that runs the model in any browser, offline",
    "onnx": "ONNX graphs checked against onnxruntime (the onnx extra)",
}


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=tuple(FORMATS), help="; ".join(f"{k}: {v}" for k, v in FORMATS.items()))
    add_run_args(p, device=False)  # written from the CPU
    p.add_argument("out", help="what to write: a new or empty folder (hf, onnx), an .html file (page)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace what is there: the file, or the export's files in the folder (a link is replaced, not followed)",
    )
    p.add_argument(
        "--precision",
        choices=("fp16", "fp32", "int8"),
        default="fp16",
        help="page: how the weights are stored (fp16, the default; fp32; int8 with a scale per row)",
    )
    p.add_argument("--attention", action="store_true", help="onnx: the language model's graph gives its attention too")


def cmd_export(a: argparse.Namespace) -> int:
    return {"hf": export_hf, "page": export_page, "onnx": export_onnx}[a.format](a)


def export_hf(a: argparse.Namespace) -> int:
    from tinyformer.export import check_target, export_hf

    check_target(Path(a.out), a.force, a.run)  # before loading anything
    run = load(a)
    out = export_hf(run.model, a.out, run.tokenizer, force=a.force, run_dir=run.path)
    print(f"wrote {out}/config.json, {out}/model.safetensors and {out}/tokenizer.json")
    arch = json.loads((out / "config.json").read_text())["architectures"][0]  # GPT2LMHeadModel, LlamaForCausalLM, ...
    print(
        f"load it with transformers.{arch}.from_pretrained({str(out)!r}) and "
        f"AutoTokenizer.from_pretrained({str(out)!r}); --set model.init_from={out} starts a new run from it"
    )
    return 0


def export_page(a: argparse.Namespace) -> int:
    from tinyformer.export.page import check_page_target, export_page

    check_page_target(a.out, a.force, a.run)  # before loading anything
    for line in export_page(load(a), a.out, a.precision, force=a.force).lines():
        print(line)
    return 0


def export_onnx(a: argparse.Namespace) -> int:
    from tinyformer.export import check_target
    from tinyformer.export.onnx import export_onnx
    from tinyformer.extras import need

    need("tinyformer export onnx", "onnx", "onnxscript", "onnxruntime")  # before loading anything
    check_target(Path(a.out), a.force, a.run)
    for line in export_onnx(load(a), a.out, attention=a.attention, force=a.force).lines():
        print(line)
    return 0
