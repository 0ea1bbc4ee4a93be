"""Issue 72, seeds, plans, `--time` and `api.train(set=...)`: a seed the check passes seeds every generator the run
derives from it (evaluation's seed + 1, the fresh batches' (seed + 1) * 1,000,003 + batches, the reversal task's
epochs, an `--inexact` resume's seed + step) without a crash, and a small one derives exactly as before; a
checkpoint's `--time` plan is a typed `Plan`, checked on load (a crafted one is one line naming the file and the
field); `--time` sizes a run whose `train.max_iters` is below its measuring steps; `info` and `api.summary` read
the plan; `set=` stores Python values exactly and refuses other types in one line."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import types
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import user_error
from tests.conftest import tiny_run_config
from tests.train.test_budget import Clock, CostlyEval
from tinyformer import api, runfolder
from tinyformer import config as cfg
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.runfolder import STATE, read_state
from tinyformer.runs import train_run
from tinyformer.tasks import GPTTask, get_task
from tinyformer.tasks.gpt import FRESH
from tinyformer.tasks.reverse import epoch_batch
from tinyformer.train import budget
from tinyformer.train import checkpoint as ckpt
from tinyformer.train import trainer as trainer_module
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


# ---- the plan in trainer_state.pt ------------------------------------------------------------------------------
PLAN = {"budget": 6.0, "max_iters": 2530, "warmup_iters": 84, "eval_interval": 127, "step_s": 0.002, "eval_s": 0.03}
PLAN |= {"eval_seconds": 0.12, "evals": 4, "plans": 54}


def with_plan(run_dir: Path, plan) -> Path:
    """trainer_state.pt of `run_dir` with `plan` as its "budget" entry, as a file holds it."""
    data = torch.load(run_dir / STATE, weights_only=True) | {"budget": plan}
    torch.save(data, run_dir / STATE)
    return run_dir / STATE


@pytest.mark.parametrize(
    "plan, says",
    [
        ("60s", "'budget' is a str, not a plan (a dict)"),
        ({k: v for k, v in PLAN.items() if k != "max_iters"}, "'budget.max_iters' is missing"),
        (PLAN | {"eval_interval": 0}, "'budget.eval_interval' is 0; it must be an int from 1 below 2**63"),
        (PLAN | {"max_iters": "2530"}, "'budget.max_iters' is '2530'; it must be an int from 0 below 2**63"),
        (PLAN | {"max_iters": 2.5}, "'budget.max_iters' is 2.5; it must be an int from 0 below 2**63"),
        (PLAN | {"plans": True}, "'budget.plans' is True; it must be an int from 0 below 2**63"),
        (PLAN | {"warmup_iters": -1}, "'budget.warmup_iters' is -1; it must be an int from 0 below 2**63"),
        (PLAN | {"max_iters": 2**70}, f"'budget.max_iters' is {2**70}; it must be an int from 0 below 2**63"),
        (PLAN | {"budget": 0}, "'budget.budget' is 0; it must be a number of seconds above 0"),
        (PLAN | {"step_s": float("nan")}, "'budget.step_s' is nan; it must be a finite number >= 0"),
        (PLAN | {"eval_seconds": [1.0]}, "'budget.eval_seconds' is [1.0]; it must be a finite number >= 0"),
    ],
)
def test_a_crafted_plan_is_one_line_naming_the_file_and_the_field(two_steps, tmp_path, plan, says):
    path = with_plan(copy_of(two_steps, tmp_path), plan)
    with pytest.raises(UserError) as e:
        read_state(path)
    assert str(e.value) == f"{path} does not hold a trainer state: {says}"


def test_resuming_or_showing_a_run_with_a_crafted_plan_is_exit_2(two_steps, tmp_path, capsys):
    """Before: a KeyError traceback (a plan with a key of its own), or a line naming train.eval_interval, not
    the file."""
    run_dir = copy_of(two_steps, tmp_path)
    for plan, field in ((PLAN | {"budget": 60.0, "eval_interval": 0}, "eval_interval"), ({"x": 1}, "budget")):
        path = with_plan(run_dir, plan)
        resume = ["train", "gpt", "--resume", str(run_dir), "--time", "60s", "--set", "train.max_iters=4"]
        for args in (resume, ["info", str(run_dir)]):
            line = user_error(capsys, *args)
            assert f"{path} does not hold a trainer state: 'budget" in line and field in line


def test_an_old_checkpoints_plan_loads_as_a_typed_plan_and_is_written_back_the_same(two_steps, tmp_path):
    """As the Trainer wrote it (a dict: `dataclasses.asdict(plan)`), and as one written before `evals` and
    `plans` existed (their defaults)."""
    run_dir = copy_of(two_steps, tmp_path)
    older = {k: v for k, v in PLAN.items() if k not in ("evals", "plans")}
    for plan in (PLAN, older):
        state = read_state(with_plan(run_dir, plan))
        assert state.budget == budget.Plan(**plan) and type(state.budget) is budget.Plan
        assert state.to_dict()["budget"] == dataclasses.asdict(budget.Plan(**plan))
        ckpt.save_state(state, run_dir / STATE)
        assert torch.load(run_dir / STATE, weights_only=True)["budget"] == dataclasses.asdict(state.budget)


def test_nothing_reads_the_plan_by_string_key():
    """The plan is a `Plan`: `state.budget["max_iters"]` or `.get(...)` in the package, its tools or the
    notebooks' code reads a dict."""
    root = SRC.parents[1]
    code = [*SRC.rglob("*.py"), *(root / "tools").rglob("*.py"), *(root / "docs" / "lab" / "notebooks").glob("*.py")]
    found = [
        f"{p.relative_to(root)}:{n}"
        for p in sorted(code)
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.budget(\[|\.get\(| or \{\})|Plan\(\*\*", line)
    ]
    assert found == []


# ---- --time with train.max_iters -------------------------------------------------------------------------------
def test_time_trains_for_its_budget_when_max_iters_is_below_the_measuring(tmp_path, monkeypatch):
    """`--time 3s` with `train.max_iters=3`: the budget sizes the run, max_iters only the shape it scales.
    Before, the run ended at step 3, before its first plan (after 14 measured steps), the budget ignored."""
    clock = Clock(0.1)
    fake = types.SimpleNamespace(perf_counter=clock.perf_counter, monotonic=clock.monotonic)
    monkeypatch.setattr(trainer_module, "time", fake)
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.0, backend="sdpa"))
    x = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(1))
    config = cfg.TrainConfig(max_iters=3, warmup_iters=0, eval_interval=100, eval_iters=1, device="cpu", time_budget=3)
    trainer = Trainer(model, CostlyEval(x, clock, 0.0), config, tmp_path, progress=False)
    result = trainer.fit()
    assert result.status == "finished" and trainer.plan.plans >= 1 and result.step == trainer.plan.max_iters > 3
    assert 0.95 * 3 <= trainer.train_seconds + trainer.plan.eval_seconds <= 3 * 1.001
    rows = map(json.loads, (tmp_path / runfolder.METRICS).read_text().splitlines())
    evals = [r["step"] for r in rows if r.get("split") == "val"]
    assert evals == [0, result.step]  # step 0's, and one at the planned end (the config had none before its end)
    unplanned = budget.Plan(3.0, 3, 0, 3)
    assert budget.measuring(unplanned, 5).max_iters == 5 + budget.MEASURE + 3  # resumed before its first plan
    assert budget.measuring(dataclasses.replace(unplanned, plans=1), 5).max_iters == 3  # a plan made is kept


# ---- info and api.summary read the plan --------------------------------------------------------------------------
def test_info_and_summary_read_the_plan_of_an_interrupted_time_run(two_steps, tmp_path):
    """Before: "step 2/2" and "(finished)" at step 2 of a 2,530-step plan."""
    from tinyformer.experiments.runner import finished

    run_dir = copy_of(two_steps, tmp_path)
    with_plan(run_dir, PLAN)
    run = api.load(run_dir)
    assert f"{run_dir}: gpt, step 2/2530 (unfinished: train it again to go on)" in api.summary(run)
    assert "task gpt, step 2/2530 planned for 6 s\n" in api.info(run) and not finished(run_dir)
    with_plan(run_dir, PLAN | {"max_iters": 2})  # the budget spent at step 2: the plan ends there
    assert "step 2/2 (finished)" in api.summary(api.load(run_dir)) and finished(run_dir)


# ---- api.train(set=...) ---------------------------------------------------------------------------------------
EXACT = ["🙂", 'say "hi"', "back\\slash", "tab\tnew\nline", "\x00\x1f\x7f", "'''\"\"\"", "1", "true", "a=b", "\ufeff"]


def resolved(values: dict) -> cfg.RunConfig:
    return cfg.resolve(GPTTask.default_config(), [], api.overrides(values))


def test_set_stores_python_values_exactly(tmp_path):
    """Before: "🙂" was stored as the text "\\ud83d\\ude42" with its quotes (json.dumps's escapes are not TOML's),
    a Path was a TypeError, DEL a stored string with its quotes."""
    for text in EXACT:
        assert resolved({"sample.prompt": text}).sample.prompt == text
    every = "".join(map(chr, [*range(1, 0xD800), *range(0xE000, 0x110000)]))  # every character but surrogates
    assert resolved({"sample.prompt": every}).sample.prompt == every
    config = resolved({"data.path": tmp_path / "my text.txt", "train.lr": 1e-05, "train.compile": False})
    assert config.data.path == str(tmp_path / "my text.txt") and config.train.lr == 1e-05
    assert resolved({"model.n_layer": 2, "train.cooldown": 1}).train.cooldown == 1.0


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, b"x", (1,), object()])
def test_set_refuses_any_other_type_in_one_line(value):
    with pytest.raises(UserError) as e:
        api.overrides({"sample.prompt": value})
    assert str(e.value) == (
        f"set['sample.prompt'] is a {type(value).__name__}; a value of set= is a str, int, float, bool or Path"
    )
    with pytest.raises(UserError, match="is not a config key"):
        api.overrides({3: 1})


def test_train_with_set_stores_an_emoji_prompt_as_it_is(two_steps, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(two_steps[1].read_text(encoding="utf-8") + "🙂\n", encoding="utf-8")
    sets = {"model.block_size": 16, "model.n_layer": 1, "model.n_head": 2, "model.n_embd": 16, "train.max_iters": 1}
    sets |= {"train.batch_size": 2, "train.eval_iters": 1, "train.device": "cpu", "sample.tokens": 3}
    run = api.train("gpt", set=sets | {"sample.prompt": "🙂", "data.path": text}, out=tmp_path / "run", progress=False)
    saved = json.loads((tmp_path / "run" / runfolder.CONFIG).read_text(encoding="utf-8"))
    assert saved["sample"]["prompt"] == "🙂" and saved["data"]["path"] == str(text) and run.state.step == 1
    assert (tmp_path / "run" / runfolder.SAMPLE).read_text(encoding="utf-8").startswith("🙂")
