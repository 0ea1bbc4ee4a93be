"""`experiment practice`: each switch changes what it claims to, and nothing else it should not."""

from __future__ import annotations

import json

import pytest

from tinyformer.experiments import practice
from tinyformer.results import table_facts


@pytest.fixture
def study(quick_study):
    made = quick_study("practice")
    return made.folder, made.report


@pytest.mark.slow
def test_practice_switches_change_memory_not_the_result(study):
    folder, report = study
    f = table_facts(report.read_text(encoding="utf-8"))
    saved = {cell.name: float(f[f"{cell.name} / saved activations MiB"]) for cell in practice.CELLS}
    loss = {cell.name: float(f[f"{cell.name} / best val loss"]) for cell in practice.CELLS}
    # Recomputing the blocks in backward gives the same gradients: the same run, with less kept for backward.
    assert loss["grad-checkpoint"] == loss["baseline"]
    assert saved["grad-checkpoint"] < 0.5 * saved["baseline"]
    # A micro-batch of 4 keeps about a quarter of what the batch of 16 keeps; bf16 keeps 2-byte activations.
    assert 0.15 < saved["accum-4"] / saved["baseline"] < 0.4
    assert saved["bf16"] < 0.8 * saved["baseline"]
    assert (folder / "val_loss.png").is_file()


@pytest.mark.slow
def test_each_practice_cell_trained_with_its_switch(study):
    """The table's rows are only worth reading if each run really had its switch on (and nothing else)."""
    folder, _ = study
    config = {c.name: json.loads((folder / c.name / "config.json").read_text()) for c in practice.CELLS}
    assert {n: c["train"]["precision"] for n, c in config.items()} == {**dict.fromkeys(config, "fp32"), "bf16": "bf16"}
    assert config["no-clip"]["train"]["grad_clip"] == 0 and config["baseline"]["train"]["grad_clip"] > 0
    assert config["no-warmup"]["train"]["warmup_iters"] == 0 < config["baseline"]["train"]["warmup_iters"]
    b, a = config["baseline"]["train"], config["accum-4"]["train"]
    assert a["batch_size"] * a["grad_accum"] == b["batch_size"] * b["grad_accum"] and a["grad_accum"] == 4
    assert config["grad-checkpoint"]["model"]["grad_checkpoint"] and not config["baseline"]["model"]["grad_checkpoint"]
