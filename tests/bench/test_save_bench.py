"""`tinyformer bench save`: one checkpoint of the seed recipe, timed; what it writes is the whole checkpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tinyformer.cli import main
from tinyformer.models.gpt import GPTConfig, MiniGPT


@pytest.mark.skipif(not Path(os.environ.get("TINYFORMER_DATA", "/nonexistent")).is_file(), reason="needs the play")
def test_a_save_writes_weights_and_both_adam_moments_and_is_timed(tmp_path, capsys):
    assert main(["bench", "save", "--repeats", "5", "--json", str(tmp_path / "save.json")]) == 0
    figures = json.loads((tmp_path / "save.json").read_text())["save"]
    params = sum(p.numel() for p in MiniGPT(GPTConfig(vocab_size=65)).parameters())
    assert figures["bytes"] > 3 * 4 * params  # fp32 weights, AdamW's two moments: nothing left out of the unit
    assert 0 < figures["min_ms"] <= figures["median_ms"] <= figures["max_ms"]
    assert "one save of the seed recipe" in capsys.readouterr().out
