"""bench reverse: both sides train and are scored on the same pairs, and each worker reports its epochs."""

import json
import subprocess
import sys

import pytest

from tests.test_faults import refused
from tinyformer.bench import reverse, reverse_sides
from tinyformer.errors import UserError

TINY = dict(n_train=256, n_val=20)  # 4 steps an epoch


def test_both_sides_see_the_same_pairs():
    ours, ref = reverse.configs(**TINY)
    assert ours.data == ref.data and ours.model == ref.model
    assert ours.train.eval_interval == 256 // 64  # with fewer pairs, ours still evaluates once an epoch


def test_a_preset_that_changes_the_held_out_pairs_is_refused(tmp_path):
    preset = tmp_path / "other.toml"
    preset.write_text('task = "reverse"\n[data]\nn_val = 700\nn_train = 40000\n')
    with pytest.raises(UserError, match="changes data.n_val"):
        reverse.configs(str(preset))


@pytest.mark.parametrize("impl", reverse.IMPLS)
def test_worker_trains_an_epoch_and_scores_it(impl):
    r = reverse.worker(impl, 1, precision="fp32", **TINY)  # pinned: "auto" is bf16 on a CPU with native bf16
    assert r["impl"] == impl and r["precision"] == ("bf16" if impl.endswith("+bf16") else "fp32")
    assert not r["reached"]
    assert len(r["epoch_train_s"]) == 1 and r["epoch_s"] > 0
    [e] = r["evals"]
    assert e["step"] == 4 and e["train_s"] > 0 and e["eval_s"] > 0 and 0 <= e["exact_match"] < reverse.TARGET
    assert r["to_target_s"] is None and r["epochs"] is None


def test_both_sides_run_with_the_allocator_setting_of_the_trainer():
    cmd = [sys.executable, "-m", "tinyformer.bench.reverse", "--max-epochs", "1", "--n-train", "128", "--n-val", "10"]
    for impl in ("reference", "tinyformer"):  # each in a fresh process, as the benchmark runs them
        out = subprocess.run([*cmd, "--impl", impl], capture_output=True, text=True, timeout=300, check=True)
        assert json.loads(out.stdout.strip().splitlines()[-1])["freed_memory_kept"] is True, impl


def test_worker_prints_one_json_line():
    cmd = [sys.executable, "-m", "tinyformer.bench.reverse", "--impl", "reference", "--max-epochs", "1"]
    cmd += ["--n-train", "128", "--n-val", "10"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["epoch_s"] > 0
    assert "reference: epoch 1 (step 2)" in out.stderr  # the progress line the parent passes on


def test_record_stops_at_the_first_evaluation_that_reaches_the_target():
    record = reverse_sides.Record("x", steps_per_epoch=10)
    assert not record.add(10, 5.0, 1.0, 0.5)
    assert record.add(20, 10.0, 1.0, 0.995)
    r = record.result([5.0, 5.0], "fp32")
    assert r["reached"] and r["epochs"] == 2 and r["to_target_s"] == 12.0 and r["eval_s"] == 2.0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--repeats", "0"], "must be a whole number >= 1"),
        (["--max-epochs", "0"], "must be a whole number >= 1"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--config", "missing.toml"], "missing.toml"),
    ],
)
def test_bad_options_are_one_line(capsys, args, words):
    assert words in refused(capsys, "bench", "reverse", *args)


def test_config_is_for_bench_train_and_reverse_only(capsys):
    words = "--config is read by bench train, reverse, all, not by bench attention"
    assert words in refused(capsys, "bench", "attention", "--config", "x.toml")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["viz", "--iters", "2"], "--iters is read by bench train, gpt2, rnn, all, not by bench viz"),
        (["train", "--max-epochs", "2"], "--max-epochs is read by bench reverse, not by bench train"),
        (["rnn", "--lengths", "64"], "--lengths is read by bench attention, all, not by bench rnn"),
        (["attention", "--data", "x.txt"], "--data is read by bench train, save, all, not by bench attention"),
    ],
)
def test_an_option_a_benchmark_does_not_read_is_refused_before_it_measures(capsys, args, words):
    """The registry says which options each benchmark reads; any other one is a mistake, not silently dropped."""
    assert words in refused(capsys, "bench", *args)
