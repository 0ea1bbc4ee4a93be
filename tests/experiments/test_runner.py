"""The study runner: a cell another study has already trained with the same config is copied, not trained."""

from __future__ import annotations

import json

from tinyformer import runfolder
from tinyformer.experiments.runner import Cell, run_grid

TINY = [
    "model.block_size=16",
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=16",
    "train.max_iters=6",
    "train.batch_size=4",
    "train.eval_interval=3",
    "train.eval_iters=1",
    "train.device=cpu",
    "sample.tokens=10",
]


def grid(text_file, folder, cells):
    return run_grid("gpt", [], [*TINY, f"data.path={json.dumps(str(text_file))}"], cells, folder)


def test_a_cell_with_the_config_of_another_studys_finished_cell_is_copied_not_trained(text_file, tmp_path, capsys):
    first = grid(text_file, tmp_path / "a", [Cell("baseline"), Cell("wide", ["model.n_embd=32"])])
    capsys.readouterr()
    second = grid(text_file, tmp_path / "b", [Cell("base"), Cell("deep", ["model.n_layer=2"])])
    printed = capsys.readouterr().out
    assert f"== base: the same config as {tmp_path / 'a' / 'baseline'} (finished): copied" in printed
    assert "== deep:" in printed and "deep: the same config" not in printed  # a new config is trained
    a, b = (tmp_path / "a" / "baseline"), (tmp_path / "b" / "base")
    assert (a / runfolder.METRICS).read_bytes() == (b / runfolder.METRICS).read_bytes()  # its log, not a new run's
    assert (a / runfolder.WEIGHTS).read_bytes() == (b / runfolder.WEIGHTS).read_bytes()
    assert second[0].run.state.step == first[0].run.state.step == 6
    assert not (b / runfolder.LOCK).exists()


def test_an_unfinished_twin_is_not_copied(text_file, tmp_path, capsys):
    grid(text_file, tmp_path / "a", [Cell("baseline")])
    saved = tmp_path / "a" / "baseline" / runfolder.CONFIG
    config = json.loads(saved.read_text())
    config["train"]["max_iters"] = 30  # the same run, now at step 6 of 30: interrupted, not finished
    saved.write_text(json.dumps(config))
    capsys.readouterr()
    grid(text_file, tmp_path / "b", [Cell("base", ["train.max_iters=30"])])  # that very config
    assert "copied" not in capsys.readouterr().out
    assert runfolder.read_state(tmp_path / "b" / "base" / runfolder.STATE).step == 30
