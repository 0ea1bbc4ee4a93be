"""How a run evaluates and which weights its commands read (issue 56, items 3 and 4).

`train.eval_batches`: the presets score the same val batches every time (`fixed`); the MiniGPT lab's recipe
(`fresh`) scores a new batch of each split every time, as the lab's loop does. `train.weights`: one rule,
`runfolder.weights_file`, says which weights every command reads: the run's own choice (the course's recipes
"latest", as the course samples its final model), or the one a command names.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import tiny_run_config
from tests.train.test_trainer import make_trainer
from tinyformer import course, runfolder
from tinyformer.cli import main
from tinyformer.errors import UserError
from tinyformer.plots import plot_losses
from tinyformer.runs import load_run, train_run
from tinyformer.tasks import GPTTask, ReverseTask


def task_and_model(text_file, **train):
    task = GPTTask.prepare(tiny_run_config(text_file, **train))
    torch.manual_seed(0)
    return task, task.build_model().eval()


def test_fixed_evaluation_scores_the_same_val_batches_wherever_training_stands(text_file):
    task, model = task_and_model(text_file, eval_batches="fixed")
    first = task.evaluate(model)
    task.seek(40)
    assert task.evaluate(model) == first and set(first) == {"loss", "bpc"}


def test_fresh_evaluation_scores_new_batches_of_both_splits_each_time_and_the_same_ones_on_a_resume(text_file):
    task, model = task_and_model(text_file, eval_batches="fresh", eval_iters=1)
    task.seek(0)
    at_0 = task.evaluate(model)
    task.seek(40)
    at_40 = task.evaluate(model)
    assert set(at_0) == {"loss", "bpc", "train_loss"}
    assert at_0["loss"] != at_40["loss"] and at_0["train_loss"] != at_40["train_loss"]  # drawn anew
    assert at_0["loss"] != at_0["train_loss"]  # two splits, not one batch scored twice
    task.seek(40)
    assert task.evaluate(model) == at_40  # where training stands decides the draw: a resume draws the same


def test_a_resumed_fresh_run_records_the_evaluations_of_the_uninterrupted_run(text_file, tmp_path):
    full = make_trainer(text_file, tmp_path / "full", eval_batches="fresh")
    assert full.fit().status == "finished"
    part = make_trainer(text_file, tmp_path / "part", eval_batches="fresh")
    assert part.fit(until=5).status == "stopped"
    assert make_trainer(text_file, tmp_path / "part", resume=True, eval_batches="fresh").fit().status == "finished"

    def evaluations(run):
        rows = runfolder.read_metrics(run / runfolder.METRICS)
        return [(r["step"], r["loss"], r["train_loss"]) for r in rows if r["split"] == "val"]

    assert evaluations(tmp_path / "full") == evaluations(tmp_path / "part")
    assert len({loss for _, loss, _ in evaluations(tmp_path / "full")}) == len(evaluations(tmp_path / "full"))


def test_the_course_recipes_evaluate_as_the_lab_and_read_their_final_weights():
    gpt, reverse = GPTTask.default_config().train, ReverseTask.default_config().train
    assert (gpt.eval_batches, gpt.eval_iters, gpt.weights) == ("fresh", 1, "latest")
    assert reverse.weights == "latest"
    assert course.LAB["train.weights"] == course.CHAPTER["train.weights"] == "latest"


def test_loss_png_says_what_each_curve_is(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setattr(plt, "close", lambda fig: shown.append([t.get_text() for t in fig.axes[0].get_legend().texts]))
    train = [{"step": s, "split": "train", "loss": 3.0 - s / 10} for s in range(1, 5)]
    evals = [{"step": s, "split": "val", "loss": 3.1 - s / 10} for s in (0, 4)]
    plot_losses(train + evals, tmp_path / "fixed.png")
    plot_losses(train + [r | {"train_loss": r["loss"] - 0.1} for r in evals], tmp_path / "fresh.png")
    fixed, fresh = shown
    steps, fixed_val = "train steps (mean of the logged steps, dropout on)", "the same data each time"
    assert fixed == [steps, f"val, evaluated (eval mode, {fixed_val})"]
    assert fresh == [steps, *(f"{split}, evaluated (eval mode, new batches each time)" for split in ("train", "val"))]


# ---- which weights: one rule ------------------------------------------------------------------------------------
@pytest.fixture
def two_weights(text_file, tmp_path):
    """A finished run whose latest weights are then moved away from its best ones."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    run = tmp_path / "run"
    train_run(tiny_run_config(text_file, weights="best"), GPTTask, run, progress=False)
    with safe_open(run / runfolder.WEIGHTS, "pt") as f:
        moved = {k: f.get_tensor(k) + 0.5 for k in f.keys()}
        save_file(moved, run / runfolder.WEIGHTS, metadata=f.metadata())
    return run


def choose(run, weights):
    config = json.loads((run / runfolder.CONFIG).read_text())
    config["train"]["weights"] = weights
    (run / runfolder.CONFIG).write_text(json.dumps(config))


def test_every_command_reads_the_weights_the_run_names_unless_it_names_others(two_weights, capsys):
    run = two_weights
    assert runfolder.weights_file(run) == run / runfolder.BEST
    choose(run, "latest")
    assert runfolder.weights_file(run) == run / runfolder.WEIGHTS
    assert runfolder.weights_file(run, "best") == run / runfolder.BEST

    def logits(**kw):
        model = load_run(run, **kw).model
        return model(torch.tensor([[1, 2, 3]])).logits

    latest, best = logits(weights="latest"), logits(weights="best")
    assert not torch.equal(latest, best)
    assert torch.equal(logits(), latest)  # the default is the run's own choice
    choose(run, "best")
    assert torch.equal(logits(), best)
    capsys.readouterr()

    def sampled(*extra):
        assert main(["sample", str(run), "--tokens", "30", "--temperature", "0", *extra]) == 0
        return capsys.readouterr().out

    assert sampled() == sampled("--checkpoint", "best") != sampled("--checkpoint", "latest")
    choose(run, "latest")
    assert sampled() == sampled("--checkpoint", "latest")


def test_a_weights_choice_that_is_neither_is_one_line(two_weights, text_file):
    with pytest.raises(UserError, match="train.weights='final' is not one of"):
        tiny_run_config(text_file, weights="final")
    with pytest.raises(UserError, match="weights='final' is not one of best, latest"):
        runfolder.weights_file(two_weights, "final")


def test_a_run_without_a_best_checkpoint_reads_its_latest_weights(two_weights):
    (two_weights / runfolder.BEST).unlink()
    assert runfolder.weights_file(two_weights, "best") == two_weights / runfolder.WEIGHTS
