"""`experiment tagging` and `experiment qa` at --quick size: cells differ only in their init, the tables are read
from the runs' test.json, the plots exist, finished cells are reused, and --mlm is checked."""

import json
import os
from pathlib import Path

import pytest

from tests.cli_helpers import user_error
from tinyformer.experiments import runner, token_heads

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(os.environ.get("TINYFORMER_DATA", "/nonexistent")).is_file(), reason="needs the play"),
]


def row(text: str, name: str) -> list[str]:
    return [c.strip() for c in next(line for line in text.splitlines() if line.startswith(f"| {name} |")).split("|")]


def config(folder: Path, cell: str) -> dict:
    return json.loads((folder / cell / "config.json").read_text())


def test_quick_tagging_and_qa_reports_come_from_their_runs(quick_study, monkeypatch, capsys):
    tagging = quick_study("tagging")
    tag_dir, text = tagging.folder, tagging.report.read_text()
    mlm = tag_dir.parent / "classifiers" / "mlm"  # `--mlm` the bake-off's masked LM, as the lab makes it
    assert not (tag_dir / "pretrain-mlm").exists()
    scratch, pre = config(tag_dir, "scratch"), config(tag_dir, "from-mlm")
    assert pre["model"].pop("init_from") == str(mlm.resolve()) and scratch["model"].pop("init_from") == ""
    assert scratch["data"].pop("tokenizer") == str(mlm.resolve())  # the same tokenizer: only the init differs
    pre["data"].pop("tokenizer")
    assert scratch["model"] == pre["model"] and scratch["train"] == pre["train"] and scratch["data"] == pre["data"]
    for name, init in (("scratch", "random init"), ("from-mlm", "our masked-LM init")):
        t = json.loads((tag_dir / name / "test.json").read_text())
        assert float(row(text, init)[4]) == pytest.approx(t["test"]["f1"], abs=5e-5)
        assert float(row(text, init)[5]) == pytest.approx(t["unseen"]["f1"], abs=5e-5)
    gazetteer = row(text, "gazetteer (the training names looked up)")
    assert float(gazetteer[4]) == 1.0 and float(gazetteer[5]) == 0.0  # by construction of the task
    assert (tag_dir / "f1_per_epoch.png").stat().st_size > 5000

    qa = quick_study("qa")  # `--mlm` the same masked LM
    qa_dir, text = qa.folder, qa.report.read_text()
    assert not (qa_dir / "pretrain-mlm").exists()
    for name, init in (("scratch", "random init"), ("from-mlm", "our masked-LM init")):
        t = json.loads((qa_dir / name / "test.json").read_text())
        assert float(row(text, init)[4]) == pytest.approx(t["em"], abs=5e-5)
        assert float(row(text, init)[5]) == pytest.approx(t["f1"], abs=5e-5)
    base = json.loads((qa_dir / "scratch" / "test.json").read_text())["baseline"]
    assert float(row(text, "nearest header before the passage midpoint")[4]) == pytest.approx(base["em"], abs=5e-5)
    assert 0.2 < base["em"] < 0.7  # far from perfect: the task needs the question
    assert (qa_dir / "span.png").stat().st_size > 5000 and (qa_dir / "f1_per_epoch.png").is_file()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(runner, "train_run", no_training)
    assert token_heads.qa(qa_dir, quick=True, mlm=str(mlm)).read_text() == text

    assert "applies to the tagging and qa" in user_error(capsys, "experiment", "ablation", "--quick", "--mlm", str(mlm))
