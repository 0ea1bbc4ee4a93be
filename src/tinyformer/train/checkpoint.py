"""Checkpoint files of a run folder, written atomically (temp file + rename).

Weights go to safetensors; optimizer, RNG and step state go through
`torch.save` and come back with `weights_only=True` (no pickle code runs).
A missing or corrupt file is a `UserError` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from tinyformer.device import model_device
from tinyformer.errors import UserError
from tinyformer.files import atomic_write

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
WEIGHTS = "model.safetensors"  # latest weights
BEST = "best.safetensors"  # weights at the best validation loss
STATE = "trainer_state.pt"  # optimizer, RNG states, step, best val loss
METRICS = "metrics.jsonl"
LOSS_PNG = "loss.png"
SAMPLE = "sample.txt"


def save_json(path: Path, data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    atomic_write(path, lambda t: t.write_text(text, encoding="utf-8"))


def read_metrics(path: Path) -> list[dict]:
    """The rows of metrics.jsonl (none if the file does not exist yet)."""
    if not Path(path).is_file():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def load_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is corrupt: {e}") from None


def save_weights(model: nn.Module, path: Path) -> None:
    atomic_write(path, lambda t: save_model(model, str(t)))


def load_weights(model: nn.Module, path: Path) -> None:
    if not Path(path).is_file():
        raise UserError(f"{path} is missing")
    try:
        load_model(model, str(path), device=str(model_device(model)))
    except Exception as e:  # safetensors raises its own error type for corrupt files
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} is corrupt or does not fit the model in config.json: {first}") from None


def save_state(state: dict, path: Path) -> None:
    atomic_write(path, lambda t: torch.save(state, t))


def load_state(path: Path) -> dict:
    if not Path(path).is_file():
        raise UserError(f"{path} is missing")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, wrong format, disallowed global
        raise UserError(f"{path} is corrupt: {type(e).__name__}: {str(e).splitlines()[0]}") from None
