"""`tinyformer train` (a new run, or `--resume` one) and `tinyformer info` (what a run folder holds)."""

from __future__ import annotations

import argparse
import json
import os

from tinyformer.errors import UserError


def _data_args() -> list:
    """The `train` options that tasks declare for their data (`Task.data_args`), each flag once."""
    from tinyformer.cli.infer import union
    from tinyformer.tasks.cards import CARDS

    return union([arg for card in CARDS.values() for arg in card.data_args])


def add_train(p: argparse.ArgumentParser) -> None:
    from tinyformer.cli.infer import add_args
    from tinyformer.config import presets
    from tinyformer.tasks.cards import CARDS

    p.add_argument("task", choices=sorted(CARDS), help="what to train")
    p.add_argument("--config", help=f"a TOML file, or a preset by name: {', '.join(presets())}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. model.n_layer=1")
    p.add_argument("--out", help="new run folder (default: runs/<task>-<date>-<time>)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder exactly where it stopped")
    p.add_argument(
        "--inexact",
        action="store_true",
        help="with --resume, for a folder whose weights and trainer state disagree (saved by an older version): "
        "continue from the weights with a fresh optimizer state",
    )
    formats = "; ".join(f"{name}: {card.data_format}" for name, card in CARDS.items() if card.data_format)
    p.add_argument("--data", help=f"what to train on ({formats}); default: $TINYFORMER_DATA, else Tiny Shakespeare")
    add_args(p, _data_args())
    p.add_argument("--device", help="auto, cpu, cuda or mps (train.device)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (train.compile)")
    p.add_argument("--tensorboard", action="store_true", help="write TensorBoard events to RUN/tb")
    time = (
        "train this long, evaluations included (90s, 10m, 1h30m): the schedule is sized to it, in place of "
        "train.max_iters, which only gives its shape (train.time_budget)"
    )
    p.add_argument("--time", metavar="DURATION", help=time)


def _train_overrides(a: argparse.Namespace) -> list[str]:
    """`--set` values plus the shortcut flags, all as `section.key=value` overrides."""
    overrides = list(a.set)
    overrides += [f"data.path={json.dumps(os.path.abspath(a.data))}"] if a.data else []  # runnable from anywhere
    overrides += _data_overrides(a)
    overrides += [f"train.device={json.dumps(a.device)}"] if a.device else []
    overrides += ["train.compile=true"] if a.compile else []
    overrides += ["train.tensorboard=true"] if a.tensorboard else []
    if a.time:
        from tinyformer.train.budget import parse_duration

        overrides += [f"train.time_budget={parse_duration(a.time)}"]
    return overrides


def _data_overrides(a: argparse.Namespace) -> list[str]:
    """The task's own data options as `data.<name>=value`; one another task declares is refused."""
    from tinyformer.tasks.cards import CARDS

    given = [arg for arg in _data_args() if getattr(a, arg.dest) is not None]
    for arg in given:
        if arg not in CARDS[a.task].data_args:
            readers = ", ".join(f"train {n}" for n, card in CARDS.items() if arg in card.data_args)
            raise UserError(f"{arg.flag} is read by {readers}, not by train {a.task}")
    return [f"data.{arg.dest}={json.dumps(getattr(a, arg.dest))}" for arg in given]


def cmd_train(a: argparse.Namespace) -> int:
    from tinyformer import config as cfg
    from tinyformer.device import pick_device
    from tinyformer.runs import prepare_run, train_run
    from tinyformer.train import distributed

    if a.inexact and not a.resume:
        raise UserError("--inexact goes with --resume RUN")
    if a.resume and (a.config or a.out):
        raise UserError("--resume continues a run with its saved config; drop --config/--out (--set still works)")
    layers = [cfg.load_toml(a.config)] if a.config else []
    config, task_cls, run_dir, tokenizer = prepare_run(a.task, layers, _train_overrides(a), a.out, a.resume)
    world = distributed.init(pick_device(config.train.device).type, config.train.dist_timeout)  # torchrun only
    run_dir = distributed.broadcast(run_dir, world)  # one folder name for every rank: rank 0's
    try:  # the device: train.device on this rank (`distributed.train_device`)
        resume = "inexact" if a.inexact else bool(a.resume)
        result, trainer = train_run(config, task_cls, run_dir, tokenizer, resume=resume, world=world)
    finally:
        distributed.shutdown()
    if not world.main:
        return 128 + result.signal if result.status == "interrupted" else 0
    if result.status == "interrupted":
        print(f"interrupted at step {result.step}; state saved. Resume: tinyformer train {a.task} --resume {run_dir}")
        return 128 + result.signal
    tps = trainer.tokens_seen / max(result.train_seconds, 1e-9)
    print(
        f"done: step {result.step}, best val {task_cls.select} {result.best_val:.4f}, "
        f"{result.train_seconds:.0f} s of training ({tps:,.0f} tokens/s); see {run_dir}/loss.png"
    )
    if a.resume and trainer.resumed_at >= trainer.config.max_iters:  # (a --time run's: its plan's last step)
        further = (
            "a new run with a longer --time (a run keeps the budget it was planned for)"
            if trainer.plan is not None
            else f"tinyformer train {a.task} --resume {run_dir} --set train.max_iters=N, with N above {result.step}"
        )
        print(f"it had already finished: nothing was trained. To train it further: {further}")
    return 0


def add_info(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder")
    p.add_argument("--plot", action="store_true", help="also draw RUN/loss.png from its log now (mid-training too)")


def cmd_info(a: argparse.Namespace) -> int:
    from tinyformer.info import describe
    from tinyformer.runfolder import plot_run
    from tinyformer.runs import load_run

    run = load_run(a.run, weights="latest")
    print(describe(run))
    if a.plot:
        print(f"drew {plot_run(run.path)}")
    return 0
