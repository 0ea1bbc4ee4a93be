"""One training loop for every task.

The Trainer owns optimisation (AdamW, fused where the build has it; decay on
matrices only), the learning-rate schedule, gradient clipping and accumulation,
mixed precision (`train.precision`: bf16 autocast where the hardware has it,
fp16 with a gradient scaler), the attention backend where the model leaves it
to the machine (`model.backend=auto`: measured, `tinyformer.train.autotune`),
evaluation, logging (progress bar, metrics.jsonl, loss.png, optional
TensorBoard), checkpoints and exact resume. It knows nothing about any model:
a task object supplies batches, the loss and the evaluation.

A run stopped by Ctrl-C (SIGINT) or SIGTERM saves its state at the next step
boundary; resuming it gives the same weights as a run that was never stopped,
because batches, dropout and the schedule depend only on saved state. A step
whose loss or gradient norm is not finite is never applied: training stops
there with a diagnosis (`tinyformer.train.guard`).

Under torchrun the same loop runs data-parallel (see `tinyformer.train.distributed`):
each rank trains on its slice of the global batch, DDP averages the gradients,
the ranks agree every step on the logged numbers and on whether to stop, and
rank 0 alone writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import math
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from tinyformer import interrupt, runfolder
from tinyformer.config import TrainConfig, target_met
from tinyformer.device import BackendChoice, autocast, configure, inference, resolve_precision
from tinyformer.errors import UserError
from tinyformer.files import make_dir
from tinyformer.runfolder import BEST, STATE, WEIGHTS, TrainerState
from tinyformer.train import autotune, budget, distributed, guard
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.distributed import World
from tinyformer.train.metrics import MetricsLog
from tinyformer.train.optim import make_optimizer, to_device
from tinyformer.train.resume import restore
from tinyformer.train.schedules import lr_at


class Task(Protocol):
    """What the loop needs of a task (`tinyformer.tasks.base.Task` documents each part)."""

    select: str  # the evaluate() key, lower is better, that picks best.safetensors

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Any: ...

    def training_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]: ...

    def evaluate(self, model: nn.Module) -> dict[str, float]: ...  # must contain "loss" and `select`

    def batch_tokens(self, batch: Any) -> int: ...

    def seek(self, batches: int) -> None: ...  # where training stands: `batches` micro-batches drawn before


@dataclass
class Step:
    """One optimizer step as the log sums it: over the global batch, the same numbers on every rank."""

    loss: float
    tokens: int
    seconds: float
    metrics: dict[str, float]  # lr, grad_norm and the task's own (an empty dict: the step diverged)


QUIET_S = 10.0  # without a progress bar (output not a terminal), the longest time between two printed lines


@dataclass
class FitResult:
    status: str  # "finished", "stopped" (fit(until=...)), "interrupted" (a signal) or "diverged" (non-finite)
    step: int  # optimizer steps done in total
    best_val: float  # lowest validation score seen: the task's `select` key, "loss" by default (inf before any)
    train_seconds: float  # time spent in training steps, evaluations excluded
    reason: str = ""  # "diverged": the one-line diagnosis (see `tinyformer.train.guard`)
    signal: int = 0  # "interrupted": the signal that stopped it (SIGINT or SIGTERM; the exit status is 128 + it)


class Trainer:
    def __init__(
        self,
        model: nn.Module,
        task: Task,
        config: TrainConfig,
        run_dir: str | Path,
        *,
        resume: bool | str = False,
        progress: bool = True,
        world: World | None = None,
        device: torch.device | None = None,
    ) -> None:
        """`device`: where to train, resolved by the caller (default: `config.device` resolved here).
        `resume="inexact"`: a folder whose weights and state disagree continues from its weights, optimizer anew."""
        self.config, self.task, self.run_dir, self.progress = config, task, Path(run_dir), progress
        self.world = world or World()
        make_dir(self.run_dir)
        self.device = device or distributed.train_device(config.device, self.world)
        configure(self.device)
        self.precision = resolve_precision(self.device, config.precision)  # "fp32", "bf16" or "fp16"
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.model = model.to(self.device)  # the module whose weights are saved
        self.ddp = distributed.data_parallel(self.model, self.device, self.world)  # None for one process
        forward = self.model if self.ddp is None else self.ddp
        self.forward = torch.compile(forward) if config.compile else forward  # what runs batches
        self.optimizer = make_optimizer(self.model, config)
        self.data_rng = torch.Generator().manual_seed(config.seed)
        self.step, self.best_val, self.train_seconds, self.tokens_seen = 0, math.inf, 0.0, 0
        self.step_seconds: list[float] = []  # duration of each step run by this process
        self.saved_step: int | None = None  # the step of the folder's last complete checkpoint
        self._signal: int | None = None
        self.diverged = ""  # the diagnosis once a step's loss or gradient norm is not finite
        self.reached = ""  # "train.stop_at met at step N" once an evaluation meets it
        self._stop = False  # every rank agrees on it after each step (a signal reached some rank)
        self._last_line = time.monotonic()  # when the last progress line was printed (no bar: see QUIET_S)
        self.log = MetricsLog(self.run_dir, config.tensorboard)  # checks tensorboard on every rank alike
        self.original = config  # train.time_budget: what a plan scales (`self.config` is the plan applied)
        self.plan = None
        if config.time_budget:
            if self.world.size > 1:
                raise UserError("--time (train.time_budget) trains in one process: under torchrun each rank would "
                                "plan on its own clock")  # fmt: skip
            self._follow(budget.first_plan(config))
        self.evaluated_at = -1  # the step of the last evaluation
        recorded = self._continue(restore(self, inexact=resume == "inexact")) if resume else None
        self.resumed_at = self.step  # the step training starts from (0 for a new run)
        self.attention = autotune.resolve(self, recorded)  # the backend chosen (None: no attention layers)
        self.attention_reused = self.attention is not None and self.attention == recorded

    def _continue(self, state: TrainerState) -> BackendChoice | None:
        """Go on from a resumed run's state (`train.resume.restore` loaded the rest) -> its attention record.
        A run that met train.stop_at stays finished while it asks the same."""
        self.step = self.saved_step = state.step
        self.best_val, self.train_seconds, self.tokens_seen = state.best_val, state.train_seconds, state.tokens_seen
        if self.config.stop_at and state.reached.startswith(f"{self.config.stop_at} met"):
            self.reached = state.reached
        if self.plan is not None and state.budget is not None:  # the schedule sized to the budget so far
            if state.budget.budget != self.original.time_budget:
                raise UserError(
                    f"this run was planned for a budget of {state.budget.budget:g} s; resume it with that budget "
                    f"(train.time_budget={state.budget.budget:g}), not {self.original.time_budget:g}"
                )
            self._follow(budget.measuring(state.budget, self.step))  # (one not made yet runs until it is)
        return state.attention

    # ---- the loop ------------------------------------------------------------
    def fit(self, until: int | None = None) -> FitResult:
        """Train to `max_iters` (or stop early after step `until`, saving a resumable state). With
        train.time_budget, max_iters is the plan's, which moves as the run measures its speed (`train.budget`)."""
        end = self.config.max_iters if until is None else min(until, self.config.max_iters)
        status = "finished"
        window: list[Step] = []  # the steps since the last logged line
        self.model.train()
        self.task.seek(self.step * self.config.grad_accum)  # a task whose batches follow each other: where they are
        with self._catch_signals(), self._bar(end) as bar:
            if not (self.run_dir / STATE).exists():  # a new run: step 0 is a multiple of eval_interval too
                self._evaluate(bar, initial=True)  # its loss before training; a checkpoint to fall back on
            while self.step < end and not self.reached:
                done = self._train_step()
                if self.diverged:
                    status = "diverged"
                    break
                window.append(done)
                self.step += 1
                if self.step % self.config.log_interval == 0 or self.step == end:
                    self._log_train(window, bar)
                    window = []
                if self.step % self.config.eval_interval == 0 or self.step == self.config.max_iters:
                    self._evaluate(bar)
                if self.plan is not None:
                    end = self._keep_to_budget(bar, until)
                bar.update(1)
                if self._stop:
                    status = "interrupted"
                    break
                if self.reached:  # train.stop_at: the run has answered its question
                    bar.write(f"step {self.step:>6}: {self.reached}: the run ends here")
            if status not in ("interrupted", "diverged") and self.step < self.config.max_iters and not self.reached:
                status = "stopped"
            if status in ("stopped", "interrupted"):
                self.save()  # a finished run was saved by its last evaluation; a diverged one keeps its last
        if self.world.main:
            self.plot()  # once per fit, not at every save: `tinyformer info RUN --plot` redraws it any time
        distributed.barrier(self.world)  # no rank leaves before rank 0 has written
        self.log.close()
        if self._signal is not None and status != "interrupted":  # it came after the last step: the run ended
            signal.raise_signal(self._signal)  # whole and saved; the caller's handler stops the command now
        signum = (self._signal or signal.SIGINT) if status == "interrupted" else 0  # another rank's: SIGINT
        return FitResult(status, self.step, self.best_val, self.train_seconds, self.diverged, signum)

    def _keep_to_budget(self, bar, until: int | None) -> int:
        """train.time_budget, after each step: the first plan once `budget.MEASURE` steps are timed, then a new
        last step from the latest step times at every step (a machine whose speed moves between evaluations
        still ends on time); when the budget is spent, end here. A run that ends at this step gets its last
        evaluation. -> the step the loop now ends at."""
        plan = self.plan
        if budget.over(plan, self.train_seconds):
            self._follow(dataclasses.replace(plan, max_iters=min(self.step, plan.max_iters)))
            bar.write(f"step {self.step:>6}: the time budget ({plan.budget:,.0f} s) is spent: the run ends here")
        elif plan.plans == 0 and len(self.step_seconds) - 2 >= budget.MEASURE:
            self._follow(budget.replan(plan, self.original, self.step, self.train_seconds, self._recent()))
            left = datetime.timedelta(seconds=self.plan.budget - self.train_seconds - self.plan.eval_seconds)
            bar.write(f"{self.plan.line()}; ends about {datetime.datetime.now() + left:%H:%M}")
        elif plan.plans and self.step < plan.max_iters:
            self._follow(budget.replan(plan, self.original, self.step, self.train_seconds, self._recent()))
        if self.step >= self.config.max_iters and self.evaluated_at != self.step:
            self._evaluate(bar)
        bar.total = self.config.max_iters if until is None else min(until, self.config.max_iters)
        return bar.total

    def _budget_evaluated(self, seconds: float) -> None:
        """An evaluation took `seconds` of the budget; before the checkpoint records the plan, the last step moves
        with the speed measured so far (not at the run's last step: its schedule has ended)."""
        plan = self.plan.evaluated(seconds)
        if plan.plans and 0 < self.step < plan.max_iters:
            plan = budget.replan(plan, self.original, self.step, self.train_seconds, self._recent())
        self._follow(plan)

    def _recent(self) -> list[float]:
        return self.step_seconds[2:][-50:]  # this process's latest step times, its first two left out

    def _follow(self, plan: budget.Plan) -> None:
        self.plan, self.config = plan, plan.apply(self.original)

    def _train_step(self) -> Step:
        """One optimizer step over `grad_accum` micro-batches."""
        c, world = self.config, self.world
        lr = lr_at(self.step, c)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        t0 = time.perf_counter()
        loss_sum, tokens, metrics = 0.0, 0, {}
        for micro in range(c.grad_accum):
            global_batch = self.task.train_batch(c.batch_size * world.size, self.data_rng)  # same on every rank
            batch = to_device(distributed.shard(global_batch, world), self.device)
            last = micro == c.grad_accum - 1
            sync = self.ddp.no_sync() if self.ddp is not None and not last else contextlib.nullcontext()
            with sync:  # DDP all-reduces gradients in the last micro-batch's backward only
                with autocast(self.device, self.precision):
                    loss, m = self.task.training_step(self.forward, batch)
                self._scale(loss / c.grad_accum).backward()
            loss_sum += loss.item() / c.grad_accum
            tokens += self.task.batch_tokens(batch)
            metrics = {k: metrics.get(k, 0.0) + v / c.grad_accum for k, v in m.items()}
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip and log the true gradients
        norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip if c.grad_clip > 0 else math.inf))
        keys = sorted(metrics)
        stop = float(self._signal is not None)
        total = distributed.all_sum([loss_sum, tokens, stop, norm, *(metrics[k] for k in keys)], world)
        loss_sum, tokens, self._stop, norm = total[0] / world.size, int(total[1]), total[2] > 0, total[3] / world.size
        metrics = {k: v / world.size for k, v in zip(keys, total[4:], strict=True)}
        overflow = self.scaler is not None and math.isfinite(loss_sum)  # fp16: the scaler skips an inf gradient
        if not (math.isfinite(loss_sum) and (math.isfinite(norm) or overflow)):  # stop before the update
            self.optimizer.zero_grad(set_to_none=True)
            rerun = functools.partial(self._forward_only, batch)
            self.diverged = guard.diagnose(self.step + 1, loss_sum, norm, self.model, rerun, lr, self.config.lr)
            return Step(loss_sum, tokens, 0.0, {})
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped if the fp16 gradients overflowed; the scale then shrinks
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        self.step_seconds.append(dt)
        self.train_seconds += dt
        self.tokens_seen += tokens
        return Step(loss_sum, tokens, dt, {"lr": lr, "grad_norm": norm, **metrics})

    def _scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def _forward_only(self, batch: Any) -> None:
        with autocast(self.device, self.precision):
            self.task.training_step(self.model, batch)

    # ---- evaluation, logging --------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """The task's evaluation, in eval mode without gradients (the task draws the same data every time)."""
        model = self.model if self.ddp is not None else self.forward  # every rank evaluates the same batches
        with inference(self.model), autocast(self.device, self.precision):
            return self.task.evaluate(model)

    def _evaluate(self, bar, initial: bool = False) -> None:
        """Evaluate, record and save; the weights become best.safetensors if they improved the task's score.
        `initial` (step 0 of a new run): recorded and saved, but untrained weights are never the best."""
        t0 = time.perf_counter()
        result = self.evaluate()
        self.evaluated_at = self.step
        if self.plan is not None:  # evaluations count against the budget
            self._budget_evaluated(time.perf_counter() - t0)
        val, score = result["loss"], result[self.task.select]
        improved = score < self.best_val and not initial
        if improved:
            self.best_val = score
        self._record({"split": "val", **result}, bar)
        if self.config.stop_at and not initial and target_met(self.config.stop_at, result):
            self.reached = f"{self.config.stop_at} met at step {self.step}"
        self.save(best=improved)  # best.safetensors in the same unit as the state that records best_val
        if not self.world.main:
            return
        mark = " (best, saved)" if improved else ""
        extra = "".join(f", {k} {v:.4f}" for k, v in result.items() if k != "loss" and isinstance(v, float))
        bar.write(
            f"step {self.step:>6}: val loss {val:.4f}{mark}{extra} | "
            f"{self.train_seconds:.0f} s training, eval {time.perf_counter() - t0:.1f} s"
        )
        self._last_line = time.monotonic()

    def _log_train(self, window: list[Step], bar) -> None:
        seconds = sum(s.seconds for s in window)
        tps = sum(s.tokens for s in window) / max(seconds, 1e-9)
        loss = sum(s.loss for s in window) / len(window)
        extra = {k: sum(s.metrics[k] for s in window) / len(window) for k in window[-1].metrics}
        self._record({"split": "train", "loss": loss, "tokens_per_s": tps, **extra}, bar)
        if self.world.main:
            bar.set_postfix(loss=f"{loss:.3f}", lr=f"{extra['lr']:.2e}", tok_s=f"{tps:,.0f}", refresh=False)
            if self.progress and bar.disable and time.monotonic() - self._last_line >= QUIET_S:
                print(
                    f"step {self.step:>6}: train loss {loss:.4f}, lr {extra['lr']:.2e}, {tps:,.0f} tokens/s", flush=True
                )
                self._last_line = time.monotonic()  # no bar (a log file, nohup): a line at least every QUIET_S

    def _record(self, row: dict, bar) -> None:
        if self.world.main:
            self.log.record({"step": self.step, **row, "train_seconds": round(self.train_seconds, 3)})

    # ---- checkpoints ------------------------------------------------------------
    def save(self, best: bool = False) -> None:
        """One checkpoint (`checkpoint.save_checkpoint`): the latest weights, everything needed to resume and,
        with `best`, these weights as best.safetensors (rank 0 only)."""
        if not self.world.main:
            return
        rng = {"torch": torch.get_rng_state(), "data": self.data_rng.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = TrainerState(
            step=self.step,
            best_val=self.best_val,
            train_seconds=self.train_seconds,
            tokens_seen=self.tokens_seen,
            optimizer=self.optimizer.state_dict(),
            rng=rng,
            precision=self.precision,
            processes=self.world.size,
            reached=self.reached,
            attention=self.attention,
            grad_scaler=None if self.scaler is None else self.scaler.state_dict(),
            budget=self.plan,
        )
        parts = {WEIGHTS: ckpt.weights_writer(self.model, self.step), STATE: ckpt.state_writer(state)}
        if best:
            parts[BEST] = ckpt.weights_writer(self.model)
        ckpt.save_checkpoint(self.run_dir, parts, self.step, last=self.saved_step)
        self.saved_step = self.step

    def plot(self) -> Path:
        """Draw loss.png from metrics.jsonl (what `tinyformer info RUN --plot` does for any run)."""
        return runfolder.plot_run(self.run_dir)

    # ---- signals and progress ---------------------------------------------------
    @contextlib.contextmanager
    def _catch_signals(self) -> Iterator[None]:
        """First SIGINT/SIGTERM: finish the step, save, return. A second one aborts. A signal ignored when the
        process started stays ignored (`tinyformer.interrupt`)."""

        def handler(signum, frame):
            if self._signal is not None:
                raise interrupt.Stopped(signum)
            self._signal = signum

        self._signal = None
        with interrupt.catching(handler):
            yield

    def _bar(self, end: int):
        from tqdm import tqdm

        return tqdm(
            total=end,
            initial=self.step,
            unit="step",
            dynamic_ncols=True,
            disable=None if self.progress and self.world.main else True,  # None: off when not a terminal
            mininterval=0.5,
        )
