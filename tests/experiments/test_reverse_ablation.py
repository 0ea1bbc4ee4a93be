"""The experiment runner end to end on the --quick reversal ablation: every cell trained,
the report written from the runs, and finished cells reused on a second call."""

import pytest

from tinyformer.experiments import reverse_ablation, runner


@pytest.mark.slow
def test_quick_ablation_writes_a_report_from_its_runs_and_reuses_them(tmp_path, monkeypatch):
    import matplotlib.image

    path = reverse_ablation.run(tmp_path, quick=True)
    text = path.read_text()
    names = [c.name for c in reverse_ablation.cells()]
    assert all(f"| {n} |" in text for n in names)
    assert all((tmp_path / n / "trainer_state.pt").is_file() for n in names)
    for png in ("exact_match.png", "val_loss.png", "sort-cross.png"):
        img = matplotlib.image.imread(tmp_path / png)
        assert img.shape[0] > 200 and float(img[..., :3].std()) > 0.05
    assert "| 20 |" in text and "| no |" in text  # extrapolation table reaches unseen lengths
    swiglu = [line for line in text.splitlines() if line.startswith("| swiglu |")][0]
    baseline = [line for line in text.splitlines() if line.startswith("| baseline |")][0]
    assert abs(int(swiglu.split("|")[3]) - int(baseline.split("|")[3])) < 0.01 * int(baseline.split("|")[3])

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    monkeypatch.setattr(runner, "train_run", no_training)
    again = reverse_ablation.run(tmp_path, quick=True)
    assert again.read_text().splitlines()[:8] == text.splitlines()[:8]
