"""bench gpt2 compares like with like: the same weights give the same loss on the same batch in both models."""

import pytest
import torch

from tinyformer.bench.gpt2 import build, one_step, run_gpt2_benchmark

pytest.importorskip("transformers")
TINY = dict(n_layer=2, n_head=2, n_embd=32, n_positions=160, vocab_size=300)


def test_both_models_compute_the_same_loss_and_gradients():
    ours, theirs = build(torch.device("cpu"), TINY)
    ids = torch.randint(0, 300, (2, 129), generator=torch.Generator().manual_seed(1))
    _, a = one_step(ours, ids, hf=False)
    _, b = one_step(theirs, ids, hf=True)
    assert abs(a - b) < 1e-4
    g_ours = ours.blocks[0].mlp.fc.weight.grad
    g_theirs = theirs.transformer.h[0].mlp.c_fc.weight.grad.T  # Conv1D stores (in, out)
    assert torch.allclose(g_ours, g_theirs, atol=1e-5)


def test_the_benchmark_reports_a_ratio_per_pair(capsys):
    figures = run_gpt2_benchmark(iters=1, repeats=2, size=TINY)
    assert len(figures["ratios"]) == 2 and all(r > 0 for r in figures["ratios"])
    assert abs(figures["loss"]["ours"] - figures["loss"]["theirs"]) < 1e-4
    assert "ratio ours/transformers" in capsys.readouterr().out
