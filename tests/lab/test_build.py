"""The lab guide's build: facts read from reports, pages rendered from templates and facts alone.

The committed pages must be exactly what the templates and the committed `docs/lab/facts.json` render
to, so no number on a page can be typed by hand, and a template edited without `make lab` fails here.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tinyformer.cli import main
from tinyformer.errors import UserError
from tinyformer.lab.placeholders import PLACEHOLDER, key
from tinyformer.lab.sources import SOURCES, run_facts
from tinyformer.results import table_facts
from tools.lab.build import build
from tools.lab.render import FRONT, fill, front_page, index, render, templates, typed_numbers

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "docs" / "lab" / "templates"
DOCS = ROOT / "docs" / "lab"
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")
LINK = re.compile(r"\]\(([^)]+)\)")


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
        {"step": 0, "split": "val", "loss": 4.3, "bpc": 6.2, "train_seconds": 0.0},  # the untrained model
        {"step": 10, "split": "train", "loss": 2.0, "train_seconds": 3.0},
        {"step": 10, "split": "val", "loss": 1.9, "bpc": 2.7},
        {"step": 20, "split": "val", "loss": 2.1, "bpc": 3.0, "train_seconds": 7.4},
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    f = run_facts(tmp_path)
    assert f["best val loss"] == "1.9000" and f["final val loss"] == "2.1000" and f["final val bpc"] == "3.0000"
    assert f["first val loss"] == "4.3000"  # the curve's first point (part 1 holds it against ln of the vocabulary)
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


def test_fill_keeps_headings_and_fences_whole():
    section = (
        "### Q {{experiments/ablation: base / loss}}\nLoss {{experiments/ablation: base / loss}}.\n\n"
        "```bash\ntinyformer experiment ablation\n\n# a blank line inside the fence\n```\n\n"
        "~~~text\n{{text lab/gpt-sample: stdout.txt}}\n\n~~~\n\nAfter.\n"
    )
    text, _ = fill(section, {}, "en")
    assert text.startswith("### Q ?\n\n*Not measured")  # the heading stays, its paragraph is replaced
    assert "```bash\ntinyformer experiment ablation\n\n# a blank line inside the fence\n```" in text
    assert "~~~" not in text and text.count("Not measured") == 2 and text.rstrip().endswith("After.")


def test_typed_numbers_are_found_in_prose_only():
    text = "loss 1.64, 3x, 12%, 1,000 steps, 2048 and 4 layers; `lr=0.003` {{a/b: c | .2f}} ![x](../f/1.5.png)"
    assert typed_numbers(text) == ["1.64", "3x", "12%", "1,000", "2048"]
    assert typed_numbers("```bash\ntinyformer train gpt --set train.max_iters=3000\n```\n") == []


# ---- the committed guide ----------------------------------------------------------------------------------
def test_templates_type_no_numbers():
    for path, text in templates(TEMPLATES).items() | {TEMPLATES / FRONT: (TEMPLATES / FRONT).read_text()}.items():
        assert typed_numbers(text) == [], path


def test_the_readme_is_its_template_filled_from_the_guides_facts_and_short():
    """Every number the README quotes is a fact of the guide's build: README.md is the front-page template
    filled from the committed facts.json, and the template types no result (test above)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    template = (TEMPLATES / FRONT).read_text(encoding="utf-8")
    assert readme == front_page(template, committed_facts()["values"]), "run `make lab`: README.md"
    assert len(readme.splitlines()) <= 200
    for m in PLACEHOLDER.finditer(template):  # each placeholder names a source and a fact the guide records
        assert key(m) in committed_facts()["values"] or m.group(2) in committed_facts()["missing"], m.group(0)


def test_a_number_typed_into_the_readme_template_fails_the_build(tmp_path):
    source = one_page(tmp_path, "v {{lab/bench-rnn: bench.a}}", '{"a": 7}')
    (source / FRONT).write_text("# t\n\nIt trains in 1.5 s and quotes {{lab/bench-rnn: bench.a}}.\n")
    with pytest.raises(UserError, match="typed into templates"):
        build(source, tmp_path / "docs", tmp_path / "runs", front=tmp_path / "README.md")
    (source / FRONT).write_text("# t\n\nIt quotes {{lab/bench-rnn: bench.a}}.\n")
    build(source, tmp_path / "docs", tmp_path / "runs", front=tmp_path / "README.md")
    assert (tmp_path / "README.md").read_text() == "# t\n\nIt quotes 7.\n"


def test_english_and_chinese_pages_ask_the_same_items_with_the_same_values():
    t = templates(TEMPLATES)
    english = sorted(p for p in t if p.parent.name == "en")
    chinese = sorted(p for p in t if p.parent.name == "zh")
    assert [p.name for p in english] == [p.name for p in chinese]
    for en, zh in zip(english, chinese, strict=True):
        a, b = t[en], t[zh]
        assert a.count("\n### ") == b.count("\n### "), en.name
        # a source made in each language (`lab/recipes-gpt-zh`, the Chinese text) is the same item as the English
        assert {key(m) for m in PLACEHOLDER.finditer(a)} == {
            key(m).replace("-zh:", ":", 1) for m in PLACEHOLDER.finditer(b)
        }, en.name


def test_pages_are_the_templates_filled_from_the_committed_facts():
    facts = committed_facts()
    pages = render(templates(TEMPLATES), facts["values"])
    for page in pages:
        assert (DOCS / page.lang / page.name).read_text(encoding="utf-8") == page.text, f"run `make lab`: {page.name}"
    assert (DOCS / "README.md").read_text(encoding="utf-8") == index(pages, facts)


def test_every_placeholder_was_measured_or_its_source_is_listed_as_not_run():
    facts = committed_facts()
    for path, text in templates(TEMPLATES).items():
        for m in PLACEHOLDER.finditer(text):
            assert m.group(2) in SOURCES
            assert key(m) in facts["values"] or m.group(2) in facts["missing"], (path.name, m.group(0))


def test_every_embedded_figure_is_committed_and_every_committed_one_embedded():
    linked = set()
    for page in sorted(DOCS.glob("*/*.md")):
        if page.parent.name in ("en", "zh"):
            for target in LINK.findall(page.read_text(encoding="utf-8")):
                if target.startswith("../figures/"):
                    assert (page.parent / target).is_file(), (page.name, target)
                    linked.add((page.parent / target).resolve())
    assert linked and linked == {p.resolve() for p in (DOCS / "figures").rglob("*") if p.is_file()}


# ---- the CI-sized build: every source run tiny, every figure there ----------------------------------------
@pytest.mark.slow
def test_quick_build_runs_every_source_and_embeds_only_files_it_made(tmp_path, quick_lab):
    """On the session's CI-sized runs root (`quick_lab`, shared by every worker): the studies the study tests make
    there are complete and reused (no study trains twice in a session), the rest is made here, by the build
    itself. Run alone, this test makes every source. The sources only the build makes stay locked while it runs,
    so a notebook on another worker that reads one waits for the build rather than make it beside it; the studies
    (and what they read) it waits for, or makes first with the study tests' own maker, one study at a time, as a
    study test on another worker may be making one."""
    from tinyformer.lab.sources import STUDIES, needs
    from tools.lab.build import used_sources

    studies = [f"experiments/{n}" for n in reversed(STUDIES) if f"experiments/{n}" in SOURCES]  # quick_study's
    theirs, todo = set(), list(studies)  # what quick_study makes: the studies' families and what they read
    while todo:
        for member in quick_lab.family_of(todo.pop()):
            if member not in theirs:
                theirs.add(member)
                todo += needs(SOURCES[member], True)
    ours = {quick_lab.family(n) for n in used_sources(templates(TEMPLATES)) if n not in theirs}
    with quick_lab.holding_all(ours):
        quick_lab.studies(studies)  # from the last: the study tests ask from the first
        pages, got = build(TEMPLATES, tmp_path / "docs", quick_lab.runs, quick=True, cli=main)
    assert got.missing == [] and got.errors == []
    # A key the tiny runs lack (a context, a length) must be one the full-size build resolved, unless that
    # source is not measured yet: a misspelt key fails here or in the full build.
    full = committed_facts()
    unchecked = {k for k in got.unsized if k not in full["values"] and k.split(":")[0] not in full["missing"]}
    assert not unchecked, unchecked
    embedded = 0
    for page in pages:
        assert "Not measured" not in page.text and "尚未测量" not in page.text
        for target in IMAGE.findall(page.text):
            if target.startswith("../figures/"):  # made by the build
                assert (tmp_path / "docs" / page.lang / target).is_file(), (page.name, target)
                embedded += 1
            else:  # a committed picture beside the guide (the playground's screenshot)
                assert (DOCS / page.lang / target).is_file(), (page.name, target)
    assert embedded >= 40


def one_page(tmp_path: Path, line: str, bench: str) -> Path:
    """Templates of one item whose last line is `line`, and a bench-rnn source holding `bench` as its JSON."""
    source = tmp_path / "templates"
    for lang in ("en", "zh"):
        (source / lang).mkdir(parents=True)
        (source / lang / "1-x.md").write_text(f"# X\n\n### Q\n\n`tinyformer info RUN`\n\n{line}\n")
    folder = tmp_path / "runs" / "lab" / "bench-rnn"
    folder.mkdir(parents=True)
    (folder / "bench.json").write_text(bench)
    return source


def test_a_build_that_cannot_fill_a_placeholder_writes_nothing(tmp_path):
    source = one_page(tmp_path, "{{lab/bench-rnn: no such}}", '{"rnn": {"rows": []}}')
    with pytest.raises(UserError, match="could not be filled"):
        build(source, tmp_path / "docs", tmp_path / "runs")
    assert not (tmp_path / "docs").exists()


def test_a_source_not_in_runs_keeps_the_values_the_last_build_recorded(tmp_path):
    source = one_page(tmp_path, "v {{lab/bench-rnn: bench.a}}", '{"a": 7}')
    pages, _ = build(source, tmp_path / "docs", tmp_path / "runs")
    assert "v 7" in pages[0].text and pages[0].answered == 1
    shutil.rmtree(tmp_path / "runs")  # a fresh clone: no runs at all
    pages, got = build(source, tmp_path / "docs", tmp_path / "runs")
    assert "v 7" in pages[0].text and got.missing == []


def test_a_template_that_is_not_utf8_is_one_line(tmp_path):
    source = one_page(tmp_path, "v {{lab/bench-rnn: bench.a}}", '{"a": 7}')
    (source / "zh" / "1-x.md").write_bytes("# X\n\n### Q\n\nÇa va\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"1-x\.md is not UTF-8 text \(bad byte at offset"):
        build(source, tmp_path / "docs", tmp_path / "runs")


def test_every_test_the_guide_names_exists():
    """The guide answers questions with tests (`test_...` in code spans): each named test must be defined."""
    defined = {
        m for p in (ROOT / "tests").rglob("test_*.py") for m in re.findall(r"^def (test_\w+)", p.read_text(), re.M)
    }
    named = {n for text in templates(TEMPLATES).values() for n in re.findall(r"`(test_\w+)`", text)}
    assert len(named) >= 15 and named <= defined, sorted(named - defined)


def test_a_figure_that_differs_only_by_one_rounding_is_not_rewritten(tmp_path):
    from tools.lab.build import same_in_substance

    def pair(a: str, b: str, name: str = "x.html") -> tuple[Path, Path]:
        (tmp_path / "old").mkdir(exist_ok=True)
        (tmp_path / "new").mkdir(exist_ok=True)
        (tmp_path / "old" / name).write_text(a)
        (tmp_path / "new" / name).write_text(b)
        return tmp_path / "old" / name, tmp_path / "new" / name

    assert same_in_substance(*pair('{"w":[0.1269,0.5]}', '{"w":[0.127,0.5]}'))  # another CPU's last digit
    assert not same_in_substance(*pair('{"w":[0.1269,0.5]}', '{"w":[0.1369,0.5]}'))  # a weight that changed
    assert not same_in_substance(*pair('{"w":[0.1269,0.5]}', '{"v":[0.1269,0.5]}'))  # other text
    assert not same_in_substance(*pair("0.1269", "0.127", "x.png"))  # an image is compared byte for byte


def test_a_build_makes_what_the_quoted_sources_read_though_no_page_quotes_it():
    """No page quotes the bake-off's masked LM, but tagging, qa and the bake-off start from it: a build that
    left it out started qa at once, which failed with "no tokenizer at .../classifiers/mlm"."""
    from tinyformer.lab.sources import needs
    from tools.lab.build import used_sources

    texts = templates(TEMPLATES)
    quoted = {m.group(2) for text in texts.values() for m in PLACEHOLDER.finditer(text)}
    made = used_sources(texts)
    assert "experiments/classifiers/mlm" in made and "experiments/classifiers/mlm" not in quoted
    assert all(n in made for name in made for n in needs(SOURCES[name]))
    assert made.index("experiments/classifiers/mlm") < made.index("experiments/tagging")


def test_the_hours_build_leaves_the_extra_source_out_says_how_to_make_it_and_counts_without_it(
    tmp_path, capsys, monkeypatch
):
    """The speedrun study (50 minutes, a nanoGPT checkout beside it) is beyond the hour: `--train` names it and
    makes the rest, a build that made the rest is the guide's total, and `--only` it asks for the checkout
    before it starts anything."""
    from tools.lab import plan
    from tools.lab.build import Found, fill_nanogpt, write

    assert SOURCES["experiments/speedrun"].extra and not SOURCES["lab/bench-rnn"].extra
    assert SOURCES["experiments/speedrun"].alone  # timed: on every core, nothing beside it
    source = one_page(tmp_path, "v {{lab/bench-rnn: bench.a}} t {{experiments/speedrun: figures.target}}", '{"a": 7}')
    _, got = build(source, tmp_path / "docs", tmp_path / "runs", train=True, cli=main)
    said = capsys.readouterr().out
    assert "not in this build: experiments/speedrun" in said and "NANOGPT=~/nanoGPT" in said
    assert got.missing == ["experiments/speedrun"] and got.values == {"lab/bench-rnn: bench.a": "7"}

    monkeypatch.delenv("TINYFORMER_NANOGPT", raising=False)
    with pytest.raises(UserError, match="NANOGPT=~/nanoGPT"):
        build(source, tmp_path / "docs", tmp_path / "runs", only=("experiments/speedrun",), cli=main)
    assert not (tmp_path / "runs" / "experiments").exists()  # nothing started
    monkeypatch.setenv("TINYFORMER_NANOGPT", str(tmp_path))  # a folder, but no checkout: said before a start
    with pytest.raises(UserError, match="no nanoGPT checkout there"):
        fill_nanogpt(["experiment", "speedrun", "--nanogpt", "{nanogpt}"])
    (tmp_path / "train.py").write_text("")
    assert fill_nanogpt(["experiment", "speedrun", "--nanogpt", "{nanogpt}"])[-1] == str(tmp_path)

    stamps = {"lab/bench-rnn": {"date": "2026-12-01"}, "experiments/speedrun": {"date": "2026-11-30"}}
    hour = plan.Outcome(made=[plan.Made("lab/bench-rnn", 60.0, 50.0, 0)], elapsed=60.0, planned=50.0)
    write(tmp_path / "w", [], Found(stamps=stamps, made=hour))
    assert json.loads((tmp_path / "w" / "facts.json").read_text())["build"]["elapsed_s"] == 60.0


def test_what_the_lab_does_with_a_study_is_the_labs_and_names_studies_only():
    """`Study` says what a study is; how the guide makes it (`lab/studies.py`) is the lab's: no field of one is
    a field of the other, every study the lab's tables name exists, and one left out is not a source."""
    from dataclasses import fields

    from tinyformer.experiments import EXPERIMENTS, Study
    from tinyformer.lab import studies
    from tinyformer.lab.sources import STUDIES

    lab_only = {f.name for f in fields(studies.InGuide)} | {"in_guide", "lab_args"}
    assert not {f.name for f in fields(Study)} & lab_only
    assert set(studies.HOW) | set(studies.LEFT_OUT) <= set(EXPERIMENTS)
    assert not set(studies.HOW) & set(studies.LEFT_OUT)
    assert set(STUDIES) == set(EXPERIMENTS) - set(studies.LEFT_OUT)
    assert "experiments/tokenizers" not in SOURCES and SOURCES["experiments/tagging"].argv(False)[0][-2] == "--mlm"


def test_the_guide_makes_the_budgets_study_a_budget_at_a_time_each_with_its_own_stamp():
    """About 4 hours in all: each budget is a source of its own, made in one sitting and stamped when made."""
    from tinyformer.experiments.budgets import SEARCH

    parts = [n for n in SOURCES if n.startswith("experiments/budgets")]
    assert parts == [f"experiments/budgets/{m:g}min" for m in SEARCH]
    for m, name in zip(SEARCH, parts, strict=True):
        part = SOURCES[name]
        assert part.argv(False)[0][-2:] == ["--minutes", f"{m:g}"] and "--nanogpt" in part.argv(False)[0]
        assert part.argv(True)[0][-3:] == ["--quick", "--minutes", "0.05"] and "--nanogpt" not in part.argv(True)[0]
        assert part.extra and part.alone and part.path == name and part.stamp == f"{name}/lab.json"
