"""Characters or byte-level BPE for MiniGPT on Tiny Shakespeare, at the same parameter count and wall time.

A BPE token spells ~3 characters, so at the same window of tokens the model sees ~3x more text, but its
vocabulary costs parameters (V·D in the embedding, tied to the head here) and a wider softmax per token. To
compare at the same size, the character model gets the parameters back as depth: 6 blocks against the BPE
model's 4 with a 3,584-token vocabulary (about 1.2M parameters each; the report prints both counts). Loss
per token is not comparable across vocabularies; bits per character are: the val loss times the tokens per
character of the held-out text, in bits. Both train the same steps on the CPU preset, and are compared at
the shorter of the two training times (the best val bits per character each had reached by then).
What the BPE vocabulary is made of, merge by merge: `tinyformer experiment merges` (seconds, no model).

    tinyformer experiment tokenizers [--quick] [--out DIR]
"""

from __future__ import annotations

import math
from pathlib import Path

from tinyformer.experiments.gpt_studies import params, run_study, sample_text
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import Cell, CellResult
from tinyformer.plots import plot_series

CELLS = [
    Cell("char", ["model.n_layer=6"], "characters (one token each), 6 blocks, untied head"),
    Cell(
        "bpe",
        ["data.tokenizer=bpe", "data.vocab_size=3584", "model.tie_weights=true", "model.n_layer=4"],
        "byte-level BPE of 3,584 tokens learned on the train split, 4 blocks, head tied to the embedding",
    ),
]


def bpc_within(r: CellResult, seconds: float) -> float:
    """The lowest val bits per character the run had logged by `seconds` of training (nan if none yet)."""
    times, bpcs = r.series("val", "train_seconds"), r.series("val", "bpc")
    return min((v for (_, t), (_, v) in zip(times, bpcs, strict=True) if t <= seconds * 1.001), default=math.nan)


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    folder, results = run_study("tokenizers", CELLS, out, quick, data)
    times = {r.cell.name: r.series("val", "train_seconds") for r in results}
    curves = {n: [(t, v) for (_, t), (_, v) in zip(times[n], r.series("val", "bpc"), strict=True)] for n, r in
              ((r.cell.name, r) for r in results)}  # fmt: skip
    plot_series(curves, folder / "bpc_vs_time.png", "training seconds", "val bits per character", "Characters vs BPE")
    same = min(r.run.state.train_seconds for r in results)
    rows = []
    for r in results:
        secs, tokens = r.run.state.train_seconds, r.run.state.tokens_seen
        cpt = 1.0 / (r.series("val", "bpc")[-1][1] / r.series("val", "loss")[-1][1] * math.log(2))
        rows.append(
            [r.cell.name, r.run.tokenizer.vocab_size, params(r), f"{cpt:.2f}", f"{tokens / secs:,.0f}"]
            + [f"{secs:.0f}", min(v for _, v in r.series("val", "bpc")), bpc_within(r, same)]
        )
    cols = ["cell", "vocabulary", "parameters", "chars/token", "tokens/s", "train s", "best val bpc"]
    at = {r.cell.name: bpc_within(r, same) for r in results}
    winner = min(at, key=lambda n: at[n] if math.isfinite(at[n]) else math.inf)
    parts = [
        *(f"- **{r.cell.name}**: {r.cell.about}" for r in results),
        "",
        markdown_table([*cols, f"val bpc by {same:.0f} s"], rows),
        "",
        f"At the same training time ({same:.0f} s, the shorter run), the lower val bits per character is "
        f"**{winner}**'s ({at[winner]:.4f}).",
        "",
        figure("bpc_vs_time.png", "bits per character vs time"),
        "",
        "## Samples (300 tokens each, the run's sampling settings)",
        "",
        *(f"**{r.cell.name}**\n\n```\n{sample_text(r)}\n```\n" for r in results),
    ]
    return write_report(folder, "Characters vs byte-level BPE at the same parameter count and wall time", quick, parts)
