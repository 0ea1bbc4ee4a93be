"""What a KV cache buys on this machine: per-token generation time with and without it.

For a context of L tokens, the cost of one more token is measured as (t(n) - t(1)) / (n - 1), where t(k)
is the wall time of generating k tokens (greedy) after a prompt of L - n tokens: prefill and the first
step cancel, what is left is the cost of the steps that end at context L. Medians over repeated, alternating
runs. Two widths: the seed MiniGPT and a ~10M-parameter one; random weights (speed does not depend on
them). Hugging Face `generate` (its own cache) on the exported seed model is the peer.

    tinyformer experiment kv-cache [--quick] [--out DIR]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.experiments.report import figure, markdown_table, study_folder, write_report
from tinyformer.generate.sampling import generate
from tinyformer.models import count_parameters
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.plots import plot_series

MODELS = {  # name -> (config, contexts measured)
    "seed (0.8M)": (GPTConfig(vocab_size=65), [8, 16, 32, 64, 96, 128]),
    "10M": (GPTConfig(vocab_size=65, block_size=256, n_layer=6, n_head=6, n_embd=384), [8, 16, 32, 64, 128, 256]),
}
QUICK_MODELS = {
    "tiny": (GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=32), [16, 32]),
    "tiny-wide": (GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=64), [16, 32]),
}


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def per_token_ms(t_n: list[float], t_1: list[float], n: int) -> float:
    """(median t(n) - median t(1)) / (n - 1) in milliseconds: the cost of one more token, prefill excluded."""
    return (statistics.median(t_n) - statistics.median(t_1)) / (n - 1) * 1e3


def hf_peer(model: MiniGPT):
    """The model exported to GPT-2 and loaded by transformers, or None without transformers."""
    try:
        import transformers
    except ImportError:
        return None
    from tinyformer.export import export_hf

    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" bar is noise in a study's output
    transformers.utils.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as d:
        return transformers.GPT2LMHeadModel.from_pretrained(export_hf(model, d)).eval()


def measure(config: GPTConfig, contexts: list[int], n_new: int, repeats: int, with_hf: bool) -> list[dict]:
    torch.manual_seed(0)
    model = MiniGPT(config).eval()
    hf = hf_peer(model) if with_hf else None
    rows = []
    for L in contexts:
        n = min(n_new, L - 1)  # short contexts: fewer new tokens, the prompt keeps at least one
        prompt = torch.randint(0, config.vocab_size, (1, L - n))  # (1, L - n): the context ends at L
        ways = {
            "cache": lambda k, p=prompt: generate(model, p, k, temperature=0, use_cache=True),
            "no cache": lambda k, p=prompt: generate(model, p, k, temperature=0, use_cache=False),
        }
        if hf is not None:
            ways["HF generate"] = lambda k, p=prompt: hf.generate(
                p, max_new_tokens=k, min_new_tokens=k, do_sample=False, pad_token_id=0
            )
        times: dict[str, tuple[list[float], list[float]]] = {w: ([], []) for w in ways}
        with torch.no_grad():
            for fn in ways.values():
                fn(2)  # warm-up
            for _ in range(repeats):  # alternate, so drifting machine load hits every way alike
                for w, fn in ways.items():
                    times[w][0].append(seconds(lambda fn=fn, n=n: fn(n)))
                    times[w][1].append(seconds(lambda fn=fn: fn(1)))
        row = {w: per_token_ms(t_n, t_1, n) for w, (t_n, t_1) in times.items()}
        rows.append({"context": L} | row)
        print(f"  context {L}: " + ", ".join(f"{w} {ms:.2f} ms/token" for w, ms in row.items()))
    return rows


def slope(rows: list[dict], way: str) -> float:
    """Least-squares slope of ms/token against context, in microseconds per context token."""
    xs, ys = [r["context"] for r in rows], [r[way] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return 1e3 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    if data:
        raise UserError("kv-cache times random-weight models; it reads no text and takes no --data")
    folder = study_folder("kv-cache", out, quick)
    models, n, repeats = (QUICK_MODELS, 5, 3) if quick else (MODELS, 17, 7)
    results = {}
    for i, (name, (config, contexts)) in enumerate(models.items()):
        params = count_parameters(MiniGPT(config))
        print(f"{name}: {params:,} parameters, {config.n_layer} layers, width {config.n_embd}")
        results[name] = (params, measure(config, contexts, n, repeats, with_hf=i == 0))
    return report(folder, results, n, repeats, quick)


def plot_costs(folder: Path, results: dict[str, tuple[int, list[dict]]]) -> None:
    """ms_per_token.png: each model's ms per new token against the context, one curve per way of generating."""
    curves = {
        f"{name}: {w}": [(r["context"], r[w]) for r in rows]
        for name, (_, rows) in results.items()
        for w in rows[0]
        if w != "context"
    }
    plot_series(
        curves, folder / "ms_per_token.png", "context (tokens)", "ms per new token", "Generation cost per token"
    )


def cache_verdict(rows: list[dict]) -> str:
    """Where the cache is slower than re-running the window, or, where it never is, its smallest and largest gain."""
    speedups = {r["context"]: r["no cache"] / r["cache"] for r in rows}
    losing = [L for L, s in speedups.items() if s < 1.0]
    return (
        f"The cache is slower than re-running the window at context {', '.join(map(str, losing))}."
        if losing
        else f"The cache pays off at every context measured; its smallest gain is {min(speedups.values()):.2f}x "
        f"(context {min(speedups, key=speedups.get)}), its largest {max(speedups.values()):.2f}x "
        f"(context {max(speedups, key=speedups.get)})."
    )


def model_section(name: str, params: int, rows: list[dict]) -> list[str]:
    """One model's part of the report: its table of ms per token (HF's column where it was measured), slopes."""
    ways = [w for w in rows[0] if w != "context"]
    table = []
    for r in rows:
        line = [r["context"], f"{r['no cache']:.2f}", f"{r['cache']:.2f}", f"{r['no cache'] / r['cache']:.2f}x"]
        if "HF generate" in r:
            line += [f"{r['HF generate']:.2f}", f"{r['HF generate'] / r['cache']:.2f}x"]
        table.append(line)
    cols = ["context", "no cache ms/token", "cache ms/token", "cache speedup"]
    cols += ["HF generate ms/token", "HF / ours (>1: ours faster)"] if "HF generate" in ways else []
    return [
        f"## {name}: {params:,} parameters",
        "",
        markdown_table(cols, table),
        "",
        f"Measured slopes: {slope(rows, 'no cache'):.1f} µs per context token without the cache, "
        f"{slope(rows, 'cache'):.1f} µs with it. {cache_verdict(rows)}",
        "",
    ]


def report(folder: Path, results: dict[str, tuple[int, list[dict]]], n: int, repeats: int, quick: bool) -> Path:
    plot_costs(folder, results)
    parts = [
        f"Each figure is (median t(n) - median t(1)) / (n - 1) over {repeats} "
        f"alternating measurements, n = {n} new tokens (L - 1 for contexts L <= {n}) after a prompt of L - n: "
        "the cost of one more greedy token at contexts up to L, prefill excluded.",
        "",
        "Per new token, with L tokens of context, n_layer layers and width D:",
        "",
        "- without a cache the whole window is re-run: O(n_layer * (L * D^2 + L^2 * D)) - linear in L while the "
        "L * D^2 projections and MLP dominate, quadratic once attention does;",
        "- with a cache only the new token is run and it attends to L cached keys: O(n_layer * (D^2 + L * D)) - "
        "a constant plus a small linear term.",
        "",
    ]
    for name, (params, rows) in results.items():
        parts += model_section(name, params, rows)
    parts += [
        figure("ms_per_token.png", "ms per token"),
        "",
        "Past the block size the window slides by one token per step: the oldest token leaves, and every cached "
        "key above the first layer was computed while its token could still see it (with absolute positions, "
        "every position also shifts). tinyformer then rebuilds the cache from the window each step, exactly "
        "what the naive path computes, so there the cache buys nothing, whatever the position kind.",
    ]
    return write_report(folder, "KV cache: generation time per token", quick, parts, device="cpu", from_runs=False)
