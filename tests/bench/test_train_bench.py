"""bench train: the worker measures both sides on the same batches, and the figures use the fitted model."""

import json
import subprocess
import sys

import pytest

from tinyformer.bench import mfu, train, workers


def test_flops_per_token_needs_the_fitted_vocabulary():
    with pytest.raises(ValueError, match="fitted"):
        mfu.flops_per_token(train._seed_recipe())  # vocab_size 0 before the tokenizer is fitted


KEYS = {"impl", "tokens_per_s", "loss", "precision", "peak_rss_mb", "attention", "freed_memory_kept"}


@pytest.mark.slow
def test_workers_measure_both_sides_in_fp32(text_file):
    """The reference through `python -m` (one JSON line), ours in-process; both a few steps from ln(vocab)."""
    cmd = [sys.executable, "-m", "tinyformer.bench.train", "--impl", "reference", "--iters", "2"]
    out = subprocess.run([*cmd, "--data", str(text_file)], capture_output=True, text=True, timeout=300, check=True)
    ref = json.loads(out.stdout.strip().splitlines()[-1])
    ours = train.worker("tinyformer", 2, str(text_file), "fp32")
    for r in (ref, ours):
        assert set(r) == KEYS and r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["precision"] == "fp32"
        assert 2.0 < r["loss"] < 4.5
    assert ref["attention"] is None and ours["attention"].startswith("attention: ")
    assert ref["freed_memory_kept"] and ours["freed_memory_kept"]  # the Trainer's allocator setting, both sides


@pytest.mark.parametrize(
    ("flags", "words"),
    [({"avx512f", "amx_bf16"}, "native bf16: yes (amx_bf16)"), ({"avx2"}, "native bf16: no (neither avx512_bf16")],
)
def test_machine_line_reads_native_bf16_from_the_flags(monkeypatch, flags, words):
    from tinyformer import device

    monkeypatch.setattr(device, "cpu_flags", lambda: flags)
    assert words in workers.machine_line()


def test_the_one_line_autocast_reference_runs_in_bf16_and_is_measured_only_where_bf16_is_native(text_file, monkeypatch):
    from tinyformer import device

    r = train.worker("reference+bf16", 2, str(text_file))
    fp32 = train.worker("reference", 2, str(text_file))
    assert set(r) == KEYS and r["precision"] == "bf16" and 2.0 < r["loss"] < 4.5
    assert r["loss"] != fp32["loss"]  # the same seed and batches: only the autocast line differs
    monkeypatch.delenv(device.CPU_BF16_ENV, raising=False)
    monkeypatch.setattr(device, "cpu_flags", lambda: {"avx2"})
    assert train.impls_here() == ("reference", "tinyformer", "tinyformer+ckpt")
    monkeypatch.setattr(device, "cpu_flags", lambda: {"avx2", "avx512_bf16"})
    assert train.impls_here() == train.IMPLS
