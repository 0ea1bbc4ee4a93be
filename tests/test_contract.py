"""The task contract and the one way to load a run: a task added from outside the package trains,
evaluates and predicts through the same commands; every model command takes --device; eval works on
a language model; viz attention draws every stack of an encoder-decoder; old run folders still load."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import user_error
from tinyformer.cli import main
from tinyformer.data.reversal import BOS
from tinyformer.tasks import TASKS, Card, ReverseTask, register, unregister


# ---- a new task is one module, one registry line and its test: this module is all three ----------------------------
class CopyTask(ReverseTask):
    """Copy the digits instead of reversing them: reversal's model, loss and commands, other targets."""

    name = "copy"

    def split(self, n: int, seed: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        src, _ = super().split(n, seed, max_len)  # (n, S): digits, EOS, padding
        return src, torch.cat([torch.full_like(src[:, :1], BOS), src], dim=1)  # (n, S + 1): BOS + the source


@pytest.fixture
def copy_task():
    register(CopyTask)  # the registry line
    yield CopyTask
    unregister(CopyTask.name)


@pytest.mark.slow
def test_a_task_registered_from_outside_trains_evaluates_and_predicts(copy_task, tmp_path, capsys):
    out = tmp_path / "copy"
    sets = ["model.n_embd=64", "model.d_ff=128", "model.n_encoder_layers=1", "model.n_decoder_layers=1"]
    sets += ["model.dropout=0.0", "model.attn_dropout=0.0", "data.max_len=5", "data.n_train=2000", "data.n_val=100"]
    sets += ["train.max_iters=300", "train.eval_interval=300", "train.batch_size=32", "train.schedule=constant"]
    sets += ["train.warmup_iters=30", "train.lr=0.003"]
    args = ["train", "copy", "--out", str(out), "--device", "cpu", *(x for s in sets for x in ("--set", s))]
    assert main(args) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--n", "100"]) == 0
    exact = float(capsys.readouterr().out.split("exact match ")[1].split(",")[0])
    assert exact >= 0.9  # it learned to copy, which reversal's targets would not teach
    assert main(["translate", str(out), "3 1 4 1"]) == 0
    assert capsys.readouterr().out.strip() == "3 1 4 1"
    assert "sample needs a `train gpt` run" in user_error(capsys, "sample", str(out))


# ---- one load_run, one --device ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_command_that_runs_a_model_takes_device(trained, reversal_run, tmp_path, monkeypatch, capsys):
    import tinyformer.runs as runs

    asked, loaded = [], []
    real_load = runs.load_run

    def spy(path, weights="best", device="cpu"):
        asked.append(device)
        run = real_load(path, weights, device="cpu")  # CI has only the CPU: the choice is what is checked
        loaded.append(run)
        return run

    monkeypatch.setattr(runs, "load_run", spy)
    commands = [
        ["sample", str(trained), "--tokens", "5"],
        ["eval", str(trained)],
        ["translate", str(reversal_run), "1 2 3"],
        ["viz", "attention", str(trained), "--text", "ROMEO", "--out", str(tmp_path)],
    ]
    for command in commands:
        assert main([*command, "--device", "mps"]) == 0, command
    assert asked == ["mps"] * len(commands)
    assert all(p.device.type == "cpu" for run in loaded for p in run.model.parameters())


def test_load_run_puts_the_model_on_the_device_asked_for(trained):
    from tinyformer.runs import load_run

    run = load_run(trained, device=torch.device("cpu"))
    assert {p.device.type for p in run.model.parameters()} == {"cpu"} and not run.model.training
    with pytest.raises(ValueError, match="device='tpu' is not one of"):
        load_run(trained, device="tpu")


# ---- eval on a language model --------------------------------------------------------------------------------------
def figures(out: str) -> tuple[float, float, float]:
    loss = float(out.split("loss ")[1].split()[0])
    ppl = float(out.split("perplexity ")[1].split(",")[0])
    bits = float(out.split(", ")[-1].split()[0])
    return loss, ppl, bits


@pytest.mark.slow
def test_eval_scores_a_language_model_on_its_held_out_split_or_a_file(trained, tmp_path, capsys):
    assert main(["eval", str(trained)]) == 0
    loss, ppl, bits = figures(capsys.readouterr().out)
    assert ppl == pytest.approx(math.exp(loss), rel=1e-3) and bits == pytest.approx(loss / math.log(2), rel=1e-3)
    config = json.loads((trained / "config.json").read_text())
    text = Path(config["data"]["path"]).read_text(encoding="utf-8")
    held_out = tmp_path / "held_out.txt"
    held_out.write_text(text[int(len(text) * (1 - config["data"]["val_fraction"])) :], encoding="utf-8")
    assert main(["eval", str(trained), "--data", str(held_out)]) == 0
    assert figures(capsys.readouterr().out)[0] == pytest.approx(loss, abs=1e-4)  # the same text, the same number
    alien = tmp_path / "alien.txt"
    alien.write_text("ROMEO: ¿é?", encoding="utf-8")
    assert "outside the vocabulary: '¿' 'é'" in user_error(capsys, "eval", str(trained), "--data", str(alien))


# ---- views ask the model, not its class ----------------------------------------------------------------------------
@pytest.mark.slow
def test_viz_attention_draws_every_stack_of_an_encoder_decoder(reversal_run, tmp_path, capsys):
    assert main(["viz", "attention", str(reversal_run), "--text", "7 3 0", "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == ["run-cross-L0-H0.png", "run-decoder-L0-H0.png", "run-encoder-L0-H0.png"]
    capsys.readouterr()
    assert main(["viz", "attention", str(reversal_run), "--text", "7 3 0", "--roles", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "encoder: dominant head roles" in out and "decoder: dominant" in out and "cross: dominant" in out
    assert (tmp_path / "run-cross-roles.txt").read_text().startswith("layer head")


# ---- run folders written before the glossary rename ----------------------------------------------------------------
@pytest.mark.slow
def test_a_run_folder_in_the_old_config_names_loads_translates_and_resumes(reversal_run, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(reversal_run, old)
    config = json.loads((old / "config.json").read_text())
    model = config["model"]
    model["d_model"], model["max_len"] = model.pop("n_embd"), model.pop("block_size")  # as written before
    (old / "config.json").write_text(json.dumps(config))
    assert main(["translate", str(old), "1 2 3"]) == 0
    assert main(["info", str(old)]) == 0
    assert "n_embd = 32" in capsys.readouterr().out
    assert main(["train", "reverse", "--resume", str(old), "--set", "train.max_iters=22"]) == 0
    assert json.loads((old / "config.json").read_text())["model"]["n_embd"] == 32


def test_every_task_declares_playground_views_the_page_draws():
    from tinyformer.tasks.base import VIEWS, Task, panel

    for name, task in TASKS.items():
        assert task.views and set(task.views) <= set(VIEWS), name
        if "predict" in task.views:  # the form is made of predict_args; play is the task's own or predict's text
            assert task.predict_args, name
    assert sum("generate" in t.views for t in TASKS.values()) == 1  # the language model
    assert Task.views == ("predict", "attention")
    with pytest.raises(ValueError, match="needs the fields"):
        panel("bars", "x", labels=["a"])  # values missing: the page would draw nothing


def test_each_card_says_what_its_task_class_declares():
    """The command line reads the cards (no torch); the trainer and the server read the classes: they agree."""
    import dataclasses

    from tinyformer.tasks import CARDS

    for name, card in CARDS.items():
        task = TASKS[name]
        assert card.where == f"{task.__module__}:{task.__name__}" and task.card is card, name
        assert dataclasses.replace(card, where="") == Card.of(task), name
