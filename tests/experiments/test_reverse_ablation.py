"""The experiment runner end to end on the --quick reversal ablation: every cell trained,
the report written from the runs, and finished cells reused on a second call (but never a folder
that holds some other run)."""

import json

import pytest

from tinyformer.errors import UserError
from tinyformer.experiments import reverse_ablation, runner


@pytest.mark.slow
def test_quick_ablation_writes_a_report_from_its_runs_and_reuses_them(quick_study, monkeypatch):
    import matplotlib.image

    study = quick_study("reverse-ablation")
    tmp_path, text = study.folder, study.report.read_text()
    names = [c.name for c in reverse_ablation.cells()]
    assert all(f"| {n} |" in text for n in names)
    assert all((tmp_path / n / "trainer_state.pt").is_file() for n in names)
    for png in ("exact_match.png", "val_loss.png", "sort-cross.png"):
        img = matplotlib.image.imread(tmp_path / png)
        assert img.shape[0] > 200 and float(img[..., :3].std()) > 0.05
    assert "| 20 |" in text and "| no |" in text  # extrapolation table reaches unseen lengths
    row = {}  # the summary table, which comes first (later tables also start their rows with a cell's name)
    for line in text.splitlines():
        if line.startswith("| "):
            row.setdefault(line.split("|")[1].strip(), line)
    swiglu, baseline, relu = (int(row[n].split("|")[3]) for n in ("swiglu", "baseline", "relu-ffn"))
    assert abs(swiglu - baseline) < 0.01 * baseline and relu == baseline  # parameters: matched, and the same
    section1 = "| baseline | default-embedding-init | no-embedding-scale | default-init-no-scale | default-init |"
    assert f"| epoch {section1} first-version |" in text
    assert "| epoch | the chapter's log (RTX 4090, bf16) | baseline here | the chapter's first version |" in text
    assert "| cell | epoch reaching 0.99 | its exact match | its val loss | train s to it |" in text
    saved = {n: json.loads((tmp_path / n / "config.json").read_text())["model"] for n in names}
    assert saved["no-embedding-scale"]["scale_embeddings"] is False and saved["baseline"]["scale_embeddings"]
    assert saved["default-init"]["init"] == "default" and saved["default-init"]["embedding_init"] == "normal"
    bare = saved["default-init-no-scale"]  # the chapter's exercise 1, second half: PyTorch's init, no sqrt(d)
    assert bare["embedding_init"] == "default" and bare["scale_embeddings"] is False
    assert saved["default-embedding-init"]["embedding_init"] == "default" and saved["relu-ffn"]["ffn"] == "relu"
    first = saved["first-version"]  # the chapter's first version: both PyTorch defaults, the sqrt(d) scale kept
    assert (first["embedding_init"], first["init"], first["scale_embeddings"]) == ("default", "default", True)
    precision = {json.loads((tmp_path / n / "config.json").read_text())["train"]["precision"] for n in names}
    assert precision == {"auto"}

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(runner, "train_run", no_training)
    again = reverse_ablation.run(tmp_path, quick=True)
    assert again.read_text().splitlines()[:8] == text.splitlines()[:8]


def test_every_cell_trains_in_auto_precision_and_those_that_cannot_learn_end_after_three_epochs():
    """The whole study runs `train.precision=auto` (bf16 autocast where the CPU has it, as the chapter's log
    ran): the baseline is `train reverse` with that alone, every other cell also stops at exact match 0.99."""
    cells = {c.name: c.overrides for c in reverse_ablation.cells()}
    assert cells["baseline"] == [reverse_ablation.PRECISION] == ["train.precision=auto"]
    assert all(
        reverse_ablation.PRECISION in o and reverse_ablation.DONE in o for n, o in cells.items() if n != "baseline"
    )
    three = {n for n, o in cells.items() if "train.max_iters=936" in o}
    assert three == {"no-positions", "pre6-warmup1", "post6-warmup1"}


def test_the_first_version_cell_is_the_chapters_first_version_both_pytorch_defaults():
    """Chapter 20.12.1's first version had neither the embedding init nor the Xavier Linears: the cell changes
    both, and only those (the other init cells change one each)."""
    cells = {c.name: c.overrides for c in reverse_ablation.cells()}
    both = ["model.embedding_init=default", "model.init=default"]
    assert cells["first-version"] == [*both, reverse_ablation.DONE, reverse_ablation.PRECISION]
    assert cells["default-embedding-init"][:1] == both[:1] and cells["default-init"][:1] == both[1:]


def test_each_cell_is_compared_at_its_first_epoch_at_the_target_the_baseline_too():
    """The baseline trains on after it reaches exact match 0.99; the table reads every cell, the baseline too, at
    its first evaluation at 0.99 (the epoch, that evaluation's loss and the seconds until then), "-" if none."""
    from types import SimpleNamespace

    from tinyformer.experiments.reverse_ablation_report import reaching
    from tinyformer.experiments.runner import Cell, CellResult

    def result(name, rows):  # 640 pairs in batches of 64: an epoch is 10 steps
        config = SimpleNamespace(data=SimpleNamespace(n_train=640), train=SimpleNamespace(batch_size=64))
        metrics = [
            {"split": "val", "step": s, "exact_match": em, "loss": lo, "train_seconds": t} for s, em, lo, t in rows
        ]
        metrics.insert(1, {"split": "train", "step": 5, "loss": 0.1, "train_seconds": 1.0})  # no exact match: skipped
        return CellResult(Cell(name), SimpleNamespace(config=config), metrics, True)

    baseline = result("baseline", [(10, 0.5, 0.3, 4.0), (20, 0.991, 0.02, 8.4), (30, 1.0, 0.001, 12.0)])
    never = result("stuck", [(10, 0.1, 1.5, 4.0), (20, 0.2, 1.2, 8.0)])
    lines = reaching([baseline, never]).splitlines()
    assert lines[0] == "| cell | epoch reaching 0.99 | its exact match | its val loss | train s to it |"
    assert lines[2:] == ["| baseline | 2 | 0.9910 | 0.0200 | 8 |", "| stuck | - | - | - | - |"]


def test_a_cell_folder_holding_another_run_is_refused_not_reused(tmp_path):
    """The old "default-init" cell (embedding_init=default) must not pass for the new one (init=default)."""
    old = tmp_path / "default-init"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"model": {"embedding_init": "default", "init": "xavier"}}))
    with pytest.raises(UserError, match="default-init holds a run with model.init='xavier', not the cell's 'default'"):
        reverse_ablation.run(tmp_path, quick=True)
