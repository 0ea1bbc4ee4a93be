"""The divergence guard: a non-finite loss or gradient norm stops training with a diagnosis.

A learning rate far too high (or a broken position base) does not crash: the
loss turns inf or nan and training would carry on to the end, writing curves of
nan. The Trainer checks every step's loss and gradient norm before the optimizer
step, so the bad update is never applied, and `diagnose` says in one line where
the first non-finite number appeared: a parameter, a gradient, or a layer's
activation (found by forward hooks on the batch that diverged).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def first_nonfinite_parameter(model: nn.Module, grads: bool = False) -> str | None:
    """The name of the first parameter (or, with `grads`, gradient) holding an inf or nan."""
    for name, p in model.named_parameters():
        t = p.grad if grads else p
        if t is not None and not bool(torch.isfinite(t).all()):
            return name
    return None


@torch.no_grad()
def first_nonfinite_activation(model: nn.Module, run: Any) -> str | None:
    """Run `run()` (a forward pass) with hooks; the name of the first module whose output is not finite."""
    found: list[str] = []

    def hook(name: str):
        def check(module, inputs, output):
            tensors = output if isinstance(output, tuple) else (output,)
            if not found and any(isinstance(t, torch.Tensor) and not bool(torch.isfinite(t).all()) for t in tensors):
                found.append(name)

        return check

    handles = [m.register_forward_hook(hook(name)) for name, m in model.named_modules() if name]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None


def diagnose(step: int, loss: float, grad_norm: float, model: nn.Module, rerun: Any, lr: float, base_lr: float) -> str:
    """One line: at which step, what went non-finite first, and what to try."""
    if (name := first_nonfinite_parameter(model)) is not None:
        where = f"the weights were already non-finite ({name})"
    elif not math.isfinite(loss):
        layer = first_nonfinite_activation(model, rerun)
        where = f"first non-finite activation: the output of {layer}" if layer else "every activation was finite"
        where = f"the loss is {loss}; {where}"
    else:
        where = f"the gradient norm is {grad_norm}; first non-finite gradient: {first_nonfinite_parameter(model, True)}"
    return (
        f"training diverged at step {step}: {where}. The update was not applied; the run folder keeps its last "
        f"good checkpoint. Lower train.lr (set to {base_lr:g}; {lr:g} at this step of its schedule) or check the "
        "model settings, then --resume"
    )
