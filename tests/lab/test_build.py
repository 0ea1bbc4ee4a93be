"""The lab guide's build: facts read from reports, pages rendered from templates and facts alone.

The committed pages must be exactly what the templates and the committed `docs/lab/facts.json` render
to, so no number on a page can be typed by hand, and a template edited without `make lab` fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tinyformer.lab.build import PLACEHOLDER, _key, build, fill, index, render, templates, typed_numbers
from tinyformer.lab.sources import SOURCES, run_facts, table_facts

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "docs" / "lab" / "templates"
DOCS = ROOT / "docs" / "lab"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def committed_facts() -> dict:
    return json.loads((DOCS / "facts.json").read_text(encoding="utf-8"))


# ---- the pieces -------------------------------------------------------------------------------------------
def test_table_facts_name_cells_by_row_and_column():
    first = "| cell | loss | s |\n|---|---|---|\n| base | 1.5 | 10 |\n| deep | 1.4 | 20 |\n| deep | 1.3 | 30 |\n"
    f = table_facts(first + "\ntext\n\n| cell | loss |\n|---|---|\n| base | 9 |\n")
    assert f["base / loss"] == "1.5" and f["deep / s"] == "20"  # the first row and table that has the cell
    assert f["table 2: base / loss"] == "9" and f["table 1: deep / loss"] == "1.4"
    assert f["deep, 1.3 / s"] == "30"  # a row named by its first two cells (e.g. layer, head)
    assert "cell / loss" not in f and "--- / loss" not in f  # neither header nor rule is a row


def test_run_facts_read_the_metrics_log(tmp_path):
    rows = [
        {"step": 10, "split": "train", "loss": 2.0, "train_seconds": 3.0},
        {"step": 10, "split": "val", "loss": 1.9, "bpc": 2.7},
        {"step": 20, "split": "val", "loss": 2.1, "bpc": 3.0, "train_seconds": 7.4},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    f = run_facts(tmp_path)
    assert f["best val loss"] == "1.9000" and f["final val loss"] == "2.1000" and f["final val bpc"] == "3.0000"
    assert f["steps"] == "20" and f["train seconds"] == "7"


def test_fill_replaces_only_the_paragraph_whose_value_is_missing():
    section = (
        "### Q\n\n```bash\ntinyformer experiment ablation\n```\n\n"
        "Loss {{experiments/ablation: base / loss}}.\n\nWhy: because.\n"
    )
    text, answered = fill(section, {}, "en")
    assert "Why: because." in text and "{{" not in text
    assert (
        "Not measured on this machine yet" in text
        and "`tinyformer experiment ablation --out runs/experiments/ablation`" in text
    )
    assert not answered
    text, answered = fill(section, {"experiments/ablation: base / loss": "1.5"}, "en")
    assert "Loss 1.5." in text and answered
    no_command = section.replace("tinyformer experiment ablation", "ls")
    assert not fill(no_command, {"experiments/ablation: base / loss": "1.5"}, "en")[1]  # a number alone is no answer


def test_typed_numbers_are_found_in_prose_only():
    text = "loss 1.64, 3x, 12%, 1,000 steps, 2048 and 4 layers; `lr=0.003` {{a/b: c | .2f}} ![x](../f/1.5.png)"
    assert typed_numbers(text) == ["1.64", "3x", "12%", "1,000", "2048"]
    assert typed_numbers("```bash\ntinyformer train gpt --set train.max_iters=3000\n```\n") == []


# ---- the committed guide ----------------------------------------------------------------------------------
def test_templates_type_no_numbers():
    for paths in templates(TEMPLATES).values():
        for path in paths:
            assert typed_numbers(path.read_text(encoding="utf-8")) == [], path


def test_english_and_chinese_pages_ask_the_same_items_with_the_same_values():
    t = templates(TEMPLATES)
    assert [p.name for p in t["en"]] == [p.name for p in t["zh"]]
    for en, zh in zip(t["en"], t["zh"], strict=True):
        a, b = en.read_text(encoding="utf-8"), zh.read_text(encoding="utf-8")
        assert a.count("\n### ") == b.count("\n### "), en.name
        assert {_key(m) for m in PLACEHOLDER.finditer(a)} == {_key(m) for m in PLACEHOLDER.finditer(b)}, en.name


def test_pages_are_the_templates_filled_from_the_committed_facts():
    facts = committed_facts()
    pages = render(TEMPLATES, facts["values"])
    for page in pages:
        assert (DOCS / page.lang / page.name).read_text(encoding="utf-8") == page.text, f"run `make lab`: {page.name}"
    assert (DOCS / "README.md").read_text(encoding="utf-8") == index(pages)


def test_every_placeholder_was_measured_or_its_source_is_listed_as_not_run():
    facts = committed_facts()
    for paths in templates(TEMPLATES).values():
        for path in paths:
            for m in PLACEHOLDER.finditer(path.read_text(encoding="utf-8")):
                assert m.group(2) in SOURCES
                assert _key(m) in facts["values"] or m.group(2) in facts["missing"], (path.name, m.group(0))


def test_every_embedded_figure_is_committed():
    for page in sorted(DOCS.glob("*/*.md")):
        if page.parent.name in ("en", "zh"):
            for target in IMAGE.findall(page.read_text(encoding="utf-8")):
                assert (page.parent / target).is_file(), (page.name, target)


# ---- the CI-sized build: every source run tiny, every figure there ----------------------------------------
@pytest.mark.slow
def test_quick_build_runs_every_source_and_embeds_only_files_it_made(tmp_path):
    pages = build(TEMPLATES, tmp_path / "docs", tmp_path / "runs", quick=True)
    facts = json.loads((tmp_path / "docs" / "facts.json").read_text(encoding="utf-8"))
    assert facts["missing"] == []
    embedded = 0
    for page in pages:
        assert "Not measured" not in page.text and "尚未测量" not in page.text
        for target in IMAGE.findall(page.text):
            assert (tmp_path / "docs" / page.lang / target).is_file(), (page.name, target)
            embedded += 1
    assert embedded >= 20
