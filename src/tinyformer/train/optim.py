"""The optimizer every run uses, and moving a batch to the device.

AdamW with weight decay on matrices only (Loshchilov & Hutter, 2019; biases, norms and other vectors are not
decayed), or on every parameter (`train.decay_all`, AdamW's own default, as the lab uses it), fused where the
build has the kernel.

`train.optimizer="muon"`: the weight matrices inside the Transformer blocks take Muon (Jordan et al., 2024):
SGD momentum whose update is orthogonalised by a few Newton-Schulz iterations, so every direction of the matrix
moves by about the same amount. PyTorch's `torch.optim.Muon`, with its `match_rms_adamw` scaling (Liu et al.,
2025): the update's RMS is matched to AdamW's, so the run's one `lr` and weight decay serve both. Embeddings,
the head, norms and biases, which Muon is not meant for, stay on AdamW. Both are stepped as one optimizer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinyformer.config import TrainConfig


def make_optimizer(model: nn.Module, c: TrainConfig) -> torch.optim.Optimizer | Optimizers:
    """AdamW (matrices decayed, or all with `decay_all`; fused kernel where available), or with
    `optimizer="muon"` Muon for the blocks' weight matrices (`muon_matrices`) and that AdamW for the rest."""
    hidden = muon_matrices(model) if c.optimizer == "muon" else []
    taken = {id(p) for p in hidden}
    params = [p for p in model.parameters() if p.requires_grad and id(p) not in taken]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": c.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": c.weight_decay if c.decay_all else 0.0},
    ]
    try:
        adamw = torch.optim.AdamW(groups, lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps, fused=True)
    except (RuntimeError, TypeError):  # no fused kernel for this device/build
        adamw = torch.optim.AdamW(groups, lr=c.lr, betas=(c.beta1, c.beta2), eps=c.eps)
    if not hidden:
        return adamw
    muon = torch.optim.Muon(hidden, lr=c.lr, weight_decay=c.weight_decay, adjust_lr_fn="match_rms_adamw")
    return Optimizers(muon, adamw)


def muon_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The 2-D weights inside the Transformer blocks (attention and feed-forward projections): what Muon
    updates. Token and position tables and the output head are matrices too, but not hidden ones."""
    return [p for name, p in model.named_parameters() if p.requires_grad and p.dim() == 2 and ".blocks." in f".{name}"]


class Optimizers:
    """Several optimizers stepped as one: what the trainer needs of an optimizer (`param_groups`, `step`,
    `zero_grad`, `state_dict`, `load_state_dict`), each part over its own parameters."""

    def __init__(self, *parts: torch.optim.Optimizer) -> None:
        self.parts = parts

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for part in self.parts for g in part.param_groups]

    @property
    def state(self) -> dict:
        return {k: v for part in self.parts for k, v in part.state.items()}

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state.get("parts", ())) != len(self.parts):
            raise ValueError(f"an optimizer state of {len(state.get('parts', ()))} parts, not {len(self.parts)}")
        for part, s in zip(self.parts, state["parts"], strict=True):
            part.load_state_dict(s)


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
