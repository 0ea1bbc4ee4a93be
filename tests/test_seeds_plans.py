"""Issue 72, seeds, plans, `--time` and `api.train(set=...)`: a seed the check passes seeds every generator the run
derives from it (evaluation's seed + 1, the fresh batches' (seed + 1) * 1,000,003 + batches, the reversal task's
epochs, an `--inexact` resume's seed + step) without a crash, and a small one derives exactly as before; a
checkpoint's `--time` plan is a typed `Plan`, checked on load (a crafted one is one line naming the file and the
field); `--time` sizes a run whose `train.max_iters` is below its measuring steps; `info` and `api.summary` read
the plan; `set=` stores Python values exactly and refuses other types in one line."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_run_config
from tinyformer import config as cfg
from tinyformer.errors import UserError
from tinyformer.runfolder import STATE, read_state
from tinyformer.runs import train_run
from tinyformer.tasks import GPTTask, get_task
from tinyformer.tasks.gpt import FRESH
from tinyformer.tasks.reverse import epoch_batch
from tinyformer.train import checkpoint as ckpt
from tinyformer.train.trainer import Trainer

SRC = Path(__file__).resolve().parents[1] / "src" / "tinyformer"


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> tuple[Path, Path]:
    """(a tiny gpt run of 2 steps, its text): trained once, copied by each test that changes it."""
    root = tmp_path_factory.mktemp("two_steps")
    text = root / "slice.txt"
    text.write_text(("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 200), encoding="utf-8")
    config = tiny_run_config(text, max_iters=2, eval_interval=2, backend="sdpa")
    train_run(config, GPTTask, root / "run", progress=False)
    return root / "run", text


def copy_of(two_steps, tmp_path: Path) -> Path:
    return Path(shutil.copytree(two_steps[0], tmp_path / "run"))


# ---- seeds ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed, batches", [(2**64 - 1, "fixed"), (10**14, "fresh"), (2**64 - 1, "fresh")])
def test_a_seed_the_check_passes_evaluates(two_steps, seed, batches):
    """Evaluation seeds a generator with seed + 1 (fixed) or (seed + 1) * 1,000,003 + batches drawn (fresh):
    before, 2**64 - 1 and 10**14 passed the check and crashed the first evaluation (ValueError: overflow)."""
    config = tiny_run_config(two_steps[1], seed=seed, eval_batches=batches, eval_iters=1)
    task = GPTTask.prepare(config)
    task.seek(3)
    scores = task.evaluate(task.build_model())
    assert all(v == v and v > 0 for v in scores.values())


def test_a_run_with_the_largest_seed_trains_past_its_first_evaluation(two_steps, tmp_path):
    config = tiny_run_config(two_steps[1], seed=10**14, eval_batches="fresh", max_iters=1, eval_iters=1)
    result, _ = train_run(config, GPTTask, tmp_path / "run", progress=False)
    assert result.status == "finished" and read_state(tmp_path / "run" / STATE).step == 1


def test_small_seeds_derive_the_same_generators_as_before(two_steps, monkeypatch):
    """The seeds the guide's runs use (1337, 0) seed the very generators they seeded before the fold."""
    seen: list[int] = []
    monkeypatch.setattr(GPTTask, "mean_loss", lambda self, model, split, seed: seen.append(seed) or 1.0)
    for seed, batches in ((1337, "fixed"), (1337, "fresh"), (2**64 - 1, "fixed"), (2**64 - 1, "fresh")):
        task = GPTTask.prepare(tiny_run_config(two_steps[1], seed=seed, eval_batches=batches))
        task.seek(5)
        task.evaluate(None)
    top = (2**64) * FRESH + 5  # (2**64 - 1 + 1) * FRESH + 5, folded
    assert seen == [1338, 1338 * FRESH + 5, 1338 * FRESH + 6, 0, top % 2**64, (top + 1) % 2**64]
    order = torch.randperm(40, generator=torch.Generator().manual_seed(3 * 1_000_003 + 0))
    assert torch.equal(epoch_batch(40, 8, 2, 3), order[16:24])  # the reversal task's epochs: as before


def test_the_reversal_tasks_epochs_take_every_seed_the_check_passes():
    """seed * 1,000,003 + epoch: before, a seed past 2**64 / 1,000,003 crashed the first batch."""
    for seed in (2**64 - 1, 10**14, -(2**63)):
        rows = epoch_batch(40, 8, 7, seed)
        assert rows.shape == (8,) and len(set(rows.tolist())) == 8


def test_a_reversal_data_seed_numpy_cannot_take_is_refused_at_the_check():
    """data.seed seeds numpy's generator (the digits), which takes no negative seed: before, -1 passed the config
    and crashed the task's data (ValueError: expected non-negative integer)."""
    defaults = get_task("reverse").default_config()
    with pytest.raises(UserError) as e:
        cfg.resolve(defaults, [], ["data.seed=-1"])
    assert str(e.value) == "data.seed=-1 is outside the range a generator takes, [0, 2**64)"
    assert cfg.resolve(defaults, [], [f"data.seed={2**64 - 2}"]).data.seed == 2**64 - 2  # its held-out seed: + 1


def test_an_inexact_resume_reseeds_with_any_seed(two_steps, tmp_path):
    """--inexact reseeds with seed + step: before, seed 2**64 - 1 overflowed there."""
    run_dir = copy_of(two_steps, tmp_path)
    config = tiny_run_config(two_steps[1], seed=2**64 - 1, max_iters=4, eval_interval=2, backend="sdpa")
    task = GPTTask.prepare(config)
    state = read_state(run_dir / STATE)
    ckpt.save_state(dataclasses.replace(state, step=1), run_dir / STATE)  # the weights stay at step 2
    trainer = Trainer(task.build_model(), task, config.train, run_dir, resume="inexact", progress=False)
    assert trainer.step == 2
