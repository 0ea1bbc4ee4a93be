"""The run folder on the ground floor (`tinyformer.runfolder`) and its typed trainer state: what a run wrote is
read without the trainer, trainer_state.pt holds a `TrainerState` in the format old folders have, and nothing
outside the trainer reads that state by string key."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import user_error
from tests.conftest import tiny_run_config
from tinyformer import api, runfolder
from tinyformer.cli import main
from tinyformer.device import BackendChoice
from tinyformer.errors import UserError
from tinyformer.runfolder import STATE, TrainerState, read_state
from tinyformer.runs import load_run, train_run
from tinyformer.tasks import GPTTask
from tinyformer.train import checkpoint as ckpt

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tinyformer"  # (the layers, runfolder on the ground
# floor and nothing below `train` importing it, are tests/test_imports.py's LAYERS)


# ---- TrainerState: trainer_state.pt -----------------------------------------------------------------------------
def state(**fields) -> TrainerState:
    """A state with real tensors in it: an AdamW that took a step, torch's and a generator's RNG states."""
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    rng = {"torch": torch.get_rng_state(), "data": torch.Generator().manual_seed(3).get_state()}
    base = dict(step=7, best_val=1.25, train_seconds=3.5, tokens_seen=896, optimizer=optimizer.state_dict(), rng=rng)
    return TrainerState(**(base | fields))


def same(a, b) -> bool:
    """Equal, tensors compared by value, through dicts and lists."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_a_trainer_state_round_trips_through_trainer_state_pt_in_the_format_it_always_had(tmp_path):
    choice = BackendChoice("manual", {"sdpa": 1.0e4, "manual": 2.0e4}, seconds=0.3)
    full = state(precision="fp16", processes=2, reached="loss<=2 met at step 7", attention=choice, grad_scaler={})
    for written in (state(precision="fp32"), full):
        ckpt.save_state(written, tmp_path / STATE)
        on_disk = torch.load(tmp_path / STATE, weights_only=True)
        back = read_state(tmp_path / STATE)
        assert same(dataclasses.asdict(back), dataclasses.asdict(written)) and same(back.to_dict(), on_disk)
    # the keys `Trainer.save` wrote as a dict literal, in its order; the optional ones only when set
    old = ["step", "best_val", "train_seconds", "tokens_seen", "optimizer", "rng", "precision", "processes"]
    assert list(state(precision="fp32").to_dict()) == old
    assert list(on_disk) == [*old, "reached", "attention", "grad_scaler"]
    assert on_disk["attention"] == dataclasses.asdict(choice)  # a plain dict: weights_only loads it


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("step", "three", "'step' is missing or not a int"),
        ("step", True, "'step' is missing or not a int"),  # a bool is not a step count
        ("step", None, "'step' is missing or not a int"),  # absent
        ("best_val", "low", "'best_val' is missing or not a float"),
        ("optimizer", [], "'optimizer' is missing or not a dict"),
        ("processes", "2", "'processes' is not a int"),  # optional, but never of another type
        ("reached", 1, "'reached' is not a str"),
    ],
)
def test_a_state_of_another_shape_is_one_line_naming_the_file_and_the_key(tmp_path, capsys, key, value, says):
    data = state(precision="fp32").to_dict()
    data.pop(key) if value is None else data.__setitem__(key, value)
    torch.save(data, tmp_path / STATE)
    with pytest.raises(UserError) as e:
        read_state(tmp_path / STATE)
    assert str(e.value) == f"{tmp_path / STATE} does not hold a trainer state: {says}"
    with pytest.raises(TypeError, match=re.escape(says)):  # built so in code: a bug, not the user's
        dataclasses.replace(state(), **{key: value})


def test_a_state_written_before_the_optional_fields_loads_with_their_defaults(tmp_path):
    """The six keys tinyformer's first trainer wrote; a key this version does not know is left out."""
    old = {k: v for k, v in state().to_dict().items() if k in runfolder.REQUIRED} | {"backend": "sdpa"}
    torch.save(old, tmp_path / STATE)
    loaded = read_state(tmp_path / STATE)
    assert (loaded.precision, loaded.processes, loaded.reached, loaded.attention, loaded.grad_scaler) == (
        None,
        1,
        "",
        None,
        None,
    )
    assert list(loaded.to_dict()) == [*runfolder.REQUIRED, "processes"]


def test_an_old_run_folder_is_loaded_described_and_resumed(text_file, tmp_path, capsys):
    config = tiny_run_config(text_file, max_iters=4, backend="sdpa")
    train_run(config, GPTTask, tmp_path / "run", progress=False)
    written = torch.load(tmp_path / "run" / STATE, weights_only=True)
    torch.save({k: written[k] for k in runfolder.REQUIRED}, tmp_path / "run" / STATE)  # as the first trainer did
    run = load_run(tmp_path / "run")
    assert isinstance(run.state, TrainerState) and run.state.step == 4 and run.state.optimizer == {}
    assert api.summary(run).endswith(f"step 4/4 (finished), best val loss {written['best_val']:.4f}")
    capsys.readouterr()
    assert main(["info", str(tmp_path / "run")]) == 0
    assert "s of training, " in capsys.readouterr().out  # no precision recorded: none named
    assert main(["train", "gpt", "--resume", str(tmp_path / "run"), "--set", "train.max_iters=6"]) == 0
    assert read_state(tmp_path / "run" / STATE).step == 6 and read_state(tmp_path / "run" / STATE).processes == 1


def test_info_names_a_state_file_of_another_shape_in_one_line(text_file, tmp_path, capsys):
    train_run(tiny_run_config(text_file, max_iters=2, backend="sdpa"), GPTTask, tmp_path / "run", progress=False)
    data = torch.load(tmp_path / "run" / STATE, weights_only=True) | {"tokens_seen": 1.5}
    torch.save(data, tmp_path / "run" / STATE)
    line = user_error(capsys, "info", str(tmp_path / "run"))
    assert line.endswith(
        f"{tmp_path / 'run' / STATE} does not hold a trainer state: 'tokens_seen' is missing or not a int\n"
    )


# ---- nothing outside the trainer reads the state by string key ------------------------------------------------
def state_by_key(tree: ast.AST) -> list[int]:
    """Lines that read a run's trainer state as a dict: `X.state[...]`, `X.state.get(...)`, a name bound to
    `X.state` (or `X.state or {}`) then subscripted or `.get()`, and `torch.load` (the state's reader is
    `runfolder.read_state`)."""

    def is_state(node: ast.AST) -> bool:
        if isinstance(node, ast.BoolOp):
            return is_state(node.values[0])
        return isinstance(node, ast.Attribute) and node.attr == "state"

    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (
                    zip(target.elts, node.value.elts)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                aliases |= {t.id for t, v in pairs if isinstance(t, ast.Name) and is_state(v)}

    def is_dict_like(node: ast.AST) -> bool:
        return is_state(node) or (isinstance(node, ast.Name) and node.id in aliases)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_dict_like(node.value):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr == "get" and is_dict_like(f.value):
                found.append(node.lineno)
            elif f.attr == "load" and isinstance(f.value, ast.Name) and f.value.id == "torch":
                found.append(node.lineno)
    return found


def test_the_state_scan_finds_each_way_of_reading_the_state_by_key():
    caught = """
st = run.state
a = st["step"]
b, end = run.state or {}, 3
c = b.get("reached")
d = r.run.state["train_seconds"]
e = (source.state or {}).get("step")
f = torch.load(path)
"""
    assert sorted(state_by_key(ast.parse(caught))) == [3, 5, 6, 7, 8]
    fine = 'app.state.store = s\nstep = run.state.step\nrows[0]["step"]\nstate = {}\nstate["x"] = 1'
    assert state_by_key(ast.parse(fine)) == []


def test_nothing_outside_the_trainer_reads_the_trainer_state_by_string_key():
    """Run.state is a `TrainerState`: its fields are attributes, typed, with their defaults in one place."""
    readers = [PACKAGE / "runfolder.py", *sorted((PACKAGE / "train").rglob("*.py"))]
    found = {
        str(p.relative_to(PACKAGE)): lines
        for p in sorted(PACKAGE.rglob("*.py"))
        if p not in readers and (lines := state_by_key(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert found == {}


def test_a_loaded_run_s_state_is_a_trainer_state_and_has_no_dict_access(text_file, tmp_path):
    train_run(tiny_run_config(text_file, max_iters=2, backend="sdpa"), GPTTask, tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run", weights=None)
    assert type(run.state) is TrainerState and run.state.step == 2 and math.isfinite(run.state.best_val)
    with pytest.raises(TypeError):
        run.state["step"]
    assert not hasattr(run.state, "get")
