"""examples/minigpt.py, the one-file MiniGPT, mirrors the package's MiniGPT: same parameters, same function."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tinyformer.models.gpt import GPTConfig, MiniGPT

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "minigpt.py"
SMALL = dict(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=64)


@pytest.fixture(scope="module")
def ex() -> ModuleType:
    spec = importlib.util.spec_from_file_location("minigpt_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("fields", "expected"),
    [(dict(vocab_size=65), 824_832), (SMALL, None)],
    ids=["seed-recipe-vocab-65", "small"],
)
def test_parameter_count_matches_package(ex: ModuleType, fields: dict, expected: int | None) -> None:
    mine, package = count(ex.GPT(ex.Config(**fields))), count(MiniGPT(GPTConfig(**fields)))
    assert mine == package == ex.param_formula(ex.Config(**fields))  # the formula the notebook prints beside it
    if expected is not None:
        assert mine == expected


def test_same_logits_as_package_with_its_weights(ex: ModuleType) -> None:
    torch.manual_seed(0)
    package = MiniGPT(GPTConfig(**SMALL)).eval()
    mine = ex.GPT(ex.Config(**SMALL)).eval()
    mine.load_state_dict(package.state_dict())  # strict: the very same parameter names and shapes
    idx = torch.randint(SMALL["vocab_size"], (2, SMALL["block_size"]))
    with torch.no_grad():
        torch.testing.assert_close(mine(idx)[0], package(idx).logits)


def test_train_step_lowers_loss_on_a_fixed_batch(ex: ModuleType) -> None:
    torch.manual_seed(0)
    c = ex.Config(**SMALL, dropout=0.0, batch_size=4)
    model = ex.GPT(c)
    data = torch.randint(c.vocab_size, (500,), generator=torch.Generator().manual_seed(1))
    x, y = ex.get_batch(data, c.block_size, c.batch_size, torch.Generator().manual_seed(2))
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted left by one
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
    losses = [ex.train_step(model, opt, x, y, c) for _ in range(3)]
    assert losses[-1] < losses[0], losses


def test_attention_is_causal(ex: ModuleType) -> None:
    torch.manual_seed(0)
    model = ex.GPT(ex.Config(**SMALL)).eval()
    idx = torch.randint(SMALL["vocab_size"], (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % SMALL["vocab_size"]  # a different token at position 10
    with torch.no_grad():
        before, after = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(before[:, :10], after[:, :10])  # the past does not see the change
    assert not torch.allclose(before[:, 10:], after[:, 10:])  # from position 10 on, it does


def test_the_causal_mask_is_the_one_line_the_no_mask_exercise_deletes(ex: ModuleType, tmp_path: Path) -> None:
    """The course's exercise: delete the masked_fill line and position t sees the future."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    mask = [i for i, line in enumerate(lines) if "masked_fill(~self.tril" in line]
    assert len(mask) == 1 and "no-mask exercise" in lines[mask[0]]
    edited = tmp_path / "minigpt_no_mask.py"
    edited.write_text("".join(lines[: mask[0]] + lines[mask[0] + 1 :]), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("minigpt_no_mask", edited)
    no_mask = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(no_mask)
    torch.manual_seed(0)
    model = no_mask.GPT(no_mask.Config(**SMALL)).eval()
    idx = torch.randint(SMALL["vocab_size"], (1, 16))
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % SMALL["vocab_size"]
    with torch.no_grad():
        assert not torch.allclose(model(idx)[0][:, :10], model(changed)[0][:, :10])  # the past now sees it


def test_lines_are_at_most_100_characters_and_the_labs_choices_are_named() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert max(len(line) for line in text.splitlines()) <= 100
    for fact in ("none on the embeddings", "no clipping", "on every parameter", "temperature 1", "no init code"):
        assert fact in text, fact
    assert "course: a new random batch at every call, here the same one" in text  # the difference left
    # every difference the docstring promises a "course:" comment for (issue 56 item 7)
    course = "\n".join(line for line in text.splitlines() if "course:" in line or line.strip().startswith("#"))
    for topic in (
        "the last window",
        "unseeded",
        "input.txt",
        "stoi[",
        "dropout inside the attention module",
        'float buffer "mask"',
        "math.sqrt(d_k)",
        "MAX_ITERS - 1",
        "nothing is seeded",
    ):
        assert topic in course, topic


def test_the_example_trains_as_tinyformer_train_gpt(ex: ModuleType) -> None:
    """The lab's recipe in both: the same weights and batches give the same losses for a few steps."""
    from tinyformer.tasks import GPTTask
    from tinyformer.train.optim import make_optimizer

    config = GPTTask.default_config()
    config.model.vocab_size, config.model.dropout = 65, 0.0
    torch.manual_seed(0)
    package, mine = MiniGPT(config.model), ex.GPT(ex.Config(vocab_size=65, dropout=0.0))
    mine.load_state_dict(package.state_dict())
    opts = make_optimizer(package, config.train), ex.optimizer(mine, ex.Config())
    data = torch.randint(65, (5000,), generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        x, y = ex.get_batch(data, 128, 4, g)
        losses = [ex.train_step(m, o, x, y, None) for m, o in zip((package_as_tuple(package), mine), opts)]
        assert abs(losses[0] - losses[1]) < 1e-5, losses


def package_as_tuple(model: MiniGPT):
    """The package's model behind the example's (logits, loss) interface."""
    return lambda x, y: (None, model(x, y).loss)


def test_without_data_it_reads_the_packages_copy_or_says_where_to_get_one(tmp_path: Path) -> None:
    """`make demo` leaves Tiny Shakespeare in the package's cache: the example finds it there, as the package
    does; with no copy anywhere it says how to get one in one line."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TINYFORMER_DATA"} | {"XDG_CACHE_HOME": str(tmp_path)}
    args = [sys.executable, str(EXAMPLE), "--steps", "1"]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and "run `make demo` once" in r.stderr, r.stderr
    (tmp_path / "tinyformer").mkdir()
    (tmp_path / "tinyformer" / "tinyshakespeare.txt").write_text("ROMEO:\nBut, soft!\n" * 200, encoding="utf-8")
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and "steps" in r.stdout.splitlines()[0], r.stderr
    assert (tmp_path / "minigpt_loss.png").is_file() and "## Sample" in (tmp_path / "minigpt_report.md").read_text()
