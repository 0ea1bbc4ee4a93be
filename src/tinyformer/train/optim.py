"""The optimizer every run uses, and moving a batch to the device.

AdamW with weight decay on matrices only (Loshchilov & Hutter, 2019; biases, norms and other vectors are not
decayed), or on every parameter (`train.decay_all`, AdamW's own default, as the lab uses it), fused where the
build has the kernel.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinyformer.config import TrainConfig


def make_optimizer(model: nn.Module, c: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices (dim >= 2) only, or on all (`decay_all`); fused kernel where available."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": c.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": c.weight_decay if c.decay_all else 0.0},
    ]
    try:
        return torch.optim.AdamW(groups, lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps, fused=True)
    except (RuntimeError, TypeError):  # no fused kernel for this device/build
        return torch.optim.AdamW(groups, lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps)


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        if device.type == "cuda":  # page-locked host memory lets the copy overlap with GPU work
            batch = batch.pin_memory()
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch
