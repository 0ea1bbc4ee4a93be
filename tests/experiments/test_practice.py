"""`experiment practice`: each switch changes what it claims to, and nothing else it should not."""

from __future__ import annotations

import pytest

from tinyformer.experiments import practice
from tinyformer.lab.sources import table_facts


@pytest.mark.slow
def test_practice_switches_change_memory_not_the_result(tmp_path):
    report = practice.run(tmp_path / "practice", quick=True)
    f = table_facts(report.read_text(encoding="utf-8"))
    saved = {cell.name: float(f[f"{cell.name} / saved activations MiB"]) for cell in practice.CELLS}
    loss = {cell.name: float(f[f"{cell.name} / best val loss"]) for cell in practice.CELLS}
    # Recomputing the blocks in backward gives the same gradients: the same run, with less kept for backward.
    assert loss["grad-checkpoint"] == loss["baseline"]
    assert saved["grad-checkpoint"] < 0.5 * saved["baseline"]
    # A micro-batch of 4 keeps about a quarter of what the batch of 16 keeps; bf16 keeps 2-byte activations.
    assert 0.15 < saved["accum-4"] / saved["baseline"] < 0.4
    assert saved["bf16"] < 0.8 * saved["baseline"]
    assert (tmp_path / "practice" / "val_loss.png").is_file()
