import hashlib

import pytest
import torch

from tinyformer.data import tinyshakespeare as ts
from tinyformer.errors import UserError


def test_explicit_path_beats_environment_beats_cache(tmp_path, monkeypatch):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("a"), b.write_text("b")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(ts.ENV, str(b))
    assert ts.resolve_path(str(a)) == a
    assert ts.resolve_path(None) == b
    monkeypatch.delenv(ts.ENV)
    cached = tmp_path / "cache" / "tinyformer" / "tinyshakespeare.txt"
    cached.parent.mkdir(parents=True)
    cached.write_text("c")
    assert ts.resolve_path(None, download=pytest.fail) == cached


def test_download_is_used_last_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(ts.ENV, raising=False)
    payload = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"
    with pytest.raises(UserError, match="expected 86c4e6aa"):
        ts.resolve_path(None, download=lambda dest: ts.verify_and_store(payload, dest))
    assert not (tmp_path / "tinyformer" / "tinyshakespeare.txt").exists()
    monkeypatch.setattr(ts, "SHA256", hashlib.sha256(payload).hexdigest())
    got = ts.resolve_path(None, download=lambda dest: ts.verify_and_store(payload, dest))
    assert got.read_bytes() == payload


def test_missing_and_non_utf8_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="nope.txt.*does not exist"):
        ts.resolve_path(str(tmp_path / "nope.txt"))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café".encode("latin-1"))
    with pytest.raises(UserError, match="is not UTF-8"):
        ts.read_text(bad)


def test_split_is_90_10_and_batches_are_shifted_windows():
    ids = torch.arange(1000)  # distinct ids: a window is contiguous iff it counts up by one
    s = ts.TokenSplits(ids, 0.1, block_size=8)
    assert len(s.splits["train"]) == 900 and len(s.splits["val"]) == 100
    x, y = s.batch("train", 64, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (64, 8)
    assert torch.equal(x - x[:, :1], torch.arange(8).expand(64, 8))
    assert torch.equal(y, x + 1)
    assert int(y.max()) < 900  # never reads past the train split
    assert len(set(x[:, 0].tolist())) > 32  # random starts, not one window repeated
    assert torch.equal(x, s.batch("train", 64, torch.Generator().manual_seed(0))[0])
    vx, _ = s.batch("val", 4)
    assert int(vx.min()) >= 900


def test_text_shorter_than_one_block_is_refused():
    with pytest.raises(UserError, match="val split has 5 tokens, fewer than model.block_size \\+ 1 = 9"):
        ts.TokenSplits(torch.arange(50), 0.1, block_size=8)
