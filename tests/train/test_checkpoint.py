import json
import pickle

import pytest
import torch

from tinyformer import runfolder
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.train import checkpoint as ckpt


def small():
    return MiniGPT(GPTConfig(vocab_size=9, block_size=8, n_layer=1, n_head=1, n_embd=8))


def test_weights_round_trip_and_leave_no_temp_file(tmp_path):
    torch.manual_seed(0)
    a, b = small(), small()
    ckpt.save_weights(a, tmp_path / "w.safetensors")
    ckpt.load_weights(b, tmp_path / "w.safetensors")
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "state.pt"
    ckpt.save_state(runfolder.TrainerState(1, 2.0, 0.5, 8, optimizer={}, rng={}), target)
    before = target.read_bytes()

    def broken(tmp):
        tmp.write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(UserError, match="cannot write .*state.pt': the disk is full"):
        ckpt.atomic_write(target, broken)
    assert target.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["state.pt"]  # no temp left


def test_corrupt_or_mismatched_checkpoints_are_user_errors(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(UserError, match="bad.safetensors is not a readable safetensors file"):
        ckpt.load_weights(small(), tmp_path / "bad.safetensors")
    other = MiniGPT(GPTConfig(vocab_size=9, block_size=8, n_layer=2, n_head=1, n_embd=8))
    ckpt.save_weights(other, tmp_path / "other.safetensors")
    with pytest.raises(UserError, match="does not fit the model"):
        ckpt.load_weights(small(), tmp_path / "other.safetensors")
    (tmp_path / "bad.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(UserError, match="bad.pt is corrupt"):
        runfolder.read_state(tmp_path / "bad.pt")
    with pytest.raises(UserError, match="missing"):
        runfolder.read_state(tmp_path / "absent.pt")


class Evil:
    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_trainer_state_is_loaded_without_running_pickled_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"x": Evil()}, path)
    with pytest.raises(UserError, match="holds Python objects a trainer state never has; refused") as e:
        runfolder.read_state(path)
    assert "\x1b" not in str(e.value) and str(e.value).count("\n") == 0
    assert pickle.loads(pickle.dumps(1)) == 1


def test_a_full_disk_reported_by_torch_is_named_and_leaves_no_temp_file(tmp_path, monkeypatch):
    """torch.save reports a failed write as a RuntimeError, not an OSError: the line still says the disk is full."""
    import shutil
    from collections import namedtuple

    def torch_write_fails(path):
        path.write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing file")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9, 0))
    (tmp_path / runfolder.STATE).write_bytes(b"the previous checkpoint")
    parts = {runfolder.WEIGHTS: lambda p: p.write_bytes(b"w"), runfolder.STATE: torch_write_fails}
    with pytest.raises(UserError, match=r"cannot save step 30 .* \(the disk is full\); .*resumable at step 20"):
        ckpt.save_checkpoint(tmp_path, parts, 30, last=20)
    assert sorted(p.name for p in tmp_path.iterdir()) == [runfolder.STATE]  # untouched, nothing left beside it
    assert (tmp_path / runfolder.STATE).read_bytes() == b"the previous checkpoint"


def test_a_crafted_commit_record_renames_nothing_outside_the_checkpoint(tmp_path):
    """recover() renames only the checkpoint's own files: a downloaded folder cannot overwrite ~/.bashrc."""
    run, victim = tmp_path / "run", tmp_path / "victim.txt"
    run.mkdir()
    victim.write_text("mine")
    names = [str(victim), "../victim.txt"]
    (run / runfolder.COMMIT).write_text(json.dumps({"step": 1, "files": names}))
    for name in names:  # the temp file each name would be renamed from, crafted too
        tmp = run / f".{name}.tmp"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text("evil")
    ckpt.recover(run)
    assert victim.read_text() == "mine" and not (run / runfolder.COMMIT).exists()


def test_only_a_tinyformer_run_that_never_saved_is_called_one(tmp_path):
    hf = tmp_path / "hf"  # a Hugging Face folder with sharded weights: config.json and tokenizer.json too
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "bert"}')
    (hf / "tokenizer.json").write_text("{}")
    (hf / "model-00001-of-00002.safetensors").write_bytes(b"x")
    assert not runfolder.never_saved(hf)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"task": "gpt", "train": {}}')
    (run / "tokenizer.json").write_text("{}")
    assert runfolder.never_saved(run)
    (run / runfolder.BEST).write_bytes(b"x")  # trimmed to its best weights: not a run that never saved
    assert not runfolder.never_saved(run)
