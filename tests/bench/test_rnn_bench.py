"""bench rnn: both sides compute the same function, and every figure of the table is a real, consistent rate."""

from __future__ import annotations

import json
import math

import torch

from tinyformer.bench.rnn import build, run_rnn_benchmark
from tinyformer.models.rnn import CELLS

TINY = dict(batch=3, length=6, n_embd=8)


def test_both_sides_hold_the_same_weights_and_give_the_same_gradients() -> None:
    models = build("lstm", 12, 8, torch.device("cpu"))
    ids = torch.randint(1, 256, (3, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    grads = []
    for model in models.values():
        model(ids, mask).pow(2).sum().backward()
        grads.append(model.rnn.weight_hh_l0.grad)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=0)


def test_every_cell_and_width_gets_positive_rates_and_their_ratio(capsys) -> None:
    figures = run_rnn_benchmark(iters=2, repeats=2, hiddens=(4, 8), shape=TINY)
    rows = figures["rows"]
    assert [(r["cell"], r["hidden"]) for r in rows] == [(c, h) for c in CELLS for h in (4, 8)]
    for r in rows:
        fused, loop = r["torch_tokens_per_s"], r["scratch_tokens_per_s"]
        assert all(math.isfinite(x) and x > 0 for x in (fused, loop, r["ratio"]))
        assert r["ratio"] == fused / loop
        assert len(r["measurements"]["torch"]) == len(r["measurements"]["scratch"]) == 2
        assert sorted(r["measurements"]["torch"])[0] <= fused <= sorted(r["measurements"]["torch"])[-1]
    assert figures["bidirectional"] is False and figures["layers"] == 1 and figures["batch"] == 3
    json.dumps(figures)  # what --json writes
    out = capsys.readouterr().out
    assert "torch/scratch" in out and f"{rows[-1]['ratio']:.2f}x" in out
