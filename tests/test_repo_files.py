"""Files of the repository's own making, corrupt or of another shape, end in one line naming the file and what
is wrong (issue 72): the guide's docs/lab/facts.json (the notebooks' `Guide`, the guide's build and notebooks,
`tinyformer lab facts`), a budgets study's sitting-*.json, and the notebook helper's TINYFORMER_SIZE and
TINYFORMER_ROOT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import user_error
from tinyformer.errors import UserError
from tinyformer.experiments import budgets
from tinyformer.notebook import Guide, find_root

STAMP = {"commit": "abcdef1234", "date": "2026-12-01 10:00 UTC"}
BAD_FACTS = {  # what the file holds -> the key the refusal names
    "{not json": "is corrupt",
    "[]": "the file is a list",
    '"facts"': "the file is a string",
    '{"values": []}': "values is a list",
    '{"values": {"lab/gpt: best val loss": 1.5}}': "values.lab/gpt: best val loss is a number",
    '{"machines": ["x"]}': "machines is a list",
    '{"stamps": {"lab/gpt": "made"}}': "stamps.lab/gpt is a string",
    json.dumps({"stamps": {"lab/gpt": STAMP | {"checked": []}}}): "stamps.lab/gpt.checked is a list",
    json.dumps({"stamps": {"lab/gpt": STAMP | {"date": 20261201}}}): "stamps.lab/gpt.date is a number",
    json.dumps({"stamps": {"lab/gpt": STAMP}, "stale": {"lab/gpt": "src/x.py"}}): "stale.lab/gpt is a string",
}


def clone_with_facts(root: Path, text: str) -> Path:
    """A folder laid out as a clone as far as the readers look: docs/lab/facts.json and one template a language."""
    (root / "docs/lab").mkdir(parents=True)
    (root / "docs/lab/facts.json").write_text(text, encoding="utf-8")
    for lang in ("en", "zh"):
        (root / "docs/lab/templates" / lang).mkdir(parents=True)
        (root / "docs/lab/templates" / lang / "1-page.md").write_text("# a page\n", encoding="utf-8")
    return root


@pytest.mark.parametrize(("text", "said"), BAD_FACTS.items(), ids=range(len(BAD_FACTS)))
def test_a_bad_facts_json_is_one_line_in_the_notebooks_helper(text, said, tmp_path, monkeypatch):
    root = clone_with_facts(tmp_path, text)
    monkeypatch.delenv("TINYFORMER_SIZE", raising=False)
    with pytest.raises(UserError, match="facts.json") as e:
        Guide("1-char-gpt", root=root, runs=tmp_path / "runs").compare("lab/gpt: best val loss")
    assert said in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("text", "said"), BAD_FACTS.items(), ids=range(len(BAD_FACTS)))
def test_a_bad_facts_json_is_one_line_in_the_guides_build_and_notebooks(text, said, tmp_path):
    from tools.lab import build, notebooks

    root = clone_with_facts(tmp_path, text)
    with pytest.raises(UserError, match="facts.json"):
        notebooks.made(root)
    with pytest.raises(UserError, match="facts.json") as e:
        build.build(root / "docs/lab/templates", root / "docs/lab", root / "runs", dry=True)
    assert said in str(e.value)


def test_a_bad_facts_json_is_one_line_in_lab_facts(tmp_path, monkeypatch, capsys):
    clone_with_facts(tmp_path, '{"machines": {"lab/gpt": "a CPU"}, "values": {"lab/gpt: steps": 3}}')
    monkeypatch.chdir(tmp_path)
    err = user_error(capsys, "lab", "facts", "lab/gpt", "--runs", str(tmp_path / "runs"))
    assert "facts.json: values.lab/gpt: steps is a number" in err


def test_the_committed_facts_json_passes_its_own_check():
    from tinyformer.lab.guide_facts import read_facts

    assert read_facts(Path(__file__).parents[1] / "docs/lab/facts.json")["values"]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("/nonexistent/tinyformer", "is not a folder"),
        ("{tmp}/file", "is not a folder"),
        ("{tmp}", "holds no tinyformer repository (no docs/lab/facts.json)"),
        ("~no-such-user-72/x", "no such home folder"),
    ],
)
def test_a_tinyformer_root_that_is_not_a_clone_says_so(value, said, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TINYFORMER_ROOT", value.format(tmp=tmp_path))
    with pytest.raises(UserError, match="TINYFORMER_ROOT=") as e:
        find_root()
    assert said in str(e.value)
    with pytest.raises(UserError, match="TINYFORMER_ROOT="):
        Guide("1-char-gpt")


def test_an_unknown_tinyformer_size_names_the_allowed_ones(monkeypatch):
    monkeypatch.setenv("TINYFORMER_SIZE", "huge")
    with pytest.raises(UserError, match="TINYFORMER_SIZE='huge' is not one of ci, laptop, full"):
        Guide("1-char-gpt", root=Path(__file__).parents[1])


@pytest.mark.parametrize(
    "text", ["{cut sh", "[]", '{"cpu": "x"}', '{"cpu": 1, "date": "2026-12-01"}', '"a CPU, 2026-12-01"']
)
def test_a_bad_sitting_record_is_one_line_before_anything_trains(text, tmp_path, monkeypatch):
    (tmp_path / "sitting-0.1min.json").write_text(text)

    def trains(*args, **kwargs):
        raise AssertionError("the study trained before reading its sitting records")

    monkeypatch.setattr(budgets, "search", trains)
    with pytest.raises(UserError, match="sitting-0.1min.json") as e:
        budgets.run(out=tmp_path, quick=True, minutes="0.05")
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="sitting-0.1min.json"):
        budgets.sitting(tmp_path, 0.1)
