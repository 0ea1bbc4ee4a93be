"""Resuming a run: the Trainer's state restored from its folder, checked before anything is changed.

An exact resume restores the weights, the optimizer, both random generators (torch's and the batches') and the
counters, so the run goes on as if it had never stopped. `--inexact` continues a folder whose weights and state
are from different steps: the latest weights, a fresh optimizer, new batches. A bad file is a UserError.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from tinyformer.errors import UserError
from tinyformer.files import atomic_write
from tinyformer.train import checkpoint as ckpt

Trainer = Any  # a `tinyformer.train.trainer.Trainer` (not imported: it imports this module)


def restore(trainer: Trainer, inexact: bool = False) -> dict | None:
    """Everything a resumed run needs, checked before anything is changed (a bad file is a UserError).

    -> the attention backend the run recorded (None if it has none)."""
    if trainer.world.main and ckpt.pending(trainer.run_dir):  # a save a kill interrupted (`train`, which holds
        with ckpt.run_lock(trainer.run_dir):  # the lock, has ended it already): taking the lock ends it, and
            pass  # refuses while another process trains into the folder
    try:
        state = ckpt.load_trainer_state(trainer.run_dir)  # also checks it is from the same step as the weights
    except ckpt.StaleCheckpoint:
        if not inexact:
            raise
        return _load_weights_only(trainer)
    if trainer.config.max_iters < state["step"]:
        raise UserError(
            f"train.max_iters={trainer.config.max_iters} is below step {state['step']}, where this run already is; "
            "give a larger value to continue it"
        )
    ckpt.load_weights(trainer.model, trainer.run_dir / ckpt.WEIGHTS)
    ckpt.restore(trainer.run_dir / ckpt.STATE, lambda: trainer.optimizer.load_state_dict(state["optimizer"]))
    ckpt.restore(trainer.run_dir / ckpt.STATE, lambda: torch.set_rng_state(state["rng"]["torch"]))
    ckpt.restore(trainer.run_dir / ckpt.STATE, lambda: trainer.data_rng.set_state(state["rng"]["data"]))
    if trainer.scaler is not None and "grad_scaler" in state:
        trainer.scaler.load_state_dict(state["grad_scaler"])
    if "cuda" in state["rng"] and trainer.device.type == "cuda":
        torch.cuda.set_rng_state(state["rng"]["cuda"], trainer.device)
    trainer.step, trainer.best_val, trainer.saved_step = state["step"], state["best_val"], state["step"]
    trainer.train_seconds, trainer.tokens_seen = state["train_seconds"], state["tokens_seen"]
    reached = state.get("reached")  # train.stop_at was met: still finished while the run asks the same
    if isinstance(reached, str) and trainer.config.stop_at and reached.startswith(f"{trainer.config.stop_at} met"):
        trainer.reached = reached
    _metrics_up_to(trainer, trainer.step)
    _say_batch_change(trainer, state.get("processes", 1))
    return state.get("attention")


def _say_batch_change(trainer: Trainer, before: int) -> None:
    """A run resumed with another number of processes trains on another global batch: say so, once."""
    now, b = trainer.world.size, trainer.config.batch_size
    if before != now and trainer.world.main:
        keep = before * b / now
        hint = f"--set train.batch_size={keep:.0f} keeps it" if keep == int(keep) else "no batch size keeps it"
        print(
            f"note: this run trained with {before} process(es), a global batch of {before} x {b} = {before * b}; "
            f"resumed with {now}, it is {now} x {b} = {now * b} from step {trainer.step} ({hint})"
        )


def _metrics_up_to(trainer: Trainer, step: int) -> list[dict]:
    """The logged rows up to `step`; rank 0 drops the rest from metrics.jsonl (they are redone)."""
    rows = [r for r in ckpt.read_metrics(trainer.run_dir / ckpt.METRICS) if r["step"] <= step]
    if trainer.world.main:
        text = "".join(json.dumps(r) + "\n" for r in rows)
        atomic_write(trainer.run_dir / ckpt.METRICS, lambda t: t.write_text(text))
    return rows


def _load_weights_only(trainer: Trainer) -> dict | None:
    """`--inexact`: the latest weights at the step they record, a fresh optimizer, the state's other figures."""
    ckpt.load_weights(trainer.model, trainer.run_dir / ckpt.WEIGHTS)
    state = ckpt.load_state(trainer.run_dir / ckpt.STATE)
    trainer.step = trainer.saved_step = ckpt.weights_step(trainer.run_dir / ckpt.WEIGHTS) or 0
    if trainer.config.max_iters <= trainer.step:
        raise UserError(
            f"train.max_iters={trainer.config.max_iters} is not past step {trainer.step}, where the weights are"
        )
    rows = _metrics_up_to(trainer, trainer.step)
    scores = [r[trainer.task.select] for r in rows if r.get("split") == "val" and trainer.task.select in r]
    trainer.best_val = min(scores, default=state["best_val"])  # what best.safetensors may hold by now
    trainer.train_seconds, trainer.tokens_seen = state["train_seconds"], state["tokens_seen"]
    reached = state.get("reached")  # train.stop_at was met: still finished while the run asks the same
    if isinstance(reached, str) and trainer.config.stop_at and reached.startswith(f"{trainer.config.stop_at} met"):
        trainer.reached = reached
    trainer.data_rng.manual_seed(trainer.config.seed + trainer.step)  # new batches, not those of step 1 again
    torch.manual_seed(trainer.config.seed + trainer.step)
    if trainer.world.main:
        print(
            f"note: {ckpt.WEIGHTS} and {ckpt.STATE} are from different steps; --inexact: continuing from "
            f"{ckpt.WEIGHTS} at step {trainer.step} with a fresh optimizer state (not an exact continuation)"
        )
    return state.get("attention")
