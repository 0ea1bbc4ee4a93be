"""The attention benchmark compares like with like, and its memory measure sees the L x L matrix."""

import pytest

from tinyformer.bench import attention
from tinyformer.bench.mfu import flops_per_token
from tinyformer.bench.train import _seed_recipe


def test_both_backends_agree_on_the_benchmark_inputs():
    rows = attention.measure(repeats=1, lengths=(64,))
    assert rows[0]["max_abs_diff"] < 1e-5 and rows[0]["manual_ms"] > 0 and rows[0]["sdpa_ms"] > 0


@pytest.mark.slow
def test_cpu_memory_measure_sees_the_manual_score_matrix():
    # manual at L=512 holds (8, 8, 512, 512) fp32 scores (64 MB) plus their softmax; the fused kernel works in tiles
    import torch

    ballast = torch.ones(50_000_000)  # a parent bigger than the child: its peak must not leak into the measure
    manual, sdpa = attention.cpu_peak_mb("manual", 512), attention.cpu_peak_mb("sdpa", 512)
    del ballast
    assert manual > 60 and manual > 2 * sdpa, (manual, sdpa)  # at least one 64 MB score matrix


def test_flops_per_token_counts_parameters_and_attention():
    c = _seed_recipe()
    c.model.vocab_size = 65
    # 4 blocks of (4 D^2 + D attention, 8 D^2 + 5 D MLP, 4 D norms), final norm 2 D, head D V; D = 128, V = 65
    D = 128
    matmul_params = 4 * (12 * D * D + 10 * D) + 2 * D + D * 65
    assert flops_per_token(c) == 6 * matmul_params + 12 * 4 * D * 128
