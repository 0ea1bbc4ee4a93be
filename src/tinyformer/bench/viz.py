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
    """Render every registered view once (the last layer; the flow to "bird") -> {view: seconds}."""
    from tinyformer.viz.views import VIEWS, ViewRequest

    r = ViewRequest(out, "bench", layer=maps.n_layers - 1, flow_to="bird", html=out / "a.html", report=out / "report")
    t0 = time.perf_counter()
    r.check(maps)  # validates the request and scores every head's role
    times = {"head-role scores": time.perf_counter() - t0}
    for name, view in VIEWS.items():
        t0 = time.perf_counter()
        view(maps, r)
        times[name] = time.perf_counter() - t0
    return times


def run_viz_benchmark(repeats: int = 3) -> int:
    from tinyformer.hub import minilm_path
    from tinyformer.models.bert import BertConfig, BertEncoder
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
