"""Tiny Shakespeare (Karpathy, char-rnn, 2015): find it, read it, cut it into batches.

Where the text comes from, first match wins: an explicit path (`--data`), the
environment variable TINYFORMER_DATA, the cache folder, then a download from the
canonical public URL checked against its sha256. Any UTF-8 text file works as
an explicit path; only the downloaded copy is checked.

Batches are random windows of block_size + 1 tokens, gathered in one indexing
operation (no Python loop over the batch); targets are inputs shifted by one.
"""

from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import input_file

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
ENV = "TINYFORMER_DATA"


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "tinyformer"


def resolve_path(explicit: str | None = None, download=None) -> Path:
    """The local Tiny Shakespeare file: explicit > $TINYFORMER_DATA > cache > download."""
    for source, value in (("--data", explicit), (ENV, os.environ.get(ENV))):
        if value:
            return input_file(value, f"data file (from {source})")
    cached = cache_dir() / "tinyshakespeare.txt"
    if cached.is_file():
        return cached
    (download or _download)(cached)
    return cached


def _download(dest: Path) -> None:
    try:
        with urllib.request.urlopen(URL, timeout=30) as r:
            payload = r.read()
    except OSError as e:
        raise UserError(f"could not download Tiny Shakespeare ({e}); pass --data PATH or set {ENV}=PATH") from None
    verify_and_store(payload, dest)


def verify_and_store(payload: bytes, dest: Path) -> None:
    """Write `payload` to `dest` atomically if its sha256 is Tiny Shakespeare's."""
    digest = hashlib.sha256(payload).hexdigest()
    if digest != SHA256:
        raise UserError(f"downloaded file has sha256 {digest}, expected {SHA256}; not saved")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    tmp.write_bytes(payload)
    os.replace(tmp, dest)


def read_text(path: Path) -> str:
    path = input_file(path, "data file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"data file {str(path)!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not text:
        raise UserError(f"data file {str(path)!r} is empty")
    return text


class TokenSplits:
    """A token stream cut into train (first 1 - val_fraction) and val (the rest)."""

    def __init__(self, ids: torch.Tensor, val_fraction: float, block_size: int, n_train: int | None = None) -> None:
        """`n_train` (the train tokens, first) overrides `val_fraction` when the text was split before encoding."""
        n_train = int(len(ids) * (1 - val_fraction)) if n_train is None else n_train
        self.splits = {"train": ids[:n_train], "val": ids[n_train:]}
        self.block_size = block_size
        for name, part in self.splits.items():
            if len(part) < block_size + 1:
                raise UserError(
                    f"the {name} split has {len(part)} tokens, fewer than model.block_size + 1 = "
                    f"{block_size + 1}; use a longer text or a smaller model.block_size"
                )
        self.offsets = torch.arange(block_size + 1)  # (T + 1,)

    def batch(
        self, split: str, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows -> inputs x and targets y, both (B, T); y is x shifted left by one."""
        data = self.splits[split]
        starts = torch.randint(len(data) - self.block_size, (batch_size,), generator=generator)  # (B,)
        windows = data[starts[:, None] + self.offsets]  # (B, T + 1)
        return windows[:, :-1], windows[:, 1:]
