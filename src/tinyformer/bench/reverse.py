"""Digit reversal, side by side: time to greedy exact match >= 0.99 and time per epoch, tinyformer vs the
course's chapter-20 encoder-decoder (`tinyformer.bench.reference.ChapterSeq2Seq`).

Both train on the chapter's pairs and are scored on its first 500 held-out pairs. The reference runs the
chapter's `main()` (`tinyformer.bench.reference`): a shuffled DataLoader of full-length padded pairs, Adam
with the Noam LambdaLR, greedy exact match after every epoch. Ours runs as `tinyformer train reverse` does:
the Trainer on the chapter's recipe (or `--config`), evaluating at its own `eval_interval` and writing its
checkpoints there.
Each side stops at exact match >= 0.99 or after `max_epochs`. Per side: the training time of each whole
epoch (evaluation excluded), and the time to the target = training + evaluation time up to the first
evaluation that reaches it (ours' checkpoint writes excluded; the wall time including them is kept too).
The two alternate, each in a fresh process; ratios are medians of the per-pair ratios. Where the CPU
multiplies bf16 natively, both run again in bf16, like with like: the chapter's loop with its autocast line on,
bf16 around the forward and the loss as the chapter runs on a GPU ("reference+bf16"), and ours with
`train.precision=bf16` ("tinyformer+bf16").

    tinyformer bench reverse [--repeats 3] [--max-epochs 15] [--config reverse_fast]
    python -m tinyformer.bench.reverse --impl reference --max-epochs 15   # one worker: one JSON line

The two sides' training loops are `reverse_sides.py`; this module sets them up alike, runs them in turn and
prints the comparison.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from tinyformer.bench.reverse_sides import TARGET, train_reference, train_tinyformer
from tinyformer.bench.workers import machine_line, run_worker

IMPLS = ("reference", "tinyformer", "reference+bf16", "tinyformer+bf16")  # +bf16: where the CPU has it natively
PAIRS = (("tinyformer", "reference"), ("tinyformer+bf16", "reference+bf16"))  # (ours, the reference it is timed by)
REFERENCE = "the course's chapter-20 encoder-decoder (fp32)"


def configs(path: str | None = None, precision: str | None = None, n_train: int = 0, n_val: int = 0):
    """-> (ours, the reference's): ours is the reverse recipe or the preset at `path` (`precision` overriding
    its train.precision); the reference's is the chapter's recipe, the default config. Both on the CPU and,
    checked here, scored on the same held-out pairs. `n_train`, `n_val` shrink both (tests)."""
    from tinyformer import config as cfg
    from tinyformer.errors import UserError
    from tinyformer.tasks import ReverseTask

    shared = ['train.device="cpu"']
    shared += [f"data.n_train={n_train}"] if n_train else []
    shared += [f"data.n_val={n_val}"] if n_val else []
    ours = cfg.resolve(ReverseTask.default_config(), [cfg.load_toml(path)] if path else [], shared)
    if n_train:  # tests: with fewer pairs, ours still evaluates once an epoch
        ours.train.eval_interval = max(1, n_train // ours.train.batch_size)
    if precision:
        ours.train.precision = precision
    ref = cfg.resolve(ReverseTask.default_config(), [], shared)
    held_out = {k: v for k, v in cfg.to_dict(ref.data).items() if k not in ("n_train", "sampling")}
    changed = [f"data.{k}" for k, v in held_out.items() if getattr(ours.data, k) != v]
    if changed:
        raise UserError(f"{path} changes {', '.join(changed)}: bench reverse scores both on the same held-out pairs")
    return ours, ref


def worker(impl: str, max_epochs: int, path: str | None = None, precision: str | None = None, **shrink) -> dict:
    """One side, trained in this process -> the JSON `Record.result` describes."""
    ours, ref = configs(path, "bf16" if impl == "tinyformer+bf16" else precision, **shrink)
    if impl.startswith("reference"):
        return train_reference(ref, max_epochs, bf16=impl == "reference+bf16")
    return train_tinyformer(ours, max_epochs, impl)


def _spawn(impl: str, max_epochs: int, path: str | None, precision: str | None) -> dict:
    args = ["--impl", impl, "--max-epochs", str(max_epochs)]
    args += (["--config", path] if path else []) + (["--precision", precision] if precision else [])
    return run_worker("tinyformer.bench.reverse", args, echo=True)


def _print_header(ours, ref, path: str | None, max_epochs: int, repeats: int) -> None:
    from tinyformer.device import describe_precision

    d, c = ref.data, ours.train
    print(
        f"digit reversal: {d.n_train:,} training pairs (ours: {ours.data.n_train:,}), the same {d.n_val:,} held-out "
        f"pairs; until greedy exact match >= {TARGET}, at most {max_epochs} epoch(s); {repeats} alternating pair(s), "
        "each side in a fresh process"
    )
    print(
        f"reference: {REFERENCE}: manual attention, DataLoader batch {ref.train.batch_size} padded to the full "
        f"length, Adam + Noam warmup {ref.train.warmup_iters}, greedy decoding without a KV cache after every epoch"
    )
    print(
        f"tinyformer: `tinyformer train reverse` ({path or 'chapter 20 recipe'}) through its "
        f"Trainer in {describe_precision(torch.device('cpu'), c.precision)}, batch {c.batch_size}, evaluating "
        f"every {c.eval_interval} steps"
    )
    print(machine_line())


def _cell(r: dict) -> str:
    return f"{r['to_target_s']:.1f} s ({r['epochs']:.3g} ep)" if r["reached"] else "not reached"


def _ratio(ours: float | None, ref: float | None) -> float | None:
    return ours / ref if ours and ref else None


def _print_pairs(rows: list[dict], pairs: list[tuple[str, str]]) -> None:
    names = [name for pair in pairs for name in pair]
    head = "".join(f" {name + ' s/epoch':>22}" for name in names)
    head += "".join(f" {ours + ' / ' + ref:>32}" for ours, ref in pairs)
    head += "".join(f" {name + ' to 0.99':>28}" for name in names)
    print(f"\n{'pair':>4}{head}")
    for i, r in enumerate(rows):
        cells = "".join(f" {r[name]['epoch_s'] or 0:>22.1f}" for name in names)
        for ours, ref in pairs:
            ratio = _ratio(r[ours]["epoch_s"], r[ref]["epoch_s"])
            cells += f" {ratio:>31.3f}x" if ratio else f" {'-':>32}"
        cells += "".join(f" {_cell(r[name]):>28}" for name in names)
        print(f"{i + 1:>4}{cells}")


def _median_ratio(rows: list[dict], key: str, ref: str = "reference", ours: str = "tinyformer") -> float | None:
    ratios = [_ratio(r[ours][key], r[ref][key]) for r in rows]
    ratios = [x for x in ratios if x is not None]
    return statistics.median(ratios) if ratios else None


def _times(ratio: float | None) -> str:
    return f"{ratio:.3f}x" if ratio is not None else "n/a (no pair in which both reached it)"


def _print_time_split(rows: list[dict], impls: tuple[str, ...]) -> None:
    """Each side's median time to the target, split into training and evaluation, and the wall time beside it."""
    for impl in impls:
        done = [r[impl] for r in rows if r[impl]["reached"]]
        if done:
            split = {k: statistics.median(x[k] for x in done) for k in ("train_s", "eval_s", "wall_s")}
            print(
                f"  {impl}: median {split['train_s']:.1f} s training + {split['eval_s']:.1f} s evaluation; "
                f"wall time with everything else (ours: checkpoints at each evaluation) {split['wall_s']:.1f} s"
            )


def run_reverse_benchmark(
    repeats: int = 3, max_epochs: int = 15, path: str | None = None, precision: str | None = None
) -> dict:
    """Alternate the sides `repeats` times, print the comparison, return the figures."""
    from tqdm import tqdm

    from tinyformer.device import native_bf16

    ours, ref = configs(path, precision)  # a bad preset fails here, before minutes of training
    impls = tuple(i for i in IMPLS if not i.endswith("+bf16") or native_bf16(torch.device("cpu")))
    pairs = [(o, r) for o, r in PAIRS if o in impls and r in impls]
    _print_header(ours, ref, path, max_epochs, repeats)
    rows = [
        {impl: _spawn(impl, max_epochs, path, precision) for impl in impls}
        for _ in tqdm(range(repeats), desc="bench reverse", unit="pair")
    ]
    _print_pairs(rows, pairs)
    figures = {"reference": REFERENCE, "config": path or "the chapter's recipe", "pairs": rows}
    print()
    for o, r in pairs:
        per_epoch, to_target = _median_ratio(rows, "epoch_s", r, o), _median_ratio(rows, "to_target_s", r, o)
        print(f"median of the per-pair ratios {o}/{r}: training time per epoch {_times(per_epoch)}")
        print(f"  time to exact match >= {TARGET} (training + evaluation time): {_times(to_target)}")
        suffix = "" if r == "reference" else "_bf16"
        figures |= {f"ratio_epoch_time{suffix}": per_epoch, f"ratio_time_to_target{suffix}": to_target}
    _print_time_split(rows, impls)
    return figures


def _main() -> None:
    from tinyformer.config import PRECISIONS

    p = argparse.ArgumentParser(description="one side of `tinyformer bench reverse`, trained in this process")
    p.add_argument("--impl", choices=IMPLS, required=True)
    p.add_argument("--max-epochs", type=int, default=15)
    p.add_argument("--config", help="ours: a reverse preset (default: the chapter's recipe)")
    p.add_argument("--precision", choices=PRECISIONS, help="ours: train.precision (default: the config's)")
    p.add_argument("--n-train", type=int, default=0, help=argparse.SUPPRESS)  # tests: fewer pairs for both
    p.add_argument("--n-val", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    shrink = dict(n_train=a.n_train, n_val=a.n_val)
    print(json.dumps(worker(a.impl, a.max_epochs, a.config, a.precision, **shrink)))


if __name__ == "__main__":
    _main()
