"""Run folders: everything a finished or interrupted run left, loaded from its path alone.

A run folder holds config.json, tokenizer.json, model.safetensors (latest),
best.safetensors (best validation score), trainer_state.pt, metrics.jsonl,
loss.png and what its task writes at the end (see `tinyformer.runfolder`
for the names). `load_run(path, device=...)` is the one way every command loads
one; `prepare_run` and `train_run` are what `tinyformer train` runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinyformer import config as cfg
from tinyformer import runfolder
from tinyformer.device import autocast, check_memory, describe_precision, model_device, pick_device, resolve_precision
from tinyformer.errors import UserError
from tinyformer.files import kind, output_path
from tinyformer.hub import pretrained_folder
from tinyformer.models import count_parameters
from tinyformer.tasks import get_task
from tinyformer.tasks.base import Task
from tinyformer.train import budget, distributed
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.autotune import apply_recorded
from tinyformer.train.distributed import World
from tinyformer.train.metrics import require_tensorboard

REQUIRED = (runfolder.CONFIG, runfolder.TOKENIZER, runfolder.WEIGHTS, runfolder.STATE)
NEVER_SAVED = (
    "run folder {p!r} holds a run that stopped before its first checkpoint, so there is nothing to resume; "
    "delete it (rm -r {p}) and start the run again"
)


@dataclass
class Run:
    path: Path
    task: Task  # the run's task, without data: its config and tokenizer are the run's
    state: runfolder.TrainerState  # trainer_state.pt, its optimizer state left out ({})
    model: nn.Module | None = None  # loaded by `load_run(..., weights=...)`, in eval mode

    @property
    def config(self) -> cfg.RunConfig:
        return self.task.config

    @property
    def tokenizer(self) -> Any:
        return self.task.tokenizer

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision inference runs in: on a GPU the run's own (`train.precision` resolved there); on a CPU fp32,
        whatever the run trained in. There bf16 autocast is a training lever only: for one-token steps and
        evaluation it costs time (the `make demo` model generates 381 tokens/s in fp32 against 317 in bf16 autocast,
        and `eval` takes 6.9 s against 8.2, on a 2-core Xeon with AMX), and fp32 is what the exported page and ONNX
        graphs compute, so their greedy text is `sample`'s on every CPU (issue 59)."""
        device = model_device(self.model)
        precision = "fp32" if device.type == "cpu" else resolve_precision(device, self.config.train.precision)
        return autocast(device, precision)


def check_run_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        what, name = kind(p), repr(str(p))
        raise UserError(f"{name} is a {what}, not a run folder" if what else f"run folder {name} does not exist")
    if runfolder.never_saved(p):
        raise UserError(NEVER_SAVED.format(p=str(p)))
    if (p / runfolder.COMMIT).is_file():  # a save a kill interrupted after its commit: resume (under the lock) ends it
        return p
    missing = [name for name in REQUIRED if not (p / name).is_file()]
    if missing:
        raise UserError(f"run folder {str(p)!r} is missing {', '.join(missing)}; is it a tinyformer run?")
    return p


def read_config(path: Path, overrides: list[str] = ()) -> tuple[cfg.RunConfig, type[Task]]:
    """The resolved config saved in a run folder (+ optional `--set` overrides) and its task class."""
    saved = runfolder.saved_config(path)
    if not isinstance(saved, dict) or not isinstance(saved.get("task"), str):
        raise UserError(f"{path / runfolder.CONFIG} does not hold a run config (no 'task' in a JSON object)")
    try:
        task_cls = get_task(saved["task"])
        defaults = task_cls.default_config()
        recorded = cfg.resolve(defaults, [cfg.migrate(saved, defaults)], [])
    except UserError as e:  # a key or value no run of this version writes: the file is named
        raise UserError(f"{path / runfolder.CONFIG} does not hold a run config this version reads: {e}") from None
    return cfg.resolve(recorded, [], overrides) if overrides else recorded, task_cls


def prepare_run(
    task: str, layers: list[dict] = (), overrides: list[str] = (), out: str | Path | None = None, resume=None
) -> tuple[cfg.RunConfig, type[Task], Path, Any]:
    """-> (config, task class, run folder, saved tokenizer or None) for a new run or one to resume.

    Nothing is written: every check a run folder needs happens here or, under its lock, in `train_run`.
    """
    if resume:
        run_dir = check_run_dir(resume)
        config, task_cls = read_config(run_dir, list(overrides))
        if config.task != task:
            raise UserError(f"run folder {str(resume)!r} holds a {config.task!r} run, not {task!r}")
        check_resume_changes(read_config(run_dir)[0], config)
        return config, task_cls, run_dir, task_cls.load_tokenizer(run_dir / runfolder.TOKENIZER)
    task_cls = get_task(task)
    config = new_config(task, layers, overrides)
    if config.train.time_row:
        row = config.train.time_row
        print(f"--time: preset {row}'s shape, the budget table's row for this budget (why: configs/{row}.toml)")
    if config.train.tensorboard:  # a missing package: one line before the run folder is made
        require_tensorboard()
    run_dir = Path(out or f"runs/{task}-{time.strftime('%Y%m%d-%H%M%S')}")
    check_empty(output_path(run_dir, folder=True))
    return config, task_cls, run_dir, None


def new_config(task: str, layers: list[dict] = (), overrides: list[str] = ()) -> cfg.RunConfig:
    """A new run's config: the task's defaults <- `layers` <- `overrides`; with `--time` and no layers, the
    budget table's row for the budget (`train.budget.row_for`) is the layer, and `train.time_row` names it."""
    defaults = get_task(task).default_config()
    config = cfg.resolve(defaults, list(layers), list(overrides))
    if config.train.time_budget and not layers and (row := budget.row_for(task, config.train.time_budget)):
        config = cfg.resolve(defaults, [cfg.load_toml(row)], [*overrides, f"train.time_row={json.dumps(row)}"])
    return config


RESUMABLE = ("train", "sample")  # sections a resumed run may change; and data.path, for a moved copy of the data


def check_resume_changes(saved: cfg.RunConfig, asked: cfg.RunConfig) -> None:
    """A resumed run keeps its model and data: a `--set` that changes them is refused, naming the keys."""
    old, new = cfg.to_dict(saved), cfg.to_dict(asked)
    changed = [
        f"{section}.{key} ({value!r} -> {new[section][key]!r})"
        for section, values in old.items()
        if isinstance(values, dict) and section not in RESUMABLE
        for key, value in values.items()
        if new[section][key] != value and f"{section}.{key}" != "data.path"
    ]
    if changed:
        raise UserError(
            f"cannot change on resume: {', '.join(changed)}; a resumed run keeps its model and data "
            f"(the {' and '.join(f'{s}.*' for s in RESUMABLE)} keys and data.path may change)"
        )


def check_empty(run_dir: Path) -> Path:
    if runfolder.never_saved(run_dir):
        raise UserError(NEVER_SAVED.format(p=str(run_dir)))
    if run_dir.is_dir() and any(p.name != runfolder.LOCK for p in run_dir.iterdir()):
        raise UserError(
            f"run folder {str(run_dir)!r} is not empty; resume it with --resume {run_dir} or pick another --out"
        )
    return run_dir


def train_run(
    config: cfg.RunConfig,
    task_cls: type[Task],
    run_dir: Path,
    tokenizer=None,
    *,
    resume: bool | str = False,  # True, or "inexact" (see Trainer)
    progress: bool = True,
    world: World | None = None,
    device: torch.device | None = None,
):
    """Build data, model and Trainer, save the fitted config (+ tokenizer), train -> (FitResult, Trainer).

    Under the run folder's lock (rank 0 takes it under torchrun): a resumed run's files are all
    read and checked before config.json is rewritten; a new run's folder must still be empty. A new
    run whose task names a run to start from (`task.init_from()`) starts from it. A finished run then
    gets what its task writes with the weights it names (`train.weights`; `task.finish`); a diverged one ends in
    a UserError with the diagnosis. `device` defaults to `train.device` resolved.
    """
    world = world or World()
    device = device or distributed.train_device(config.train.device, world)
    with ckpt.claim(run_dir) if world.main else contextlib.nullcontext():
        if not resume:
            check_empty(run_dir)
        trainer = _trainer(config, task_cls, run_dir, tokenizer, resume, progress, world, device)
        result = trainer.fit()
        if result.status == "finished" and world.main:
            kept = load_run(run_dir, device=trainer.device)  # the weights the run's commands read (train.weights)
            with kept.autocast():
                trainer.task.finish(kept.model, run_dir)  # e.g. sample.txt (gpt), test-split scores (classify)
    if result.status == "diverged":
        raise UserError(result.reason)
    return result, trainer


def _trainer(config, task_cls, run_dir, tokenizer, resume, progress, world, device):
    """The task with its data, the model (from init_from for a new run), and a Trainer that loaded any state."""
    from tinyformer.device import seed_everything
    from tinyformer.train.trainer import Trainer

    seed_everything(config.train.seed)
    if not world.main:
        distributed.barrier(world)  # rank 0 first: it may download the data into the shared cache
    task = task_cls.prepare(config, tokenizer)  # reads or makes the data; task.config is the fitted config
    if world.main:
        distributed.barrier(world)
    check_memory(training_bytes(task), "training this model with this batch", device)
    model = task.build_model()
    if task.init_from() and not resume:  # e.g. a classifier starting from a masked-LM run's or MiniLM's encoder
        task.init_model(model, load_source(task.init_from()))
    kw = dict(resume=resume, progress=progress, world=world, device=device)
    trainer = Trainer(model, task, task.config.train, run_dir, **kw)  # a resumed run's state is loaded here
    if world.main:
        ckpt.save_json(run_dir / runfolder.CONFIG, cfg.to_dict(task.config))
        if not resume:
            task.tokenizer.save(run_dir / runfolder.TOKENIZER)
        ranks = f" x {world.size} processes" if world.distributed else ""
        n_params = count_parameters(model)
        print(
            f"{config.task}: {n_params:,} parameters on {trainer.device.type}{ranks} in "
            f"{describe_precision(trainer.device, config.train.precision)} | "
            f"{steps_text(trainer)} | run folder {run_dir}"
        )
        if trainer.attention is not None:
            print(trainer.attention.line(resumed=trainer.attention_reused))
    return trainer


def steps_text(trainer) -> str:
    """Where the run stands in its steps: "step 0/3000"; a --time run's count is its plan's, once it has one."""
    plan = trainer.plan
    if plan is None:
        return f"step {trainer.step}/{trainer.config.max_iters}"
    if not plan.plans:
        return f"step {trainer.step}, for {plan.budget:,.0f} s (its steps planned once its first steps are timed)"
    return f"step {trainer.step}/{plan.max_iters} planned for {plan.budget:,.0f} s"


def load_source(where: str) -> Run | Path:
    """What `model.init_from` names: a tinyformer run folder -> its `Run` (the weights it names); anything else (a
    Hugging Face model folder, the offline MiniLM, a hub id) -> the local folder `tinyformer.hub` resolves."""
    if runfolder.is_run(where):
        return load_run(where)
    return pretrained_folder(where)


def parameter_count(task: Task) -> int:
    """The parameters `task.build_model()` would make, counted on the meta device (nothing is allocated). Past
    `MAX_LAYERS` the count alone would take minutes (10**8 layers: hours), so such a config is refused first."""
    m = task.config.model
    if layers(m) > MAX_LAYERS:
        asked = ", ".join(f"model.{k}={getattr(m, k):,}" for k in LAYER_KEYS if hasattr(m, k))
        raise UserError(f"{asked}: more than the {MAX_LAYERS:,} layers tinyformer builds")
    with torch.device("meta"), _NoNormalInit():
        return count_parameters(task.build_model())


class _NoNormalInit(torch.overrides.TorchFunctionMode):
    """Leaves `normal_` undone: on the meta device its kernel imports torch._dynamo, a second of a cold
    `tinyformer sample`, to fill values nobody reads. A function mode holds in this thread only."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.nn.init.normal_, torch.Tensor.normal_):
            return args[0] if args else kwargs["tensor"]  # the tensor, its values left as they are
        return func(*args, **kwargs)


def training_bytes(task: Task) -> int:
    """A lower bound of training memory: weights, gradients and AdamW's two moments (16 bytes a parameter),
    and what one batch keeps for backward (at least ~10 floats per position, unit of width and layer, and
    the logits), from the config's glossary names."""
    m, batch = task.config.model, task.config.train.batch_size
    per_position = 10 * m.n_embd * layers(m) + 2 * m.vocab_size
    return 16 * parameter_count(task) + 4 * batch * m.block_size * per_position


MAX_LAYERS = 1024  # the deepest model built: the deepest released ones have ~130; 1,024 are counted in seconds
LAYER_KEYS = ("n_layer", "n_encoder_layers", "n_decoder_layers")


def layers(m) -> int:
    """The layers a model config asks for, whatever its glossary calls them."""
    return sum(getattr(m, k, 0) for k in LAYER_KEYS)


def load_run(path: str | Path, weights: str | None = "run", device: str | torch.device = "cpu") -> Run:
    """Load a run; `weights` = "run" (the run's `train.weights`: `runfolder.weights_file` states the rule),
    "best", "latest" or None (config, tokenizer and state only).

    The model is built in eval mode on `device` ("auto" = cuda > mps > cpu).
    """
    p = check_run_dir(path)
    config, task_cls = read_config(p)
    task = task_cls(config, task_cls.load_tokenizer(p / runfolder.TOKENIZER))
    if task.tokenizer.vocab_size != config.model.vocab_size:
        raise UserError(
            f"{p / runfolder.TOKENIZER} has {task.tokenizer.vocab_size} tokens but the model in config.json "
            f"has {config.model.vocab_size}; the two files are not from the same run"
        )
    state = runfolder.read_state(p / runfolder.STATE)
    state = dataclasses.replace(state, optimizer={})  # its tensors are for a resume alone
    run = Run(p, task, state)
    if weights is not None:
        file = runfolder.weights_file(p, weights)
        device = device if isinstance(device, torch.device) else pick_device(device)
        check_memory(4 * parameter_count(task), f"the model in {p / runfolder.CONFIG}", device)
        run.model = task.build_model().to(device)
        ckpt.load_weights(run.model, file)
        apply_recorded(run.model, state.attention)  # model.backend=auto: the backend its training measured
        run.model.eval()
    return run


def best_val(run: Run) -> float:
    return run.state.best_val
