"""The budgets study at --quick size: seconds-long budgets, its search, `--time` as a user runs it (the table's
row), and a stand-in nanoGPT checkout (the real one is fetched by hand, never in the tests)."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.experiments.test_speedrun import fake_nanogpt
from tinyformer.config import load_toml
from tinyformer.errors import UserError
from tinyformer.experiments import budgets
from tinyformer.experiments.gpt_studies import QUICK
from tinyformer.train import budget as planning


def test_every_searched_shape_is_defined_and_each_budget_has_a_shipped_row_or_takes_the_one_below():
    for names in budgets.SEARCH.values():
        assert set(names) <= set(budgets.SHAPES)
    assert 1 in planning.rows("gpt")  # the smallest budget searched has its row: every --time has a shape


@pytest.mark.slow
def test_quick_study_searches_then_runs_time_as_a_user_does_beside_a_stand_in_nanogpt(tmp_path, text_file):
    checkout, out = fake_nanogpt(tmp_path), tmp_path / "study"
    report = budgets.run(out, quick=True, data=str(text_file), nanogpt=str(checkout)).read_text()
    figures = json.loads((out / "figures.json").read_text())
    assert set(figures["search"]) == {"0.05", "0.1"} and set(figures["search"]["0.05"]) == {"speedrun", "batch32"}
    smallest = next(iter(planning.rows("gpt").values()))  # the row of every budget under a minute
    row = load_toml(smallest)
    for minutes, seconds in (("0.05", 3), ("0.1", 6)):
        saved = json.loads((out / f"time-{minutes}min-seed1337" / "config.json").read_text())
        assert saved["train"]["time_budget"] == seconds and figures["budgets"][minutes]["row"] == smallest
        quick = {o.split("=")[0] for o in QUICK}  # the toy size the quick study sets over every row
        assert all(
            saved[sec][k] == v for sec in ("model", "train") for k, v in row[sec].items() if f"{sec}.{k}" not in quick
        )
        # nanoGPT's stand-in runs 10 ms an iteration (its 60-step probe says so): the budget is filled with steps
        nano = figures["budgets"][minutes]["nanoGPT"]
        assert nano["steps"] == [seconds * 100 - 1] and nano["seconds"] == [pytest.approx(seconds)]  # its last: n - 1
        searched = json.loads((out / f"search-{minutes}min-speedrun" / "config.json").read_text())
        assert searched["train"]["time_budget"] == seconds and searched["model"]["ffn"] == "relu2"
    # the search's run of the row's own shape (batch32 at 0.05) is the row's seed 1337: copied, not trained again
    copied, searched = (out / "time-0.05min-seed1337", out / "search-0.05min-batch32")
    assert (copied / "metrics.jsonl").read_text() == (searched / "metrics.jsonl").read_text()
    assert json.loads((out / "time-0.1min-seed1337" / "config.json").read_text())["train"]["time_row"] == smallest
    assert (out / "nanogpt-speed.log").read_text().startswith("step 0:")
    assert "| 0.05 | " in report and "## The search" in report and "nanoGPT best val" in report
    assert (out / "best_vs_budget.png").stat().st_size > 1000
    made = json.loads((out / "sitting-0.1min.json").read_text())  # each budget says where and when it was made
    assert f"0.1 min on {made['cpu']}, {made['date']}" in report and figures["budgets"]["0.1"]["made"]
    assert (out / "table.md").read_text() in report and (out / "search.md").read_text() in report
    assert (out / "val_vs_time.png").stat().st_size > 1000

    # --minutes: the report tells the budgets asked and those finished in the folder before (all runs reused here)
    again = budgets.run(out, quick=True, data=str(text_file), nanogpt=str(checkout), minutes=[0.1]).read_text()
    assert "| 0.05 | " in again and "| 0.1 | " in again and "best_vs_budget.png" in again
    alone = tmp_path / "alone"  # a folder where 0.05 never finished (no sitting recorded): 0.1 alone
    shutil.copytree(out, alone, ignore=shutil.ignore_patterns("sitting-0.05min.json"))
    one = budgets.run(alone, quick=True, data=str(text_file), nanogpt=str(checkout), minutes="0.1").read_text()
    figures = json.loads((alone / "figures.json").read_text())
    assert set(figures["budgets"]) == set(figures["search"]) == {"0.1"} and figures["budgets"]["0.1"]["nanoGPT"]
    assert "| 0.1 | " in one and "| 0.05 | " not in one and "best_vs_budget.png" not in one  # one point: no line


def test_minutes_picks_budgets_of_the_study_and_anything_else_is_one_line_before_any_run(tmp_path):
    assert list(budgets.asked(None, False)) == list(budgets.SEARCH)
    assert list(budgets.asked("10,1", False)) == [10, 1] and budgets.asked("3", False)[3] == budgets.SEARCH[3]
    assert list(budgets.asked("0.1", True)) == [0.1]
    assert list(budgets.asked([1, 3], False)) == [1, 3] and list(budgets.asked(10, False)) == [10]  # from Python
    for bad in ("7", "ten", "", "10,", "0.1"):
        with pytest.raises(UserError, match="give budgets of this study: 1, 3, 10, 30"):
            budgets.asked(bad, False)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tinyformer", "experiment", *args], capture_output=True, text=True)

    done = cli("budgets", "--quick", "--minutes", "10", "--out", str(tmp_path / "b"))
    assert done.returncode == 2 and "at --quick: 0.05, 0.1" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "b").exists()  # refused before its folder was made
    done = cli("ablation", "--quick", "--minutes", "3", "--out", str(tmp_path / "a"))
    assert done.returncode == 2 and "--minutes applies to the budgets experiment" in done.stderr
    assert not (tmp_path / "a").exists()


def test_a_time_budget_run_has_finished_at_its_plans_end_not_at_the_configs_max_iters(tmp_path, monkeypatch):
    """A --time run ends where its plan says, usually before the config's max_iters: reused, never resumed."""
    from types import SimpleNamespace

    from tinyformer.experiments import runner
    from tinyformer.timeplan import Plan

    (tmp_path / runner.STATE).write_text("")
    state = SimpleNamespace(step=500, reached="", budget=Plan(60.0, max_iters=500, warmup_iters=10, eval_interval=100))
    monkeypatch.setattr(runner, "saved_config", lambda run_dir: {"train": {"max_iters": 800}})
    monkeypatch.setattr(runner, "read_state", lambda path: state)
    assert runner.finished(tmp_path)
    state.step = 499
    assert not runner.finished(tmp_path)
    state.step, state.budget = 500, None  # no budget: the config's 800 steps
    assert not runner.finished(tmp_path)
