"""Making the sources: a plan with an estimate for each before anything starts, the sources made in parallel
worker processes, the time left while they run, and a report card at the end.

The estimate of a source is the wall time its last stamp recorded, scaled by the speed this machine shows in a few
seconds of calibration (`calibrate`: steps per second of a fixed training step) against the speed recorded with that
stamp (a stamp calibrated on another workload is not scaled). The committed guide carries a stamp for every source,
so a fresh clone plans the whole build; a source never stamped has no estimate and the plan says so.

Each source runs in a forked worker (`jobs` at a time, the machine's cores by default), whose torch uses
cores // jobs threads: two small trainings on one thread each do twice the work of one, where one training
on two threads does about 1.5 times (measured on 2 cores). A source whose figures are times for the reader
(a benchmark, `make demo`'s training) runs alone, on every core, once nothing else is left to run beside it.
A worker's output goes to runs/lab-logs/; the terminal gets one line when a source starts or ends, with the
time left. Ctrl-C stops every worker: each training saves its state, and the next build resumes it.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tinyformer import interrupt
from tinyformer.errors import UserError
from tinyformer.files import make_dir, write_text

CALIBRATION_SECONDS = 2.0
CALIBRATION = "minigpt 4x128, 16x64 tokens, fp32"  # what `calibrate` times: a stamp of another is not scaled
CARD = "lab-card.md"


def calibrate(seconds: float = CALIBRATION_SECONDS) -> float:
    """This machine's speed: optimizer steps per second of a fixed training step (`CALIBRATION`, on the threads
    this process uses), one over the median step time over about `seconds`, after two warm-up steps. A GPT of
    the lab's own size in fp32: the tiny one timed before (2 layers x 64 wide) read 17% slower on a machine
    that trained the reversal and the seed recipe 4-5% faster, its steps too short to stand for the work."""
    import statistics

    import torch

    from tinyformer.models.gpt import GPTConfig, MiniGPT

    g = torch.Generator().manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=65, block_size=64, n_embd=128, n_head=4, n_layer=4, dropout=0.0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(65, (16, 64), generator=g)

    def step() -> float:
        start = time.perf_counter()
        loss = model(x, x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - start

    step(), step()
    times: list[float] = []
    while sum(times) < seconds or len(times) < 5:
        times.append(step())
    return round(1 / statistics.median(times), 2)


def calibrate_in_worker(workers: int, seconds: float = CALIBRATION_SECONDS) -> float:
    """`calibrate` in a forked process with the threads each of `workers` will have, so this process's torch
    keeps its own settings."""
    read, write = os.pipe()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import torch

            os.close(read)
            torch.set_num_threads(threads_for(workers))
            os.write(write, str(calibrate(seconds)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    if not text:
        raise UserError("lab: the calibration of this machine's speed failed")
    return float(text)


def threads_for(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def estimate(record: dict, speed: float | None) -> float | None:
    """Seconds a source should take here: its stamp's wall time, scaled by the two calibrations; unscaled when
    the stamp was calibrated on another workload (`CALIBRATION`), whose steps per second are not comparable."""
    wall, then = record.get("wall_s"), record.get("speed")
    if wall is None or not then or not speed:  # a source made in 0.0 s has an estimate: 0
        return None
    return wall * then / speed if record.get("calibration") == CALIBRATION else wall


@dataclass
class Job:
    name: str
    needs: tuple[str, ...]  # sources that must be complete before it starts
    seconds: float | None  # the estimate, None when never stamped
    alone: bool = False  # timed for the reader: runs with nothing beside it, on every core


def makespan(jobs: list[Job], workers: int, busy: dict[str, float] | None = None) -> float:
    """Wall seconds `run_jobs` should take: the jobs that run side by side, then those that run alone one after
    the other, then what needs those (views of a timed run). `busy`: jobs running now, with their seconds left.
    A job with no estimate counts as 0."""
    alone = [j for j in jobs if j.alone]
    late = [j for j in jobs if not j.alone and any(n == a.name for a in alone for n in j.needs)]
    together = [j for j in jobs if not j.alone and j not in late]
    solo = sum(j.seconds or 0.0 for j in alone)
    return _side_by_side(together, workers, busy) + solo + _side_by_side(late, workers)


def _side_by_side(jobs: list[Job], workers: int, busy: dict[str, float] | None = None) -> float:
    """Wall seconds to run `jobs` on `workers`, longest ready job first, each waiting for what it needs."""
    busy = dict(list((busy or {}).items())[:workers])
    names = {j.name for j in jobs} | set(busy)
    done_at = dict(busy)  # job -> when it ends
    free = [0.0] * (workers - len(busy)) + list(busy.values())  # when each worker is free
    heapq.heapify(free)
    todo = list(jobs)
    while todo:
        t = heapq.heappop(free)
        ready = [j for j in todo if all(n not in names or done_at.get(n, math.inf) <= t for n in j.needs)]
        if not ready:
            later = [v for v in done_at.values() if v > t]
            if not later:
                break  # what they need is never made
            heapq.heappush(free, min(later))
            continue
        job = max(ready, key=lambda j: j.seconds or 0.0)
        todo.remove(job)
        done_at[job.name] = t + (job.seconds or 0.0)
        heapq.heappush(free, done_at[job.name])
    return max(done_at.values(), default=0.0)


def minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f} min"


def plan_lines(jobs: list[Job], workers: int, speed: float) -> list[str]:
    known = [j for j in jobs if j.seconds is not None]
    many = "s" if len(jobs) != 1 else ""
    lines = [f"lab: plan: {len(jobs)} source{many} to make, {workers} at a time (this machine: {speed:.1f} steps/s)"]
    lines += [f"lab:   {minutes(j.seconds):>9}  {j.name}" for j in jobs]
    total = makespan(jobs, workers)
    unknown = len(jobs) - len(known)
    lines.append(
        f"lab: estimated {minutes(total)} of wall time"
        + (f", plus {unknown} source{'s' if unknown > 1 else ''} never measured (?)" if unknown else "")
        + f" ({minutes(sum(j.seconds for j in known))} of work)"
    )
    return lines


@dataclass
class Made:
    name: str
    seconds: float
    planned: float | None
    code: int
    log: Path | None = None


@dataclass
class Outcome:
    made: list[Made] = field(default_factory=list)
    failed: list[Made] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # never started: something they need failed
    elapsed: float = 0.0
    planned: float | None = None
    workers: int = 1
    speed: float | None = None


def say_now(line: str) -> None:
    print(line, flush=True)  # a line as it happens, also when the output is a file


def run_jobs(
    jobs: list[Job],
    work: Callable[[str], None],
    workers: int,
    logs: Callable[[str], Path] | None,
    speed: float,
    say: Callable[[str], None] = say_now,
) -> Outcome:
    """Run `work(name)` for every job in a forked worker, `workers` at a time, longest ready first; with
    `logs`, each worker's output goes to `logs(name)`. Prints one line per start and end with the time left."""
    out = Outcome(workers=workers, speed=speed, planned=makespan(jobs, workers))
    todo, running, finished, names = list(jobs), {}, set(), {j.name for j in jobs}
    start = time.monotonic()
    try:
        while todo or running:
            ready = [j for j in todo if all(n in finished or n not in names for n in j.needs)]
            together = [j for j in ready if not j.alone]
            if not together and not running and ready:  # nothing else can run: the next timed job, on every
                together = [ready[0]]  # core (what becomes ready while it runs needs it, so waits for it)
            while together and len(running) < workers:
                job = max(together, key=lambda j: j.seconds if j.seconds is not None else float("inf"))
                together.remove(job)
                todo.remove(job)
                threads = threads_for(1 if job.alone else workers)
                pid = _fork(work, job.name, logs(job.name) if logs else None, threads)
                running[pid] = (job, time.monotonic())
                say(f"lab: start {job.name} (plan {minutes(job.seconds)}{', alone' if job.alone else ''})")
                if job.alone:
                    break
            if not running:
                out.skipped = [j.name for j in todo]  # something they need failed
                break
            pid, status = os.wait()
            job, began = running.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            made = Made(job.name, time.monotonic() - began, job.seconds, code, logs(job.name) if logs else None)
            if code in (130, 143):  # a worker stopped by a signal (it saved): the build stops
                raise interrupt.Stopped(code - 128)
            (out.made if code == 0 else out.failed).append(made)
            if code == 0:
                finished.add(job.name)
            now = time.monotonic()
            busy = {j.name: max(0.0, (j.seconds or 0.0) - (now - t)) for j, t in running.values()}
            left = makespan(todo, workers, busy)
            unknown = sum(j.seconds is None for j in todo) + sum(j.seconds is None for j, _ in running.values())
            say(
                f"lab: {'done' if code == 0 else f'FAILED (exit {code})'} {job.name} in {minutes(made.seconds)} "
                f"(plan {minutes(job.seconds)}); {len(out.made)}/{len(jobs)} made, "
                f"{minutes(now - start)} so far, about {minutes(left)} left"
                + (f" plus {unknown} never measured" if unknown else "")
            )
    except KeyboardInterrupt:  # workers are in process groups of their own: they hear it from here, once, as
        for pid in list(running):  # SIGTERM, which a worker obeys however the build was started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # its training saves, then it ends
        for pid in list(running):
            os.waitpid(pid, 0)
        raise
    out.elapsed = time.monotonic() - start
    return out


def _stopped(signum: int, frame) -> None:
    raise interrupt.Stopped(signum)


def _fork(work: Callable[[str], None], name: str, log: Path | None, threads: int) -> int:
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    os.setpgid(0, 0)  # a Ctrl-C at the terminal reaches the build alone, which passes it on once (a second aborts)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # a build run outside the CLI: SIGTERM unwinds here too
        signal.signal(signal.SIGTERM, _stopped)
    code = 1
    try:
        if log is not None:
            fd = os.open(make_dir(log.parent) / log.name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1), os.dup2(fd, 2)
            sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115 (lives until _exit)
            sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        import torch

        torch.set_num_threads(threads)
        work(name)
        code = 0
    except KeyboardInterrupt as e:
        code = 128 + interrupt.signum_of(e)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def card(out: Outcome, headlines: dict[str, str], runs: Path) -> Path:
    """The report card under `runs`: every source made, its headline figure, its time against its plan, the
    total (Markdown, and the times as a PNG beside it)."""
    from tinyformer.plots import pyplot

    rows = sorted(out.made + out.failed, key=lambda m: -m.seconds)
    lines = [
        "# The lab's report card",
        "",
        f"{len(out.made)} sources made, {len(out.failed)} failed, {len(out.skipped)} not started, "
        f"{out.workers} at a time; wall time {minutes(out.elapsed)} against a plan of {minutes(out.planned)} "
        f"(this machine's calibration: {out.speed} steps/s).",
        "",
        "| source | headline | minutes | planned | exit |",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in rows:
        planned = "?" if m.planned is None else f"{m.planned / 60:.1f}"
        lines.append(f"| {m.name} | {headlines.get(m.name, '')} | {m.seconds / 60:.1f} | {planned} | {m.code} |")
    lines += ["", "![minutes per source, made and planned](lab-card.png)", ""]
    if out.skipped:
        lines += [f"Not started (something they read failed): {', '.join(out.skipped)}.", ""]
    path = runs / CARD
    write_text(path, "\n".join(lines))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(rows) + 1.2))
    names = [m.name for m in rows][::-1]
    ax.barh(names, [m.seconds / 60 for m in rows][::-1], color="#4c72b0", label="made")
    planned = [(i, m.planned / 60) for i, m in enumerate(rows[::-1]) if m.planned is not None]
    if planned:
        ax.scatter([p for _, p in planned], [i for i, _ in planned], color="#dd8452", zorder=3, label="planned")
    ax.set_xlabel("minutes")
    ax.set_title(f"lab build: {minutes(out.elapsed)} of wall time, {out.workers} at a time")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(runs / "lab-card.png", dpi=110)
    plt.close(fig)
    write_text(runs / "lab-card.json", json.dumps(summary(out), indent=1) + "\n")
    return path


def summary(out: Outcome) -> dict:
    return {
        "elapsed_s": round(out.elapsed, 1),
        "planned_s": None if out.planned is None else round(out.planned, 1),
        "workers": out.workers,
        "speed": out.speed,
        "made": len(out.made),
        "unplanned": sum(m.planned is None for m in out.made),  # made without an estimate (never stamped)
        "failed": [m.name for m in out.failed],
    }
