"""The context-length cases of `experiment attention-variants`: a case's peak memory is its own, even when
started from a large process."""

import torch

from tinyformer.experiments import context


def test_a_fresh_process_measures_its_own_peak_not_its_parents():
    ballast = torch.ones(100 * 2**20)  # 400 MiB held by this (parent) process: a child must not inherit its peak
    r = context.in_fresh_process("manual", 512, "train", 1, False, "cpu")
    need = context.predicted_gib("manual", 512, "train", context.case_config("manual", 512)) * 1024  # ~24 MiB
    assert r["ms"] > 0 and need / 2 < r["peak_mib"] < 400, r  # the (B, H, L, L) matrices show, the ballast does not
    assert float(ballast[0]) == 1.0
