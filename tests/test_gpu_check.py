"""scripts/gpu_check.py: its dry mode runs every command it would run on a GPU, tiny, on the CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_on_a_gpu_every_command_targets_cuda_at_full_size(tmp_path):
    for name, args in gpu_check().commands(tmp_path, dry=False).items():
        assert args[args.index("--device") + 1] == "cuda", name
        assert "--set" not in args and "--lengths" not in args, name  # the real sizes


@pytest.mark.slow
def test_dry_run_starts_every_command_and_writes_every_figure(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the preset is named relative to the repository, as `make gpu-check` runs it
    assert gpu_check().main(["--dry", "--out", str(tmp_path / "check")]) == 0
    figures = json.loads((tmp_path / "check" / "gpu_check.json").read_text())
    assert figures["bench"]["train"]["tokens_per_s"]["tinyformer"] > 0
    assert {row["L"] for row in figures["bench"]["attention"]} == {64}
    for name in ("train", "train_compile"):
        assert figures[name]["step"] == 2 and figures[name]["train_seconds"] > 0, name
    gen = figures["generation"]
    assert gen["cached_ms"] > 0 and gen["uncached_ms"] > 0 and gen["tokens"] == 31  # block 32 - 1


def test_a_used_output_folder_is_refused(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(SystemExit, match="is not empty"):
        gpu_check().main(["--dry", "--out", str(tmp_path)])


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit, match="cannot make"):
        gpu_check().main(["--dry", "--out", str(tmp_path / "file" / "sub")])
