"""The speedrun study: its time-to-target arithmetic, nanoGPT's data and log as the study reads them, and the
study at --quick size with a stand-in nanoGPT checkout (the real one is fetched by hand, never in the tests)."""

import json
import pickle
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from tinyformer.errors import UserError
from tinyformer.experiments import nanogpt, speedrun
from tinyformer.experiments import speedrun_cells as cells


def test_time_to_target_is_the_first_evaluation_at_or_under_it_and_the_budget_keeps_what_came_before():
    curve = [(0.0, 4.2, 0), (5.0, 2.1, 100), (9.0, 1.9, 200), (12.0, 1.87, 300), (15.0, 1.85, 400)]
    assert cells.first_reach(curve, 1.88) == (12.0, 1.87, 300) and cells.first_reach(curve, 1.5) is None
    assert cells.best_within(curve, 10.0) == 1.9 and cells.best_within(curve, 0.0) == 4.2
    g = cells.Group("x", "", [curve, curve[:3], curve], [1.0, 1.0, 1.0])
    assert g.times == [12.0, None, 12.0] and g.median_time == 12.0 and g.steps == [300, None, 300]
    assert cells.Group("y", "", [curve[:3], curve[:3], curve], [1.0] * 3).median_time == float("inf")


def test_a_trick_pays_only_with_fewer_steps_and_less_time():
    def group(step, seconds):
        return cells.Group("g", "", [[(0.0, 4.0, 0), (seconds, 1.8, step)]] * 3, [1.0] * 3)

    base = group(1200, 20.0)
    assert speedrun.pays(group(1000, 18.0), base)
    assert not speedrun.pays(group(700, 23.0), base)  # fewer steps, each dearer: Muon on a CPU
    assert not speedrun.pays(group(1200, 19.0), base)  # as many steps: a faster time is the machine's noise


def nanogpt_log(eval_every=10, steps=30, dt_ms=10.0, eval_ms=700.0) -> str:
    """A log in nanoGPT's print format: an evaluation line every `eval_every` steps (before that step's
    training), then each iteration's time, inflated where the iteration began with an evaluation."""
    lines = []
    for i in range(steps + 1):
        if i % eval_every == 0:
            lines.append(f"step {i}: train loss {4 - i / 10:.4f}, val loss {4 - i / 10 + 0.05:.4f}")
            if i == steps:
                break
        t = eval_ms if i % eval_every == 0 else dt_ms
        lines.append(f"iter {i}: loss {4 - i / 10:.4f}, time {t:.2f}ms, mfu 1.00%")
    return "\n".join(lines)


def test_nanogpts_curve_counts_training_time_only():
    curve = nanogpt.nanogpt_curve(nanogpt_log())
    assert [v for _, v, _ in curve] == pytest.approx([4.05, 3.05, 2.05, 1.05])
    assert [t for t, _, _ in curve] == pytest.approx([0.0, 0.1, 0.2, 0.3])  # 10 ms a step, evaluations left out
    assert [n for _, _, n in curve] == [0, 10, 20, 30]
    with pytest.raises(UserError, match="nanoGPT's log"):
        nanogpt.nanogpt_curve("Initializing a new model from scratch\n")


def test_nanogpts_data_is_the_same_text_split_where_ours_is(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 7
    folder = nanogpt.nanogpt_data(tmp_path, text)
    meta = pickle.loads((folder / "meta.pkl").read_bytes())
    train, val = (np.fromfile(folder / f"{s}.bin", dtype=np.uint16) for s in ("train", "val"))
    decode = lambda ids: "".join(meta["itos"][int(i)] for i in ids)  # noqa: E731
    n = int(len(text) * 0.9)
    assert decode(train) == text[:n] and decode(val) == text[n:]
    assert meta["vocab_size"] == len(set(text)) and all(meta["stoi"][c] == i for i, c in meta["itos"].items())


FAKE_TRAIN = """import sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
assert args["dataset"] == "tinyformer_char" and args["device"] == "cpu"
open("data/tinyformer_char/train.bin", "rb").close()
every, steps = int(args["eval_interval"]), int(args["max_iters"])
assert int(args["lr_decay_iters"]) == steps
for i in range(steps + 1):  # val loss 4 / (1 + i/10) + 0.05 at every evaluation, 10 ms an iteration
    if i % every == 0:
        print(f"step {i}: train loss {4 / (1 + i / 10):.4f}, val loss {4 / (1 + i / 10) + 0.05:.4f}")
        if i == steps:
            break
    print(f"iter {i}: loss 1.0000, time {700.0 if i % every == 0 else 10.0:.2f}ms, mfu 1.00%")
"""


def fake_nanogpt(folder):
    """A stand-in nanoGPT checkout under `folder` (FAKE_TRAIN as its train.py) -> its path."""
    checkout = folder / "nanoGPT"
    checkout.mkdir()
    (checkout / "model.py").write_text("")
    (checkout / "train.py").write_text(FAKE_TRAIN)
    return checkout


def test_seeds_run_in_turn_across_cells_and_the_preset_in_turn_with_nanogpt(monkeypatch, tmp_path):
    """What runs, in order: cell a's first seed, cell b's first, a's second...; the preset, nanoGPT, the preset..."""
    order = []

    def run_study(name, cells, out, quick, data, budget=()):
        order.extend(c.name for c in cells)
        return out, [SimpleNamespace(name=c.name) for c in cells]

    def nanogpt_run(checkout, command, log_file):
        order.append(log_file.stem)
        return "iter 0: loss 4.0, time 10.00ms"

    monkeypatch.setattr(cells, "run_study", run_study)
    monkeypatch.setattr(cells, "curve", lambda r: [(1.0, 2.0, r.name)])  # each run's curve names it
    monkeypatch.setattr(cells, "speed", lambda r: 1.0)
    monkeypatch.setattr(nanogpt, "nanogpt_run", nanogpt_run)
    monkeypatch.setattr(nanogpt, "nanogpt_data", lambda checkout, text: None)
    monkeypatch.setattr(nanogpt, "nanogpt_curve", lambda log: [(1.0, 2.0, 0)])
    a, b = cells.train_groups([("a", [], ""), ("b", [], "")], (1, 2), tmp_path, False, None)
    assert order == ["a-seed1", "b-seed1", "a-seed2", "b-seed2"]
    assert [c[0][2] for c in a.curves] == ["a-seed1", "a-seed2"] and [c[0][2] for c in b.curves] == [
        "b-seed1",
        "b-seed2",
    ]
    (tmp_path / "train.py").write_text(""), (tmp_path / "model.py").write_text("")
    order.clear()
    preset, nano, _, _ = nanogpt.preset_and_nanogpt(tmp_path, "", (1, 2, 3), tmp_path, False, None)
    p = cells.PRESET
    assert order == [f"{p}-seed1", "nanogpt-0", f"{p}-seed2", "nanogpt-1", f"{p}-seed3", "nanogpt-2"]
    assert [c[0][2] for c in preset.curves] == [f"{p}-seed1", f"{p}-seed2", f"{p}-seed3"] and len(nano.curves) == 3


@pytest.mark.slow
def test_quick_study_times_each_cell_and_a_stand_in_nanogpt_checkout(tmp_path, text_file):
    checkout, out = fake_nanogpt(tmp_path), tmp_path / "study"
    report = speedrun.run(out, quick=True, data=str(text_file), nanogpt=str(checkout)).read_text()
    figures = json.loads((out / "figures.json").read_text())
    cells = figures["cells"]
    assert {"baseline", "muon", "qk-norm", "gpt_speedrun", "nanoGPT"} <= set(cells)
    assert set(figures["best"]) <= {"muon", "qk-norm"} and ("best" in cells) == bool(figures["best"])
    for name, trick in (("muon", "optimizer"), ("qk-norm", "qk_norm")):
        saved = json.loads((out / f"{name}-seed1337" / "config.json").read_text())
        assert saved["train"]["stop_at"] == f"loss<={speedrun.TARGET}"
        assert (saved["train"] if trick == "optimizer" else saved["model"])[trick] in ("muon", True)
    assert cells["nanoGPT"]["times"] == [pytest.approx(0.2)]  # the stand-in's log: 1.38 after 20 steps of 10 ms
    assert figures["nanogpt"]["command"].startswith("python train.py config/train_shakespeare_char.py")
    assert "| baseline |" in report and "against nanoGPT:" in report and "- **muon** (" in report
    assert cells["nanoGPT"]["tokens_per_s"] == [pytest.approx(12 * 64 / 0.01)]  # 10 ms an iteration
    assert (out / "val_vs_time.png").stat().st_size > 1000
    assert (out / "nanogpt-0.log").read_text().startswith("step 0:")
    assert "budgets" not in figures and not (out / "budgets.png").exists()  # the budgets study asks that now


def test_a_bad_nanogpt_folder_and_the_flag_on_another_study_are_one_line_errors(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tinyformer", *args], capture_output=True, text=True)

    done = cli("experiment", "speedrun", "--quick", "--out", str(tmp_path / "s"), "--nanogpt", str(tmp_path))
    assert done.returncode == 2 and "no nanoGPT checkout there" in done.stderr and "Traceback" not in done.stderr
    done = cli("experiment", "ablation", "--quick", "--nanogpt", str(tmp_path))
    assert done.returncode == 2 and "--nanogpt applies to the budgets and speedrun experiments" in done.stderr


def test_the_speedrun_preset_is_the_cpu_preset_with_only_its_marked_changes():
    """Every key of configs/gpt_speedrun.toml says in its comment whether it is the CPU preset's or changed, and
    says the truth: the changed ones are exactly where the two presets differ."""
    from tinyformer.config import PRESETS

    changed = {o.split("=")[0] for o in cells.preset_overrides("gpt_speedrun")}
    assert changed == {"model.ffn", "model.positions", "train.beta2", "train.max_iters"}
    section = ""
    for line in (PRESETS / "gpt_speedrun.toml").read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith("#") and section:
            key, comment = f"{section}.{line.split('=')[0].strip()}", line.split("#", 1)[1]
            assert comment.strip().startswith("changed" if key in changed else "as gpt_cpu_quick"), key
