"""Run folders: everything a finished or interrupted run left, loaded from its path alone.

A run folder holds config.json, tokenizer.json, model.safetensors (latest),
best.safetensors (best validation score), trainer_state.pt, metrics.jsonl,
loss.png and what its task writes at the end (see `tinyformer.train.checkpoint`
for the names). `load_run(path, device=...)` is the one way every command loads
one; `prepare_run` and `train_run` are what `tinyformer train` runs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinyformer import config as cfg
from tinyformer.device import pick_device
from tinyformer.errors import UserError
from tinyformer.tasks import Task, get_task
from tinyformer.train import checkpoint as ckpt
from tinyformer.train import distributed
from tinyformer.train.distributed import World

REQUIRED = (ckpt.CONFIG, ckpt.TOKENIZER, ckpt.WEIGHTS, ckpt.STATE)


@dataclass
class Run:
    path: Path
    task: Task  # the run's task, without data: its config and tokenizer are the run's
    model: nn.Module | None = None  # loaded by `load_run(..., weights=...)`, in eval mode
    state: dict | None = None  # trainer_state.pt without optimizer tensors

    @property
    def config(self) -> cfg.RunConfig:
        return self.task.config

    @property
    def tokenizer(self) -> Any:
        return self.task.tokenizer


def check_run_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"run folder {str(p)!r} does not exist")
    missing = [name for name in REQUIRED if not (p / name).is_file()]
    if missing:
        raise UserError(f"run folder {str(p)!r} is missing {', '.join(missing)}; is it a tinyformer run?")
    return p


def read_config(path: Path, overrides: list[str] = ()) -> tuple[cfg.RunConfig, type[Task]]:
    """The resolved config saved in a run folder (+ optional `--set` overrides) and its task class."""
    saved = ckpt.load_json(path / ckpt.CONFIG)
    task_cls = get_task(saved.get("task") if isinstance(saved, dict) else None)
    defaults = task_cls.default_config()
    return cfg.resolve(defaults, [cfg.migrate(saved, defaults)], overrides), task_cls


def prepare_run(
    task: str, layers: list[dict] = (), overrides: list[str] = (), out: str | Path | None = None, resume=None
) -> tuple[cfg.RunConfig, type[Task], Path, Any]:
    """-> (config, task class, run folder, saved tokenizer or None) for a new run or one to resume."""
    if resume:
        run_dir = check_run_dir(resume)
        config, task_cls = read_config(run_dir, list(overrides))
        if config.task != task:
            raise UserError(f"run folder {str(resume)!r} holds a {config.task!r} run, not {task!r}")
        return config, task_cls, run_dir, task_cls.load_tokenizer(run_dir / ckpt.TOKENIZER)
    task_cls = get_task(task)
    config = cfg.resolve(task_cls.default_config(), list(layers), list(overrides))
    run_dir = Path(out or f"runs/{task}-{time.strftime('%Y%m%d-%H%M%S')}")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise UserError(
            f"run folder {str(run_dir)!r} is not empty; resume it with --resume {run_dir} or pick another --out"
        )
    return config, task_cls, run_dir, None


def train_run(
    config: cfg.RunConfig,
    task_cls: type[Task],
    run_dir: Path,
    tokenizer=None,
    *,
    resume: bool = False,
    progress: bool = True,
    world: World | None = None,
    device: torch.device | None = None,
):
    """Build data, model and Trainer, save the fitted config + tokenizer, train -> (FitResult, Trainer).

    A new run whose task names a run to start from (`task.init_from()`) starts from it. A finished run
    then gets what its task writes with its best-validation weights (`task.finish`). Under torchrun
    (`world`), rank 0 writes. `device` defaults to `train.device` resolved.
    """
    from tinyformer.device import seed_everything
    from tinyformer.train.trainer import Trainer

    world = world or World()
    seed_everything(config.train.seed)
    if not world.main:
        distributed.barrier(world)  # rank 0 first: it may download the data into the shared cache
    task = task_cls.prepare(config, tokenizer)  # reads or makes the data; task.config is the fitted config
    if world.main:
        distributed.barrier(world)
    model = task.build_model()
    if task.init_from() and not resume:  # e.g. a classifier starting from a masked-LM run's encoder
        task.init_model(model, load_run(task.init_from()))
    if world.main:
        run_dir.mkdir(parents=True, exist_ok=True)
        ckpt.save_json(run_dir / ckpt.CONFIG, cfg.to_dict(task.config))
        task.tokenizer.save(run_dir / ckpt.TOKENIZER)
    trainer = Trainer(
        model, task, task.config.train, run_dir, resume=resume, progress=progress, world=world, device=device
    )
    n_params = sum(p.numel() for p in model.parameters())
    ranks = f" x {world.size} processes" if world.distributed else ""
    if world.main:
        print(
            f"{config.task}: {n_params:,} parameters on {trainer.device.type}{ranks} | "
            f"step {trainer.step}/{config.train.max_iters} | run folder {run_dir}"
        )
    result = trainer.fit()
    if result.status == "finished" and world.main:
        best = load_run(run_dir, weights="best", device=trainer.device)  # the weights validation chose
        task.finish(best.model, run_dir)  # e.g. sample.txt (gpt), test-split scores and confusion matrix (classify)
    return result, trainer


def load_run(path: str | Path, weights: str | None = "best", device: str | torch.device = "cpu") -> Run:
    """Load a run; `weights` = "best", "latest" or None (config, tokenizer and state only).

    The model is built in eval mode on `device` ("auto" = cuda > mps > cpu).
    """
    p = check_run_dir(path)
    config, task_cls = read_config(p)
    task = task_cls(config, task_cls.load_tokenizer(p / ckpt.TOKENIZER))
    state = ckpt.load_state(p / ckpt.STATE)
    state.pop("optimizer", None)
    run = Run(p, task, state=state)
    if weights is not None:
        if weights not in ("best", "latest"):
            raise UserError(f"checkpoint={weights!r} is not one of best, latest")
        file = p / ckpt.BEST if weights == "best" and (p / ckpt.BEST).is_file() else p / ckpt.WEIGHTS
        run.model = task.build_model().to(device if isinstance(device, torch.device) else pick_device(device))
        ckpt.load_weights(run.model, file)
        run.model.eval()
    return run


def best_val(run: Run) -> float:
    return run.state.get("best_val", math.inf) if run.state else math.inf
