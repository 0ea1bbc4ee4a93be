"""Bad inputs and faults, by class: every case ends in exit status 2 (or 130) with at most a few lines on
stderr and no traceback, and a run folder a command started from is byte-identical afterwards unless
changing it was the command's purpose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tinyformer.cli import main

MODEL = ["--set", "model.n_layer=1", "--set", "model.n_embd=16", "--set", "model.n_head=2"]


def run(capsys, *args: str) -> tuple[int, str]:
    """The CLI in-process -> (exit status, stderr); an exception escaping main fails the test (a traceback)."""
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    return code, capsys.readouterr().err


def refused(capsys, *args: str, code: int = 2) -> str:
    status, err = run(capsys, *args)
    assert status == code, err
    assert "Traceback" not in err and 1 <= err.count("\n") <= 3, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def gpt_run(trained, tmp_path) -> Path:
    """A private copy of the session's trained MiniGPT run."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


# ---- data lost or silently wrong ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change", ["model.n_layer=2", "model.n_embd=32", "model.block_size=16", "data.val_fraction=0.2"]
)
def test_a_refused_resume_leaves_the_run_folder_untouched(gpt_run, capsys, change):
    before = snapshot(gpt_run)
    err = refused(capsys, "train", "gpt", "--resume", gpt_run, "--set", change)
    assert f"cannot change on resume: {change.split('=')[0]}" in err and "train.*" in err
    assert snapshot(gpt_run) == before
    assert run(capsys, "info", gpt_run)[0] == 0


def test_export_never_overwrites_a_run_folder_or_files_without_force(gpt_run, reversal_run, tmp_path, capsys):
    other = Path(shutil.copytree(reversal_run, tmp_path / "other"))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    before = {p: snapshot(p) for p in (gpt_run, other, busy)}
    assert "is a tinyformer run folder" in refused(capsys, "export", "hf", gpt_run, gpt_run)
    assert "is a tinyformer run folder" in refused(capsys, "export", "hf", gpt_run, other, "--force")
    assert "is not empty" in refused(capsys, "export", "hf", gpt_run, busy)
    assert "is a file" in refused(capsys, "export", "hf", gpt_run, busy / "notes.txt")
    assert {p: snapshot(p) for p in before} == before
    assert run(capsys, "export", "hf", gpt_run, busy, "--force")[0] == 0
    assert (busy / "notes.txt").read_text() == "mine" and (busy / "model.safetensors").is_file()


# ---- divergence -----------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_diverging_run_stops_with_a_diagnosis_and_its_checkpoints_still_sample(text_file, tmp_path, capsys):
    out = tmp_path / "nan"
    args = ["--set", "train.lr=1000", "--set", "train.max_iters=200", "--set", "train.eval_interval=5"]
    args += ["--set", "train.eval_iters=2", "--set", "train.log_interval=1", "--set", "model.block_size=32"]
    err = refused(capsys, "train", "gpt", "--data", text_file, *MODEL, *args, "--device", "cpu", "--out", out)
    assert "training diverged at step" in err and "Lower train.lr (set to 1000; " in err
    step = int(err.split("diverged at step ")[1].split(":")[0])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["step"] < step for r in rows) and step < 50  # stopped at once, nothing logged past it
    assert all(isinstance(r.get("grad_norm"), float) for r in rows if r["split"] == "train")
    for checkpoint in ("best", "latest"):
        status, _ = run(capsys, "sample", out, "--tokens", "20", "--checkpoint", checkpoint)
        assert status == 0


@pytest.mark.slow
def test_an_encoder_decoder_with_a_huge_lr_stops_instead_of_reporting_inf(tmp_path, capsys):
    sets = ["model.n_embd=32", "model.d_ff=64", "data.n_train=200", "data.n_val=20", "train.lr=1e20"]
    sets += ["train.max_iters=100", "train.eval_interval=50", "train.warmup_iters=1", "train.schedule=constant"]
    args = [x for s in sets for x in ("--set", s)]
    err = refused(capsys, "train", "reverse", *args, "--device", "cpu", "--out", tmp_path / "rev")
    assert "training diverged at step" in err


@pytest.mark.parametrize(
    "setting, words",
    [
        ("train.lr=nan", "not a finite number"),
        ("train.lr=-1", "train.lr=-1.0 must be > 0"),
        ("train.lr=inf", "not a finite number"),
        ("train.beta2=1.0", "train.beta2=1.0 must be in [0, 1)"),
        ("train.beta1=-0.1", "must be in [0, 1)"),
        ("train.eps=0", "train.eps=0.0 must be > 0"),
        ("model.rope_base=-10000", "model.rope_base=-10000.0 must be > 0"),
        ("train.seed=1180591620717411303424", "outside the range"),
        ("sample.temperature=nan", "not a finite number"),
        ("sample.tokens=-5", "tokens=-5 must be in [0, 1,000,000]"),
    ],
)
def test_values_that_cannot_work_are_refused_before_anything_runs(text_file, tmp_path, capsys, setting, words):
    assert words in refused(capsys, "train", "gpt", "--data", text_file, "--set", setting, "--out", tmp_path / "r")
    assert not (tmp_path / "r").exists()


# ---- checked before the work, not after ------------------------------------------------------------------------------
def test_sampling_settings_of_a_training_run_are_checked_before_training(text_file, tmp_path, capsys):
    err = refused(capsys, "train", "gpt", "--data", text_file, "--set", "sample.prompt='§'", "--out", tmp_path / "r")
    assert "sample.prompt='§'" in err and "outside the vocabulary" in err
    assert not (tmp_path / "r").exists()


def test_bench_json_path_is_checked_before_measuring(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert "is a folder" in refused(capsys, "bench", "train", "--json", tmp_path)
    assert "is a file, not a folder" in refused(capsys, "bench", "train", "--json", tmp_path / "file" / "f.json")
    assert "--json is written by bench train" in refused(capsys, "bench", "viz", "--json", tmp_path / "f.json")
    assert "'/proc' takes no new file" in refused(capsys, "bench", "attention", "--json", "/proc/x.json")


# ---- run-folder files that parse but hold the wrong content ------------------------------------------------------
def rewrite(folder: Path, name: str, content: bytes | str) -> None:
    (folder / name).write_bytes(content.encode() if isinstance(content, str) else content)


@pytest.mark.parametrize(
    "name, content, words",
    [
        ("tokenizer.json", "[1, 2, 3]", "is not a char tokenizer"),
        ("tokenizer.json", '{"type": "char", "chars": ["a", "a", "b"]}', "chars must be distinct"),
        ("tokenizer.json", '{"type": "char", "chars": ["a", "b"]}', "has 2 tokens but the model in config.json"),
        ("tokenizer.json", '{"type": "char"}', "'chars' is not a non-empty list"),
        ("config.json", '{"task": "gpt", "model": {"n_layr": 3}}', "unknown config key 'model.n_layr'"),
        ("config.json", "[]", "config.json does not hold a run config"),
        ("config.json", '{"model": {}}', "config.json does not hold a run config"),
        ("model.safetensors", b"\x00" * 64, "not a readable safetensors file"),
    ],
)
def test_run_files_with_the_wrong_content_are_one_line_errors(gpt_run, capsys, name, content, words):
    rewrite(gpt_run, name, content)
    before = snapshot(gpt_run)
    command = ["sample", gpt_run, "--checkpoint", "latest"] if name == "model.safetensors" else ["info", gpt_run]
    assert words in refused(capsys, *command)
    assert snapshot(gpt_run) == before


def test_a_trainer_state_of_another_shape_is_refused_on_resume(gpt_run, capsys):
    import torch

    torch.save({"step": "three", "optimizer": []}, gpt_run / "trainer_state.pt")
    before = snapshot(gpt_run)
    assert "'step' is missing or not a int" in refused(capsys, "train", "gpt", "--resume", gpt_run)
    assert snapshot(gpt_run) == before
    torch.save([1, 2], gpt_run / "trainer_state.pt")
    assert "not a dict" in refused(capsys, "info", gpt_run)


def test_a_pickled_payload_is_refused_and_never_runs(gpt_run, tmp_path, capsys):
    import torch

    flag = tmp_path / "ran"
    torch.save({"x": Payload(str(flag))}, gpt_run / "trainer_state.pt")
    assert "holds Python objects a trainer state never has; refused (no code ran)" in refused(capsys, "info", gpt_run)
    assert not flag.exists()


class Payload:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path(self.path).write_text, ("pickle code ran",))


def test_a_corrupt_metrics_line_is_skipped_on_resume(gpt_run, capsys):
    with open(gpt_run / "metrics.jsonl", "a") as f:
        f.write('{"step": 31, "split": "tr')  # a kill in the middle of an append
    status, err = run(capsys, "train", "gpt", "--resume", gpt_run, "--set", "train.max_iters=32")
    assert status == 0 and "skipped 1 unreadable line" in err and "Traceback" not in err


def test_viz_bert_on_a_folder_that_is_not_a_model(gpt_run, tmp_path, capsys):
    pytest.importorskip("transformers")
    err = refused(capsys, "viz", "bert", "--sentence", "a bird", "--model", gpt_run, "--out", tmp_path)
    assert "is a tinyformer run; draw its attention with `tinyformer viz attention RUN`" in err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text("{}")
    err = refused(capsys, "viz", "bert", "--sentence", "a bird", "--model", tmp_path / "other", "--out", tmp_path)
    assert "is not a model folder transformers can load" in err


# ---- output paths ----------------------------------------------------------------------------------------------------
def test_output_paths_that_cannot_be_written(gpt_run, text_file, tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("x")
    text = ["--text", "ROMEO"]
    assert "is a file" in refused(capsys, "train", "gpt", "--data", text_file, "--out", tmp_path / "file")
    assert "is a file, not a folder" in refused(capsys, "train", "gpt", "--out", tmp_path / "file" / "run")
    assert "is a folder" in refused(capsys, "viz", "attention", gpt_run, *text, "--html", tmp_path)
    assert "is a file" in refused(capsys, "viz", "attention", gpt_run, *text, "--report", tmp_path / "file")
    assert "is a file" in refused(capsys, "viz", "attention", gpt_run, *text, "--out", tmp_path / "file")
    import tinyformer.files

    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tinyformer.files.os, "replace", full)
    err = refused(capsys, "viz", "attention", gpt_run, *text, "--out", tmp_path / "figs")
    assert "the disk is full" in err and not list((tmp_path / "figs").glob("*"))


# ---- numbers ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, words",
    [
        (["--temperature", "nan"], "temperature=nan"),
        (["--temperature", "1e-310"], "must be 0 (greedy) or in"),
        (["--seed", str(2**70)], "outside the range"),
        (["--tokens", "-5"], "tokens=-5 must be in [0, 1,000,000]"),
        (["--tokens", str(10**11)], "tokens=100000000000 must be in [0, 1,000,000]"),  # ran for days, silent
        (["--top-p", "0"], "top_p=0.0"),
        (["--context", "1000000000"], "learned positions stop at block_size=32"),
    ],
)
def test_bad_numbers_for_sample(gpt_run, capsys, args, words):
    before = snapshot(gpt_run)
    assert words in refused(capsys, "sample", gpt_run, *args)
    assert snapshot(gpt_run) == before


@pytest.mark.parametrize("args", [["--repeats", "0"], ["--iters", "0"], ["--iters", "-3"]])
def test_bad_numbers_for_bench(capsys, args):
    assert "must be a whole number >= 1" in refused(capsys, "bench", "train", *args)


def test_bad_numbers_for_eval_translate_fill(reversal_run, capsys):
    assert "--n 0 and --beam 1 must be > 0" in refused(capsys, "eval", reversal_run, "--n", "0")
    assert "--beam 0 must be > 0" in refused(capsys, "translate", reversal_run, "1 2", "--beam", "0")


# ---- requests that would exhaust memory ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sets",
    [["model.n_embd=65536", "model.n_layer=48", "model.n_head=64"], ["train.batch_size=10000000"]],
)
def test_training_that_cannot_fit_in_memory_is_refused_with_the_estimate(text_file, tmp_path, capsys, sets):
    args = [x for s in sets for x in ("--set", s)]
    err = refused(capsys, "train", "gpt", "--data", text_file, *args, "--device", "cpu", "--out", tmp_path / "r")
    assert "needs at least" in err and "GiB of memory, more than the" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_kv_cache_that_cannot_fit_is_refused(text_file, tmp_path, capsys):
    out = tmp_path / "rope"
    sets = ["model.positions=rope", "model.block_size=16", "train.max_iters=2", "train.eval_interval=2"]
    sets += ["train.eval_iters=1", "sample.tokens=5"]
    assert run(capsys, "train", "gpt", "--data", text_file, *MODEL, *(x for s in sets for x in ("--set", s)),
               "--device", "cpu", "--out", out)[0] == 0  # fmt: skip
    err = refused(capsys, "sample", out, "--context", str(10**9), "--tokens", "1")
    assert "--context 1,000,000,000 needs at least" in err


# ---- pipes and data paths --------------------------------------------------------------------------------------------
def test_info_into_a_closed_pipe_ends_quietly(trained):
    cmd = f"{sys.executable} -m tinyformer info {trained} | head -1"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("run ") and r.stdout.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_data_paths_are_reported_as_what_they_are(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cases = {tmp_path: "is a folder", tmp_path / "pipe": "is a named pipe", tmp_path / "loop": "is a symlink loop"}
    for path, words in cases.items():
        assert words in refused(capsys, "train", "gpt", "--data", path, "--out", tmp_path / "r")
        assert words in refused(capsys, "train", "classify", "--data", path, "--out", tmp_path / "r")
    assert "is a named pipe" in refused(capsys, "train", "gpt", "--config", tmp_path / "pipe")


def test_an_existing_file_may_be_written_again(tmp_path):
    from tinyformer.errors import UserError
    from tinyformer.files import output_path

    (tmp_path / "figures.json").write_text("{}")
    assert output_path(tmp_path / "figures.json") == tmp_path / "figures.json"  # e.g. bench --json run twice
    with pytest.raises(UserError, match="is a file; give a folder"):
        output_path(tmp_path / "figures.json", folder=True)


# ---- files planted or crafted in a run folder ------------------------------------------------------------------
DEEP = "[" * 100_000 + "]" * 100_000  # JSON that Python's decoder cannot parse without a RecursionError


@pytest.mark.parametrize("plant", ["symlink", "fifo", "folder"])
def test_a_lock_that_is_not_a_regular_file_is_refused_and_nothing_outside_is_written(gpt_run, tmp_path, capsys, plant):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock = gpt_run / ".lock"
    if plant == "symlink":
        lock.symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    before = snapshot(gpt_run)
    err = refused(capsys, "train", "gpt", "--resume", gpt_run, "--set", "train.max_iters=32")
    assert f"{lock} is not a regular file" in err and f"rm {lock}" in err
    assert victim.read_text() == "precious\n" and snapshot(gpt_run) == before
    assert lock.is_symlink() or lock.exists()  # left for the user to look at


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
@pytest.mark.parametrize("command", ["info", "sample", "resume"])
def test_a_deeply_nested_json_file_is_one_line_naming_it(gpt_run, capsys, name, command):
    (gpt_run / name).write_text(DEEP)
    args = {
        "info": ["info", gpt_run],
        "sample": ["sample", gpt_run, "--tokens", "3"],
        "resume": ["train", "gpt", "--resume", gpt_run, "--set", "train.max_iters=32"],
    }[command]
    err = refused(capsys, *args)
    assert f"{gpt_run / name} is nested deeper than 64 levels" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["info", "resume"])
def test_a_deeply_nested_metrics_line_is_skipped(gpt_run, capsys, command):
    with open(gpt_run / "metrics.jsonl", "a") as f:
        f.write(DEEP + "\n")
    args = (
        ["info", gpt_run] if command == "info" else ["train", "gpt", "--resume", gpt_run, "--set", "train.max_iters=32"]
    )
    status, err = run(capsys, *args)
    assert status == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("record", ['{"step": 30, "files": 5}', "null", '{"files": null}', "[1]", "{", DEEP])
def test_a_commit_record_of_another_shape_is_a_torn_save_and_the_run_resumes(gpt_run, capsys, record):
    """Never written by a save (it is written whole, then renamed): the previous checkpoint stands."""
    from tinyformer import runfolder

    (gpt_run / runfolder.COMMIT).write_text(record)
    (gpt_run / ".model.safetensors.tmp").write_bytes(b"half a file")
    step = runfolder.read_state(gpt_run / runfolder.STATE).step
    status, err = run(capsys, "train", "gpt", "--resume", gpt_run, "--set", f"train.max_iters={step + 2}")
    assert status == 0 and "Traceback" not in err, err
    assert not (gpt_run / runfolder.COMMIT).exists() and not (gpt_run / ".model.safetensors.tmp").exists()
    assert runfolder.read_state(gpt_run / runfolder.STATE).step == step + 2


TRIP = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # started normally (the suite may run with it ignored)
class Trip:  # Ctrl-C as the import of sys.argv[1] begins; a KeyboardInterrupt raised inside an import says so
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            sys.meta_path.remove(self)
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10_000):  # the handler runs between these bytecodes
                    pass
            except KeyboardInterrupt:
                print("KeyboardInterrupt raised inside an import", file=sys.stderr)
                raise
MODULE = sys.argv.pop(1)
sys.meta_path.insert(0, Trip())
from tinyformer.__main__ import start
sys.exit(start())
"""


@pytest.mark.parametrize("module", ["torch", "torch._dynamo"])
def test_ctrl_c_during_torchs_import_never_raises_inside_it(module, text_file, tmp_path):
    """Raised inside torch's import, a KeyboardInterrupt can reach its C++ start-up (which aborts) or be swallowed
    there with numpy half imported (a RecursionError later): seen at random moments of the first second. The
    optimizer imports torch._dynamo (2 s) after start-up, as the run begins: raised there, the process printed
    its line and then ended by the signal itself (exit -2), 2 runs in 40."""
    args = ["train", "gpt", "--data", str(text_file), *MODEL, "--out", str(tmp_path / "r"), "--device", "cpu"]
    p = subprocess.run([sys.executable, "-c", TRIP, module, *args], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (130, "tinyformer: interrupted\n")
    if module == "torch":
        assert not (tmp_path / "r").exists()
