"""Shared fixtures: tiny configs and local text only (no network)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tinyformer.config import RunConfig, TrainConfig
from tinyformer.models.gpt import GPTConfig, MiniGPT

SYNTHETIC = (
    "FIRST CITIZEN:\nWe are accounted poor citizens, the patricians good.\n\n"
    "MENENIUS:\nWhat work's, my countrymen, in hand? where go you?\n\n"
    "ROMEO:\nBut, soft! what light through yonder window breaks?\n\n"
) * 40


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    """About 20k characters: a slice of Tiny Shakespeare when TINYFORMER_DATA is set, else synthetic."""
    src = os.environ.get("TINYFORMER_DATA")
    text = Path(src).read_text(encoding="utf-8")[:20_000] if src and Path(src).is_file() else SYNTHETIC
    p = tmp_path / "slice.txt"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.fixture
def tiny_gpt_config() -> GPTConfig:
    return GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)


@pytest.fixture
def tiny_gpt(tiny_gpt_config: GPTConfig) -> MiniGPT:
    torch.manual_seed(0)
    return MiniGPT(tiny_gpt_config).eval()


def tiny_run_config(text_file: Path, dropout: float = 0.1, **train) -> RunConfig:
    """A whole gpt run config small enough to train in a second or two."""
    model = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=dropout)
    t = dict(max_iters=12, batch_size=4, eval_interval=4, eval_iters=2, log_interval=2, device="cpu")
    cfg = RunConfig(task="gpt", model=model, train=TrainConfig(**(t | train)))
    cfg.data.path = str(text_file)
    return cfg
