"""nanoGPT beside the speedrun study: its tuned CPU command run from a checkout, on our text split our way.

nanoGPT reads a character dataset as `data/NAME/{train,val}.bin` (uint16 ids) and `meta.pkl`; `nanogpt_data`
writes the study's text so. It prints an evaluation line every `eval_interval` steps and each iteration's
time; `nanogpt_curve` reads that log as the study reads its own runs (training seconds, evaluations left out).
`preset_and_nanogpt` runs the shipped preset and nanoGPT in turn, so their ratio is measured side by side.
"""

from __future__ import annotations

import pickle
import re
import statistics
import subprocess
import sys
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.experiments.speedrun_cells import Group, Point, preset_spec, train_groups
from tinyformer.files import make_dir, write_text

# nanoGPT's CPU command from its README, tuned (a 10x learning rate, a short warmup), evaluated every 100 steps
NANOGPT_ARGS = (
    "config/train_shakespeare_char.py --device=cpu --compile=False --block_size=64 --batch_size=12 --n_layer=4 "
    "--n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --learning_rate=3e-3 "
    "--warmup_iters=50 --eval_interval=100 --log_interval=1"
).split()
NANOGPT_QUICK = ["--max_iters=20", "--lr_decay_iters=20", "--eval_interval=10", "--eval_iters=2"]
NANOGPT_TOKENS = 12 * 64  # tokens per iteration of that command: batch_size x block_size
DATASET = "tinyformer_char"  # the folder under the checkout's data/ that holds the text in nanoGPT's format


def nanogpt_data(checkout: Path, text: str) -> Path:
    """Write `text` in nanoGPT's character format (sorted characters, the first 90% to train.bin, uint16 ids,
    meta.pkl with vocab_size, itos and stoi) under checkout/data/DATASET; -> that folder."""
    import numpy as np

    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(len(text) * 0.9)  # the same split as ours: the last 10% of the characters are the val text
    folder = make_dir(checkout / "data" / DATASET)
    ids[:n].tofile(folder / "train.bin")
    ids[n:].tofile(folder / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))
    return folder


STEP = re.compile(r"^step (\d+): train loss [\d.]+, val loss ([\d.]+)")
ITER = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")


def nanogpt_curve(log: str) -> list[Point]:
    """nanoGPT's printed log -> (training seconds, val loss) at each evaluation. Its `time` of an iteration that
    starts with an evaluation (and a checkpoint) includes them; that one counts as the median iteration, so the
    seconds, like ours, leave evaluations out. The val loss printed at step N is that of the first N steps."""
    vals = {int(m[1]): float(m[2]) for m in map(STEP.match, log.splitlines()) if m}
    times = {int(m[1]): float(m[2]) / 1e3 for m in map(ITER.match, log.splitlines()) if m}
    if not vals or not times:
        raise UserError("nanoGPT's log has no 'step N: ... val loss' or 'iter N: ... time' lines; see its log file")
    every = sorted(vals)
    plain = statistics.median(dt for i, dt in times.items() if i not in vals)
    dt = [plain if i in vals else times.get(i, plain) for i in range(max(every) + 1)]
    return [(sum(dt[:n]), vals[n], n) for n in every]


def nanogpt_speed(log: str) -> float:
    """Tokens per second of nanoGPT's run: its median iteration's."""
    times = [float(m[2]) / 1e3 for m in map(ITER.match, log.splitlines()) if m]
    return NANOGPT_TOKENS / statistics.median(times)


def nanogpt_run(checkout: Path, command: list[str], log_file: Path) -> str:
    """nanoGPT's `command` run in `checkout` (unless `log_file` already holds a finished run) -> its log."""
    if not log_file.is_file() or "iter " not in log_file.read_text():
        out = f"--out_dir={log_file.with_suffix('').resolve()}"
        done = subprocess.run([sys.executable, *command[1:], out], cwd=checkout, capture_output=True, text=True)
        if done.returncode:
            write_text(log_file.with_suffix(".err"), done.stdout + done.stderr)
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"nanoGPT ended with exit code {done.returncode}: {last}")
        write_text(log_file, done.stdout)
    return log_file.read_text()


def nanogpt_commit(checkout: Path) -> str:
    """The commit of the nanoGPT checkout the user named (the report records it)."""
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def preset_and_nanogpt(checkout: Path | None, text: str, seeds, folder: Path, quick: bool, data):
    """The preset's runs and, from a nanoGPT checkout, nanoGPT's command as many times, in turn (ours, theirs,
    ours, ...): the ratio the study answers is measured side by side. -> (preset, nanoGPT or None, the
    checkout's commit, the command)."""
    spec = preset_spec()
    if checkout is None:
        return train_groups([spec], seeds, folder, quick, data)[0], None, "", []
    if not (checkout / "train.py").is_file() or not (checkout / "model.py").is_file():
        raise UserError(f"--nanogpt {str(checkout)!r}: no nanoGPT checkout there (train.py and model.py)")
    nanogpt_data(checkout, text)
    command = ["python", "train.py", *NANOGPT_ARGS, *(NANOGPT_QUICK if quick else []), f"--dataset={DATASET}"]
    ours, curves, speeds = [], [], []
    for k, seed in enumerate(seeds):
        ours.append(train_groups([spec], (seed,), folder, quick, data)[0])
        log = nanogpt_run(checkout, command, folder / f"nanogpt-{k}.log")
        curves.append(nanogpt_curve(log))
        speeds.append(nanogpt_speed(log))
    preset = Group(spec[0], spec[2], [g.curves[0] for g in ours], [g.speeds[0] for g in ours])
    nano = Group("nanoGPT", "nanoGPT's tuned CPU command", curves, speeds)
    return preset, nano, nanogpt_commit(checkout), command
