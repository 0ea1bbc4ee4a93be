"""The --quick classifier bake-off end to end: masked-LM cell, every encoder, the report from the runs."""

import json

import pytest

from tests.conftest import needs_play
from tinyformer.experiments import classifiers, runner


@pytest.mark.slow
@needs_play
def test_quick_bakeoff_reports_every_encoder_and_reuses_its_runs(quick_study, monkeypatch):
    import matplotlib.image

    study = quick_study("classifiers")
    tmp_path, text = study.folder, study.report.read_text()
    cells = ["transformer-scratch", "transformer-pretrained", "transformer-cls", "textcnn", "rnn", "lstm", "gru"]
    cells += ["bilstm", "bigru"]
    for name in cells:
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        scores = json.loads((tmp_path / name / "test.json").read_text())  # the table is read from the runs
        assert float(row.split("|")[4]) == pytest.approx(scores["acc"], abs=5e-5)
        assert float(row.split("|")[5]) == pytest.approx(scores["macro_f1"], abs=5e-5)
        assert (tmp_path / name / "confusion.png").is_file()
    speed = {n: next(line for line in text.splitlines() if line.startswith(f"| {n} |")).split("|")[8] for n in cells}
    assert speed["transformer-scratch"] == speed["transformer-pretrained"]  # one architecture: timed once
    assert all(float(v.replace(",", "")) > 0 for v in speed.values())
    assert "| majority class |" in text and "perplexity" in text and "| filler | probability |" in text
    img = matplotlib.image.imread(tmp_path / "accuracy_vs_params.png")
    assert img.shape[0] > 300 and float(img[..., :3].std()) > 0.05

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(runner, "train_run", no_training)
    again = classifiers.run(tmp_path, quick=True)
    assert again.read_text().splitlines()[:12] == text.splitlines()[:12]
