"""`tinyformer bench`: speed and memory figures, printed (never asserted)."""

from __future__ import annotations

import argparse
import json

from tinyformer.cli.common import positive_int
from tinyformer.config import PRECISIONS
from tinyformer.device import pick_device
from tinyformer.errors import UserError
from tinyformer.files import input_file, make_dir, output_path, write_text

WHAT = {
    "train": "training tokens/s at equal loss, peak memory and MFU vs the course lab's MiniGPT",
    "reverse": "time to exact match >= 0.99 and per epoch on reversal vs the course's encoder-decoder",
    "attention": "manual vs SDPA time, memory and agreement for L = 128 .. 2048",
    "viz": "time to render every attention view of a 12x12-head BERT",
    "bert-parity": "our BERT encoder vs Hugging Face's on the offline checkpoint",
    "gpt2": "fine-tuning tokens/s of MiniGPT in GPT-2 small's configuration vs transformers' GPT2LMHeadModel",
    "rnn": "forward + backward tokens/s of torch's fused RNN/LSTM/GRU vs the scratch loop, hidden 128 and 512",
    "all": "train + attention",
}
JSON_WRITERS = ("train", "reverse", "attention", "gpt2", "rnn", "all")


def add_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=list(WHAT), help="; ".join(f"{k}: {v}" for k, v in WHAT.items()))
    p.add_argument(
        "--iters", type=positive_int, help="train, gpt2, rnn: timed steps per measurement (default 40, gpt2 3, rnn 5)"
    )
    p.add_argument("--repeats", type=positive_int, default=3, help="alternating measurements of each")
    p.add_argument("--max-epochs", type=positive_int, default=15, help="reverse: epochs before 'not reached'")
    p.add_argument("--config", help="reverse: tinyformer's preset (default: the recipe of configs/reverse.toml)")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="tinyformer's train.precision (default: auto for train, the config's for reverse); "
        "the course's code always runs in fp32",
    )
    p.add_argument("--device", default="auto", help="train, attention, gpt2, rnn: auto (cuda > mps > cpu), cpu or cuda")
    p.add_argument(
        "--lengths", type=_lengths, help="attention: comma-separated sequence lengths (default 128,256,512,1024,2048)"
    )
    p.add_argument("--data", help="train: text file (default: $TINYFORMER_DATA, then cache/download)")
    p.add_argument("--json", metavar="FILE", help="also write every figure, with the machine description, to FILE")


def _lengths(text: str) -> tuple[int, ...]:
    """argparse type: "128,1024" -> (128, 1024), each a whole number >= 1."""
    return tuple(positive_int(part) for part in text.split(","))


def cmd_bench(a: argparse.Namespace) -> int:
    if a.json and a.what not in JSON_WRITERS:
        raise UserError(f"--json is written by bench {', '.join(JSON_WRITERS)}, not by bench {a.what}")
    if a.config and a.what != "reverse":
        raise UserError(f"--config is read by bench reverse, not by bench {a.what}")
    json_path = output_path(a.json) if a.json else None  # checked before minutes of measuring
    a.device = pick_device(a.device).type  # an absent or unknown device: one line now, not a worker's traceback
    data = str(input_file(a.data, "data file")) if a.data else None
    if a.what == "bert-parity":
        from tinyformer.bench.parity import run_parity

        return run_parity()
    if a.what == "viz":
        from tinyformer.bench.viz import run_viz_benchmark

        return run_viz_benchmark(repeats=a.repeats)
    figures = _measure(a, data)
    if json_path:
        make_dir(json_path.parent)
        write_text(json_path, json.dumps(figures, indent=2) + "\n")
        print(f"wrote {json_path}")
    return 0


def _measure(a: argparse.Namespace, data: str | None) -> dict:
    """The figures of bench train, reverse, attention, gpt2, rnn or all, with the machine they were measured on."""
    from tinyformer.device import machine

    figures: dict = {"machine": machine()}
    if a.what == "reverse":
        from tinyformer.bench.reverse import run_reverse_benchmark

        figures["reverse"] = run_reverse_benchmark(a.repeats, a.max_epochs, a.config, a.precision)
    if a.what in ("train", "all"):
        from tinyformer.bench.train import run_benchmark

        figures["train"] = run_benchmark(a.iters or 40, a.repeats, data, a.precision or "auto", a.device)
    if a.what == "gpt2":
        from tinyformer.bench.gpt2 import run_gpt2_benchmark

        figures["gpt2"] = run_gpt2_benchmark(a.iters or 3, a.repeats, a.device)
    if a.what == "rnn":
        from tinyformer.bench.rnn import run_rnn_benchmark

        figures["rnn"] = run_rnn_benchmark(a.iters or 5, a.repeats, a.device)
    if a.what in ("attention", "all"):
        from tinyformer.bench.attention import run_attention_benchmark

        lengths = dict(lengths=a.lengths) if a.lengths else {}
        figures["attention"] = run_attention_benchmark(repeats=max(a.repeats, 3), device=a.device, **lengths)
    return figures
