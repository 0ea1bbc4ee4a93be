"""How long the attention views take for a BERT-base-sized model (12 layers x 12 heads,
random weights) on a 20-token sentence: capture, every static view, the HTML explorer
and the report, each timed over repeats (median).

    tinyformer bench viz [--repeats 3]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

SENTENCE = "the old man saw the small bird with his new telescope from the top of the hill today"


def _views(maps, out: Path) -> dict:
    """Render everything once -> {view: seconds}."""
    from tinyformer.viz import heatmaps as hm
    from tinyformer.viz.html import write_explorer
    from tinyformer.viz.report import write_report
    from tinyformer.viz.roles import head_roles

    steps = {
        "one head": lambda: hm.plot_head(maps, 11, 0, out / "head"),
        "all heads, every layer (12 grids)": lambda: [hm.plot_layer(maps, l, out / f"l{l}") for l in range(12)],
        "flow to one token": lambda: hm.plot_flow_to(maps, "bird", out / "flow"),
        "head roles (scores + figure)": lambda: hm.plot_roles(head_roles(maps), out / "roles"),
        "HTML explorer": lambda: write_explorer(maps, out / "a.html"),
        "report (5 figures + table)": lambda: write_report(maps, head_roles(maps), out / "report", "bird"),
    }
    times = {}
    for name, step in steps.items():
        t0 = time.perf_counter()
        step()
        times[name] = time.perf_counter() - t0
    return times


def run_viz_benchmark(repeats: int = 3) -> int:
    from tinyformer.models.bert import BertConfig, BertEncoder, minilm_path
    from tinyformer.viz.capture import capture_attention
    from tinyformer.viz.hf import load_hf_encoder

    _, tokenizer, _ = load_hf_encoder(str(minilm_path()))  # an uncased BERT WordPiece vocabulary
    torch.manual_seed(0)
    model = BertEncoder(BertConfig(vocab_size=tokenizer.vocab_size)).eval()  # BERT-base sizes, random weights
    rows: list[dict] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        maps = capture_attention(model, SENTENCE, tokenizer, name="bert-base (random)")
        capture = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as d:
            rows.append({"capture (forward pass)": capture, **_views(maps, Path(d))})
    T = len(maps.query_tokens[0])
    print(f"{maps.n_layers} layers x {maps.n_heads} heads, {T} tokens, {repeats} repeats (median seconds):")
    for name in rows[0]:
        print(f"  {name:<36} {statistics.median(r[name] for r in rows):7.2f}")
    total = statistics.median(sum(r.values()) for r in rows)
    print(f"  {'total':<36} {total:7.2f}")
    return 0
