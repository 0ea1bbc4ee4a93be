"""The Python API (`tinyformer.api`): each command as a function returning objects, the command line calling it.

What is checked: `train` reuses a finished run of the same config, continues an interrupted one and refuses a
run of another config; the CLI prints what the API returns (one code path); the objects a notebook shows
(Figure, Report, CrossAttention) hold what they claim; bad input is one UserError naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli_helpers import cli
from tinyformer import api, runfolder
from tinyformer.errors import UserError
from tinyformer.results import Report
from tinyformer.train.trainer import Trainer

TINY = {
    "model.block_size": 16,
    "model.n_layer": 1,
    "model.n_head": 2,
    "model.n_embd": 16,
    "train.max_iters": 12,
    "train.batch_size": 4,
    "train.eval_interval": 4,
    "train.eval_iters": 2,
    "train.device": "cpu",
    "sample.tokens": 20,
}


def tiny(text_file, **more) -> dict:
    return TINY | {"data.path": str(text_file)} | more


def test_overrides_take_a_mapping_or_the_command_lines_strings():
    assert api.overrides({"model.n_layer": 2, "train.stop_at": "loss<=1.9", "model.causal": False}) == [
        "model.n_layer=2",
        'train.stop_at="loss<=1.9"',
        "model.causal=false",
    ]
    assert api.overrides(["model.n_layer=2"]) == ["model.n_layer=2"]
    with pytest.raises(UserError, match="not one string"):
        api.overrides("model.n_layer=2")


def test_train_returns_the_run_and_a_second_call_with_the_same_config_trains_nothing(text_file, tmp_path):
    run = api.train("gpt", set=tiny(text_file), out=tmp_path / "run", progress=False)
    assert run.state.step == 12 and run.model is not None and not run.model.training
    assert "gpt, step 12/12 (finished), best val loss" in api.summary(run)
    stamp = (tmp_path / "run" / runfolder.WEIGHTS).stat().st_mtime_ns
    again = api.train("gpt", set=tiny(text_file), out=tmp_path / "run", progress=False)
    assert again.state.step == 12 and (tmp_path / "run" / runfolder.WEIGHTS).stat().st_mtime_ns == stamp
    with pytest.raises(UserError, match="holds a run of another config"):
        api.train("gpt", set=tiny(text_file, **{"model.n_layer": 2}), out=tmp_path / "run", progress=False)


def test_train_continues_an_interrupted_run_of_the_same_config(text_file, tmp_path, monkeypatch):
    fit = Trainer.fit
    monkeypatch.setattr(Trainer, "fit", lambda self, until=None: fit(self, until=6))  # stopped after step 6
    first = api.train("gpt", set=tiny(text_file), out=tmp_path / "run", progress=False)
    assert first.state.step == 6 and "step 6/12 (unfinished" in api.summary(first)
    monkeypatch.undo()
    run = api.train("gpt", set=tiny(text_file), out=tmp_path / "run", progress=False)
    assert run.state.step == 12
    val_steps = [r["step"] for r in api.metrics(run) if r["split"] == "val"]
    assert val_steps == [0, 4, 8, 12]  # steps 1-6 were not trained again


def test_the_cli_prints_what_the_api_returns(text_file, tmp_path):
    run = api.train("gpt", set=tiny(text_file), out=tmp_path / "run", progress=False)
    text = api.sample(run, prompt="ROMEO:", tokens=40, temperature=0.8, top_k=5, seed=3)
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 40
    flags = ["--prompt", "ROMEO:", "--tokens", "40", "--temperature", "0.8", "--top-k", "5", "--seed", "3"]
    r = cli("sample", str(tmp_path / "run"), *flags, "--device", "cpu")
    assert r.returncode == 0 and r.stdout == text + "\n"
    r = cli("eval", str(tmp_path / "run"), "--device", "cpu")
    assert r.returncode == 0 and r.stdout == api.evaluate(run) + "\n"


def test_figures_and_reports_show_what_was_written(text_file, tmp_path):
    run = api.train("gpt", set=tiny(text_file), out=tmp_path / "run", progress=False)
    curve = api.loss_curve(run)
    assert curve.png == tmp_path / "run" / "loss.png" and curve._repr_png_().startswith(b"\x89PNG")
    (maps,) = api.attention(run, "ROMEO: hi")
    assert maps.kind == "causal" and len(maps.query_tokens[0]) == len("ROMEO: hi") and maps.query_tokens[0][0] == "R"
    heads = api.draw(maps, "heads", layer=0, out=tmp_path / "figures")
    assert [p.name for p in heads.paths] == ["run-L0-heads.png", "run-L0-heads.svg"]
    with pytest.raises(UserError, match="layer"):
        api.draw(maps, "head", layer=3, out=tmp_path / "figures")
    with pytest.raises(UserError, match="view='nope'"):
        api.draw(maps, "nope")
    report_md = tmp_path / "study" / "report.md"
    report_md.parent.mkdir()
    report_md.write_text("# A\n\n![x](a.png)\n\n| cell | loss |\n|---|---|\n| base | 1.5 |\n", encoding="utf-8")
    report = Report(report_md)
    assert report["base / loss"] == "1.5" and "![x]" not in report._repr_markdown_()
    with pytest.raises(UserError, match="its rows: base"):
        report["other / loss"]
    with pytest.raises(UserError, match="no figure 'a.png'"):
        report.figure("a.png")


def test_cross_attention_of_an_encoder_decoder_and_not_of_a_gpt(reversal_run, text_file, tmp_path):
    x = api.cross_attention(reversal_run, "7 3 0", out=tmp_path)
    assert x.weights.shape == (len(x.rows), len(x.cols)) and x.cols[-1] == "EOS"
    assert abs(x.weights.sum(-1) - 1).max() < 1e-5  # each row a distribution over the source
    assert x.figure.png.is_file() and x.every_head.png.is_file() and 0 <= x.score <= 1
    gpt = api.train("gpt", set=tiny(text_file), out=tmp_path / "gpt", progress=False)
    with pytest.raises(UserError, match="no cross-attention"):
        api.cross_attention(gpt, "hi", out=tmp_path)


def test_bad_names_and_options_are_one_line():
    with pytest.raises(UserError, match="experiment 'nope' is not one of ablation"):
        api.experiment("nope")
    with pytest.raises(UserError, match="--mlm applies to the tagging and qa"):
        api.experiment("ablation", mlm="runs/x")
    with pytest.raises(UserError, match="benchmark 'nope'"):
        api.bench("nope")
    with pytest.raises(UserError, match="--lengths is read by bench attention"):
        api.bench("train", lengths=(64,))
    with pytest.raises(UserError, match="takes no option 'nope'"):
        api.bench("attention", nope=1)


def test_our_plots_leave_a_notebooks_inline_backend_alone():
    """A figure of ours in a kernel must not switch matplotlib away from Jupyter's inline backend, which
    would hide every plot the learner draws after it."""
    pytest.importorskip("matplotlib_inline")
    code = "import matplotlib; from tinyformer.plots import pyplot; pyplot(); print(matplotlib.get_backend())"
    env = {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    out = subprocess.run([sys.executable, "-c", code], env=env | _base_env(), capture_output=True, text=True)
    assert "inline" in out.stdout, out.stderr
    out = subprocess.run([sys.executable, "-c", code], env=_base_env(), capture_output=True, text=True)
    assert out.stdout.strip().lower() == "agg", out.stderr


def _base_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}


def test_the_package_names_its_python_api():
    import tinyformer

    assert tinyformer.api is api and "api" in tinyformer.__all__
    assert json.dumps(sorted(n for n in dir(api) if not n.startswith("_")))  # importable without side effects
