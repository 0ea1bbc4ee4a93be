"""`model.backend=auto`: each run's attention backend, chosen by timing the run's own training step.

Before the first step the Trainer times a forward and backward of one real batch (its shapes, its dtype
under autocast) with each backend (`tinyformer.device.choose_backend`, cached per machine), keeps the
fastest and records it in trainer_state.pt. A resumed run reuses its record, so it computes exactly as
before; `load_run` applies it too. An explicit `sdpa` or `manual` is used as it is and times nothing.

The measurement leaves no trace in training: it draws its batch from a generator of its own, restores the
global RNG afterwards (dropout), and drops the gradients it made. Under torchrun every rank measures and
all use rank 0's choice.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from tinyformer.attention.multihead import set_backend, softmax_layers
from tinyformer.device import BackendChoice, autocast, choose_backend
from tinyformer.train import distributed
from tinyformer.train.optim import to_device

CANDIDATES = ("sdpa", "manual")


def asked_backend(model: nn.Module) -> str | None:
    """The backend the model was built with ("auto", "sdpa", "manual"); None without softmax attention."""
    found = {m.backend for m in softmax_layers(model)}
    return found.pop() if len(found) == 1 else ("auto" if found else None)


def resolve(trainer, recorded: BackendChoice | None = None) -> BackendChoice | None:
    """Set the backend of every attention layer of `trainer.model` -> the choice (None: no attention)."""
    model, asked = trainer.model, asked_backend(trainer.model)
    if asked is None:
        return None
    if asked != "auto":
        return BackendChoice(asked, source="config")
    choice = recorded  # a resumed run: kept as recorded (`info` says how it was made)
    if choice is None:
        choice = _measure(trainer)
        choice.name = distributed.broadcast(choice.name, trainer.world)  # one backend on every rank
    set_backend(model, choice.name)
    return choice


def apply_recorded(model: nn.Module, choice: BackendChoice | None) -> None:
    """A loaded run whose attention is "auto" computes with the backend its training recorded (its
    `TrainerState.attention`)."""
    if asked_backend(model) == "auto" and choice is not None:
        set_backend(model, choice.name)


def _measure(trainer) -> BackendChoice:
    """Time each backend on one real batch: a training step, or, where training runs the same code with
    either (attention dropout on a CPU takes the manual path), the evaluation forward, where they differ."""
    task, model, device = trainer.task, trainer.model, trainer.device
    batch = to_device(task.train_batch(trainer.config.batch_size, torch.Generator().manual_seed(0)), device)
    training = not (device.type == "cpu" and any(m.dropout > 0 for m in softmax_layers(model)))

    def step(name: str):
        def run() -> int:
            set_backend(model, name)
            with torch.enable_grad() if training else torch.no_grad(), autocast(device, trainer.precision):
                loss, _ = task.training_step(model, batch)
            if training:
                loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return task.batch_tokens(batch)

        return run

    fields = {"model": _describe(model), "batch": _shapes(batch), "precision": trainer.precision, "training": training}
    fields |= {"device": device.type, "compiled": trainer.config.compile}  # (the eager model is what is timed)
    was_training = model.training
    accelerator = device.type != "cpu"  # its generator (dropout there) is restored too, with the CPU's
    with torch.random.fork_rng([device] if accelerator else [], device_type=device.type if accelerator else None):
        model.train(training)
        try:
            choice = choose_backend(fields, {name: step(name) for name in CANDIDATES}, device=device)
        finally:
            model.train(was_training)
            model.zero_grad(set_to_none=True)
    choice.work = "forward + backward" if training else "evaluation forward: training runs the manual path either way"
    return choice


def _describe(model: nn.Module) -> dict:
    """What decides the speed of a model: its class and config (or its parameter shapes, lacking a config)."""
    config = getattr(model, "config", None)
    if dataclasses.is_dataclass(config):
        return {"class": type(model).__name__, **dataclasses.asdict(config)}
    return {"class": type(model).__name__, **{n: list(p.shape) for n, p in model.named_parameters()}}


def _shapes(batch) -> list:
    if isinstance(batch, torch.Tensor):
        return [list(batch.shape), str(batch.dtype)]
    if isinstance(batch, (list, tuple)):
        return [_shapes(b) for b in batch]
    if isinstance(batch, dict):
        return {k: _shapes(v) for k, v in sorted(batch.items())}
    return repr(batch)
