"""The two sides of `bench reverse`, each trained in its own worker process: the course's chapter-20 loop
(`train_reference`) and tinyformer's Trainer (`train_tinyformer`), both recording every evaluation the same
way (`Record`): the training seconds so far, the evaluation's seconds and its greedy exact match, until it
reaches TARGET.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

import torch

TARGET = 0.99  # greedy exact match on the held-out pairs


class TimedEvaluation:
    """Stands in for a task's `evaluate`: the seconds and exact match of every evaluation the Trainer runs."""

    def __init__(self, evaluate) -> None:
        self.evaluate, self.rows = evaluate, []

    def __call__(self, model) -> dict:
        t0 = time.perf_counter()
        result = self.evaluate(model)
        self.rows.append((time.perf_counter() - t0, result["exact_match"]))
        return result


@dataclass
class Record:
    """One side's evaluations, printed to stderr as they come (the parent passes them on)."""

    impl: str
    steps_per_epoch: int
    evals: list[dict] = field(default_factory=list)
    t0: float = field(default_factory=time.perf_counter)

    def add(self, step: int, train_s: float, eval_s: float, exact_match: float) -> bool:
        """`train_s`: training seconds so far; `eval_s`: this evaluation's -> whether the target is reached."""
        row = dict(step=step, train_s=train_s, eval_s=eval_s, exact_match=exact_match)
        self.evals.append({**row, "wall_s": time.perf_counter() - self.t0})
        print(
            f"{self.impl}: epoch {step / self.steps_per_epoch:.3g} (step {step}), {train_s:.1f} s training so far, "
            f"eval {eval_s:.1f} s, exact match {exact_match:.4f}",
            file=sys.stderr,
            flush=True,
        )
        return exact_match >= TARGET

    def result(self, epoch_seconds: list[float], precision: str) -> dict:
        from tinyformer import device as devices

        hit = next((i for i, e in enumerate(self.evals) if e["exact_match"] >= TARGET), None)
        upto = self.evals[: hit + 1] if hit is not None else []
        eval_s = sum(e["eval_s"] for e in upto)
        return {
            "impl": self.impl,
            "precision": precision,
            "epoch_train_s": epoch_seconds,
            "epoch_s": statistics.median(epoch_seconds) if epoch_seconds else None,
            "evals": self.evals,
            "reached": hit is not None,
            "epochs": upto[-1]["step"] / self.steps_per_epoch if upto else None,
            "train_s": upto[-1]["train_s"] if upto else None,
            "eval_s": eval_s if upto else None,
            "to_target_s": upto[-1]["train_s"] + eval_s if upto else None,
            "wall_s": upto[-1]["wall_s"] if upto else None,
            "freed_memory_kept": devices.FREED_MEMORY_KEPT,  # glibc keeps freed tensor memory: both sides alike
        }


def train_reference(config, max_epochs: int, bf16: bool = False) -> dict:
    """The chapter's `main()`: `torch.manual_seed(0)`, its pairs, model and optimizer, an epoch over the
    DataLoader, then greedy exact match on the first 500 held-out pairs; `bf16`: its one autocast line on (the
    chapter turns it on on CUDA; here, on a CPU that multiplies bf16 natively)."""
    from tinyformer.bench import reference as ch
    from tinyformer.device import keep_freed_memory

    cpu = torch.device("cpu")
    keep_freed_memory()  # the allocator setting the Trainer makes (`device.configure`): both sides get it
    torch.manual_seed(0)
    src_train, tgt_train = ch.chapter_pairs(config.data.n_train, seed=0)
    src_val, tgt_val = ch.chapter_pairs(config.data.n_val, seed=1)  # the first n of the chapter's 1,000
    loader = ch.chapter_loader(src_train, tgt_train, batch_size=64)
    model = ch.ChapterSeq2Seq()
    opt, schedule = ch.chapter_optimizer(model, d=128, warmup=1000)
    record, epochs, train_s = Record("reference+bf16" if bf16 else "reference", len(loader)), [], 0.0
    for epoch in range(1, max_epochs + 1):
        model.train()
        t0 = time.perf_counter()
        for src, tgt in loader:
            with ch.chapter_autocast(cpu, bf16):
                loss = ch.chapter_loss(model, src, tgt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
        loss.item()  # the chapter prints the last batch's loss: inside the timed epoch, as ours reads its losses
        epochs.append(time.perf_counter() - t0)
        train_s += epochs[-1]
        t0 = time.perf_counter()
        exact = ch.greedy_exact_match(model, src_val[: ch.N_SCORED], tgt_val[: ch.N_SCORED])
        if record.add(epoch * len(loader), train_s, time.perf_counter() - t0, exact):
            break
    return record.result(epochs, "bf16" if bf16 else "fp32")


def train_tinyformer(config, max_epochs: int, impl: str = "tinyformer") -> dict:
    """The Trainer as `tinyformer train reverse` runs it, stopped (`fit(until=...)`) at each of its evaluations
    until one reaches the target; an epoch is n_train / batch_size steps."""
    from tinyformer.device import seed_everything
    from tinyformer.tasks import ReverseTask
    from tinyformer.train.trainer import Trainer

    seed_everything(config.train.seed)
    task = ReverseTask.prepare(config)
    task.evaluate = timed = TimedEvaluation(task.evaluate)
    c = task.config.train
    epoch = max(1, config.data.n_train // c.batch_size)
    end = min(c.max_iters, max_epochs * epoch)
    record = Record(impl, epoch)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(task.build_model(), task, c, run_dir, progress=False)
        while trainer.step < end:
            seen = len(timed.rows)
            trainer.fit(until=min((trainer.step // c.eval_interval + 1) * c.eval_interval, end))
            if len(timed.rows) > seen and record.add(trainer.step, trainer.train_seconds, *timed.rows[-1]):
                break
    s = trainer.step_seconds
    return record.result([sum(s[i : i + epoch]) for i in range(0, len(s) - epoch + 1, epoch)], trainer.precision)
