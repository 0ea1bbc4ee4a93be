"""Resuming a run: the Trainer's state restored from its folder, checked before anything is changed.

An exact resume restores the weights, the optimizer, both random generators (torch's and the batches') and the
counters, so the run goes on as if it had never stopped. `--inexact` continues a folder whose weights and state
are from different steps: the latest weights, a fresh optimizer, new batches. A bad file is a UserError.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from tinyformer.config import TrainConfig
from tinyformer.errors import UserError
from tinyformer.files import atomic_write
from tinyformer.runfolder import METRICS, STATE, WEIGHTS, TrainerState, pending, read_metrics, read_state
from tinyformer.seeds import derive
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.distributed import World


class Resumable(Protocol):
    """What a resume reads of the Trainer (`tinyformer.train.trainer.Trainer`, which imports this module) and
    loads into: it sets none of the Trainer's counters, the `TrainerState` it returns carries them."""

    run_dir: Path
    config: TrainConfig
    world: World
    device: torch.device
    task: Any  # its `select`: the evaluate() key that picks best.safetensors
    model: nn.Module
    optimizer: torch.optim.Optimizer
    data_rng: torch.Generator
    scaler: torch.amp.GradScaler | None


def restore(trainer: Resumable, inexact: bool = False) -> TrainerState:
    """Everything a resumed run needs, checked before anything is changed (a bad file is a UserError): the
    weights, optimizer, generators and gradient scaler loaded into the trainer's -> the state the run continues
    from (its step, best score, time, tokens, `reached` and attention backend)."""
    if trainer.world.main and pending(trainer.run_dir):  # a save a kill interrupted (`train`, which holds the
        with ckpt.claim(trainer.run_dir):  # lock, has ended it already): taking the lock ends it, and refuses
            pass  # while another process trains into the folder
    try:
        state = ckpt.load_trainer_state(trainer.run_dir)  # also checks it is from the same step as the weights
    except ckpt.StaleCheckpoint:
        if not inexact:
            raise
        return _load_weights_only(trainer)
    if not trainer.config.time_budget and trainer.config.max_iters < state.step:  # (a --time run: its plan's)
        raise UserError(
            f"train.max_iters={trainer.config.max_iters} is below step {state.step}, where this run already is; "
            "give a larger value to continue it"
        )
    ckpt.load_weights(trainer.model, trainer.run_dir / WEIGHTS)
    path = trainer.run_dir / STATE
    ckpt.restore(path, lambda: trainer.optimizer.load_state_dict(state.optimizer))
    ckpt.restore(path, lambda: torch.set_rng_state(state.rng["torch"]))
    ckpt.restore(path, lambda: trainer.data_rng.set_state(state.rng["data"]))
    if trainer.scaler is not None and state.grad_scaler is not None:
        trainer.scaler.load_state_dict(state.grad_scaler)
    if "cuda" in state.rng and trainer.device.type == "cuda":
        torch.cuda.set_rng_state(state.rng["cuda"], trainer.device)
    _metrics_up_to(trainer, state.step)
    _say_batch_change(trainer, state)
    return state


def _say_batch_change(trainer: Resumable, state: TrainerState) -> None:
    """A run resumed with another number of processes trains on another global batch: say so, once."""
    before, now, b = state.processes, trainer.world.size, trainer.config.batch_size
    if before != now and trainer.world.main:
        keep = before * b / now
        hint = f"--set train.batch_size={keep:.0f} keeps it" if keep == int(keep) else "no batch size keeps it"
        print(
            f"note: this run trained with {before} process(es), a global batch of {before} x {b} = {before * b}; "
            f"resumed with {now}, it is {now} x {b} = {now * b} from step {state.step} ({hint})"
        )


def _metrics_up_to(trainer: Resumable, step: int) -> list[dict]:
    """The logged rows up to `step`; rank 0 drops the rest from metrics.jsonl (they are redone)."""
    rows = [r for r in read_metrics(trainer.run_dir / METRICS) if r["step"] <= step]
    if trainer.world.main:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        atomic_write(trainer.run_dir / METRICS, lambda t: t.write_text(text))
    return rows


def _load_weights_only(trainer: Resumable) -> TrainerState:
    """`--inexact`: the latest weights at the step they record, a fresh optimizer, the state's other figures."""
    ckpt.load_weights(trainer.model, trainer.run_dir / WEIGHTS)
    state = read_state(trainer.run_dir / STATE)
    step = ckpt.weights_step(trainer.run_dir / WEIGHTS) or 0
    if trainer.config.max_iters <= step:
        raise UserError(f"train.max_iters={trainer.config.max_iters} is not past step {step}, where the weights are")
    rows = _metrics_up_to(trainer, step)
    select = trainer.task.select
    scores = [r[select] for r in rows if r.get("split") == "val" and select in r]
    trainer.data_rng.manual_seed(derive(trainer.config.seed, plus=step))  # new batches, not those of step 1 again
    torch.manual_seed(derive(trainer.config.seed, plus=step))
    if trainer.world.main:
        print(
            f"note: {WEIGHTS} and {STATE} are from different steps; --inexact: continuing from "
            f"{WEIGHTS} at step {step} with a fresh optimizer state (not an exact continuation)"
        )
    best = min(scores, default=state.best_val)  # what best.safetensors may hold by now
    return dataclasses.replace(state, step=step, best_val=best, optimizer={})  # the optimizer starts afresh
