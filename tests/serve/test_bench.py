"""`tinyformer bench serve`: the figures it prints are measured on the run it names, and the API gives the same
text as `sample` while it is timed (the figures themselves are reported, never asserted)."""

from __future__ import annotations

import pytest

from tests.cli_helpers import user_error

pytest.importorskip("fastapi")


@pytest.mark.slow
def test_bench_serve_times_api_and_sample_on_the_same_text(runs_root, capsys):
    from tinyformer.serve.bench import run_serve_benchmark

    out = run_serve_benchmark(str(runs_root / "gpt"), repeats=1, tokens=8, clients=2, requests=3)
    assert out["same_text"] and set(out["ms_per_token"]) == {"sample", "api-bare", "api", "api-stream"}
    c = out["concurrent"]
    assert c["requests"] == 6 and c["failed"] == 0 and c["p50_ms"] <= c["p95_ms"]
    assert out["page_kb"] > 5
    printed = capsys.readouterr().out
    assert "same text as tinyformer sample: yes" in printed and "2 concurrent clients x 3 requests" in printed


def test_bench_serve_needs_a_language_model_run(runs_root, capsys):
    assert "needs --run RUN" in user_error(capsys, "bench", "serve")
    assert "'classify' run" in user_error(capsys, "bench", "serve", "--run", str(runs_root / "classify"))
    assert "--run is read by bench serve" in user_error(capsys, "bench", "train", "--run", str(runs_root / "gpt"))
