"""The guide's notebooks (notebooks/{en,zh}): made from one source, committed without outputs, and run top to
bottom at ci size in a fresh kernel.

The ten notebooks run in copies of the session's CI-sized lab (`quick_lab`), one per page, its English and
Chinese notebooks on one worker: a notebook at ci size trains what the lab's quick build trains, with the same
configs, so every source the suite made for the lab and its study tests is reused here and never made twice in
one suite (one that no test made yet is made first, with the lab's own command); the Chinese notebook reuses the
runs of the English one's own cells.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import needs_play
from tools.lab.notebooks import EXAMPLE, OUT, SOURCE, differing, example_cells, page_code

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("1-char-gpt", "2-bert-heads", "3-encoder-decoder", "4-model-collection")
NOTEBOOKS = [f"{lang}/{name}" for lang in ("en", "zh") for name in ("minigpt", *PAGES)]


def cells_of(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_there_are_ten_notebooks_and_each_is_what_its_sources_make():
    found = [p for p in (ROOT / OUT).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts]
    committed = sorted(p.relative_to(ROOT / OUT).with_suffix("").as_posix() for p in found)
    assert committed == sorted(NOTEBOOKS)
    assert differing(ROOT) == [], "run `make notebooks` and commit what it writes"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_committed_notebook_carries_no_outputs(name):
    for cell in cells_of(ROOT / OUT / f"{name}.ipynb"):
        assert not cell.get("outputs") and cell.get("execution_count") is None, cell["source"][:2]


def copy_sources(target: Path) -> Path:
    """What the notebooks are made from, and the notebooks, in a new folder laid out as the repository."""
    for rel in ("docs/lab/templates", "docs/lab/facts.json", str(SOURCE), str(EXAMPLE), str(OUT)):
        source, copy = ROOT / rel, target / rel
        copy.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copyfile)(source, copy)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_changed_source_makes_exactly_its_notebooks_differ(tmp_path):
    root = copy_sources(tmp_path)
    assert differing(root) == []
    edit(root / "docs/lab/templates/zh/2-bert-heads.md", "\n## ", "\n一句新的话。\n\n## ")  # a guide page's prose
    assert [p.as_posix() for p in differing(root)] == ["notebooks/zh/2-bert-heads.ipynb"]
    edit(root / SOURCE / "3-encoder-decoder.py", "PROBE = ", "PROBE2 = PROBE = ")  # a page's code: both languages
    edit(root / EXAMPLE, "    lr: float = 3e-4", "    lr: float = 1e-3")  # the deliverable's script
    assert sorted(p.as_posix() for p in differing(root)) == [
        f"notebooks/{lang}/{name}.ipynb" for lang, name in [("en", "3-encoder-decoder"), ("en", "minigpt")]
    ] + [f"notebooks/zh/{name}.ipynb" for name in ("2-bert-heads", "3-encoder-decoder", "minigpt")]
    facts = json.loads((root / "docs/lab/facts.json").read_text(encoding="utf-8"))
    facts["values"]["lab/gpt: best val loss"] = "9.9999"  # a value the guide quotes
    (root / "docs/lab/facts.json").write_text(json.dumps(facts), encoding="utf-8")
    assert {"notebooks/en/1-char-gpt.ipynb", "notebooks/zh/1-char-gpt.ipynb"} <= {p.as_posix() for p in differing(root)}


def test_the_minigpt_notebook_is_the_whole_example_script():
    """Every line of examples/minigpt.py but its docstring and its entry point is in a code cell of both
    minigpt notebooks, in the file's order: the notebook cannot teach code the script does not run."""
    script = (ROOT / EXAMPLE).read_text(encoding="utf-8")
    body = script.split('"""\n', 2)[2].split('\nif __name__ == "__main__":')[0]
    wanted = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("# %%")]
    wanted = [line for line in wanted if not line.startswith("def main(")]
    for lang in ("en", "zh"):
        code = [c for c in cells_of(ROOT / OUT / lang / "minigpt.ipynb") if c["cell_type"] == "code"]
        lines = [line.strip() for c in code for line in "".join(c["source"]).splitlines() if line.strip()]
        it = iter(lines)
        missing = [line for line in wanted if not any(line == seen for seen in it)]
        assert not missing, missing[:3]
    names = [name for name, _ in example_cells(ROOT / EXAMPLE)]
    for cell in ("data", "attention", "model", "loop", "curve", "sample", "save"):
        assert cell in names  # the deliverable's parts, each a cell of its own


@pytest.mark.parametrize("page", PAGES)
def test_every_item_of_a_page_has_its_cells_under_its_own_label(page):
    """The code file names each item by its number and the start of its English heading; the zh page has the
    same items in the same order."""
    cells = page_code(ROOT / SOURCE / f"{page}.py")
    for lang in ("en", "zh"):
        text = (ROOT / "docs/lab/templates" / lang / f"{page}.md").read_text(encoding="utf-8")
        headings = re.findall(r"(?m)^### (.+)$", text)
        assert sorted(int(k) for k in cells if k.isdigit()) == list(range(1, len(headings) + 1)), lang
        if lang == "en":
            for n, heading in enumerate(headings, start=1):
                assert heading.startswith(cells[f"label {n}"][0]), (n, heading)
    assert all(cell.strip() for k, v in cells.items() if not k.startswith("label") for cell in v)


@pytest.mark.parametrize("page", PAGES)
def test_every_value_a_page_compares_is_one_the_guide_quotes(page):
    """The literal keys of `guide.compare(...)` and `guide.quoted(...)` name placeholders of the guide, so each
    cell shows a value beside the guide's (keys built in a loop are checked when the notebooks run)."""
    import ast

    values = json.loads((ROOT / "docs/lab/facts.json").read_text(encoding="utf-8"))["values"]
    tree = ast.parse((ROOT / SOURCE / f"{page}.py").read_text(encoding="utf-8"))
    keys = [
        arg.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("compare", "quoted")
        for arg in node.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    ]
    assert keys or page in ("3-encoder-decoder", "4-model-collection")  # these two build all of their keys
    assert [k for k in keys if " ".join(k.split()) not in values] == []


def test_a_notebook_shows_its_value_beside_the_guides_with_the_stamp_it_was_made_at(tmp_path):
    """`Guide.compare` reads the placeholder and the stamp's `made` text from the package (`tinyformer.lab`),
    as a notebook does from a pip install: nothing of the repository's build."""
    from tinyformer.lab.placeholders import made_text
    from tinyformer.notebook import Guide

    facts = json.loads((ROOT / "docs/lab/facts.json").read_text(encoding="utf-8"))
    guide = Guide("1-char-gpt", size="ci", root=ROOT, runs=tmp_path)
    shown = guide.compare("lab/gpt: best val loss")
    assert shown["lab/gpt: best val loss"] == ("not made yet", facts["values"]["lab/gpt: best val loss"])
    made = made_text(facts["stamps"]["lab/gpt"], facts["stale"].get("lab/gpt"))
    assert shown.stamps["lab/gpt"] == f"{made}, on {facts['machines']['lab/gpt']}"


# ---- running them ----------------------------------------------------------------------------------------
def run_notebook(path: Path, cwd: Path, env: dict[str, str], monkeypatch) -> dict:
    """Execute a notebook in a fresh kernel of this interpreter, from `cwd`, with `env` -> the executed notebook."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the kernel inherits this process's environment
    nb = nbformat.read(path, as_version=4)
    where = {"metadata": {"path": str(cwd)}}
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources=where).execute()
    return nb


def outputs(nb) -> list[tuple[str, dict]]:
    """(the code cell's source, each output) of an executed notebook."""
    return [(c.source, o) for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def sources_read(page: str) -> list[str]:
    """The lab's sources a page's notebook reads or makes again: the folders its code names under the runs root
    (`guide.runs / "lab/gpt"`, ".../lab/bench-rnn/bench.json") and the studies it runs (`api.experiment("scale"`);
    not those whose sizes alone it borrows (`guide.sets("lab/demo")`)."""
    from tinyformer.lab.sources import SOURCES

    code = (ROOT / SOURCE / f"{page}.py").read_text(encoding="utf-8") if page != "minigpt" else ""
    code = re.sub(r'\.sets\("[^"]*"\)', "", code)  # a source's --set overrides: its sizes, not its folder
    named = re.findall(r'"((?:lab|experiments)/[\w./-]+)"', code)
    named += [f"experiments/{n}" for n in re.findall(r'api\.experiment\(\s*"([\w-]+)"', code)]
    found = []
    for path in named:  # the source whose folder holds it: the longest path above it
        above = [n for n, s in SOURCES.items() if path == s.path or path.startswith(s.path + "/")]
        found += [max(above, key=lambda n: len(SOURCES[n].path))] if above else []
    return list(dict.fromkeys(found))


def test_a_notebook_reads_the_lab_sources_of_its_page():
    """What the notebooks below are given first (made once a session, by the lab's quick commands)."""
    assert {"lab/gpt", "experiments/ablation", "experiments/scale", "lab/bench-attention"} <= set(
        sources_read("1-char-gpt")
    )
    assert {"experiments/classifiers/mlm", "experiments/qa", "lab/bench-rnn"} <= set(sources_read("4-model-collection"))
    assert sources_read("minigpt") == [] and "lab/gpt-attention" not in sources_read("2-bert-heads")
    assert "lab/demo" not in sources_read("1-char-gpt")  # its sizes only: guide.sets("lab/demo")


@pytest.fixture(scope="session")
def notebook_runs(quick_lab, tmp_path_factory):
    """`notebook_runs(page)`: the runs root of that page's two notebooks (English, then Chinese, on one worker:
    `xdist_group`), a copy of the session's CI-sized lab (`quick_lab`) holding every source the page reads,
    complete. The lab's quick build (tests/lab) made them, or a study test, on any worker, and the notebooks wait
    for them; run alone, they are made here. A copy: what a notebook writes (a study's report written again, the
    runs of its own "Try it" cells) never meets a test on another worker reading the lab's folders."""
    made: dict[str, Path] = {}

    def runs(page: str) -> Path:
        if page not in made:
            made[page] = quick_lab.copy(sources_read(page), tmp_path_factory.mktemp(f"notebook-{page}"))
        return made[page]

    return runs


@needs_play
@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.xdist_group(f"notebook-{n.split('/')[1]}")) for n in NOTEBOOKS]
)
def test_a_notebook_runs_top_to_bottom_at_ci_size(name, notebook_runs, tmp_path, monkeypatch):
    runs = notebook_runs(name.split("/")[1])
    env = {"TINYFORMER_SIZE": "ci", "TINYFORMER_RUNS": str(runs), "TINYFORMER_ROOT": str(ROOT)}
    nb = run_notebook(ROOT / OUT / f"{name}.ipynb", tmp_path, env, monkeypatch)
    shown = outputs(nb)
    errors = [o for _, o in shown if o.output_type == "error"]
    assert not errors, errors[:1]
    images = [src for src, o in shown if "image/png" in o.get("data", {})]
    tables = [o["data"]["text/markdown"] for _, o in shown if "text/markdown" in o.get("data", {})]
    if name.endswith("minigpt"):
        assert len(images) == 1 and (tmp_path / "minigpt_loss.png").is_file()  # the curve, inline and saved
        printed = "".join(o.get("text", "") for src, o in shown if "generate(model, prompt, 500" in src)
        assert len(printed.rstrip("\n")) >= 501  # the newline it starts from and 500 characters
        assert "val loss" in (tmp_path / "minigpt_report.md").read_text(encoding="utf-8")
        return
    assert len(images) >= 4 and len(tables) >= 4
    assert not [t for t in tables if "not in the guide" in t or "not made yet" in t], "a compared value is missing"
    assert all("the guide" in t and "made at" in t for t in tables)  # each value beside the guide's, stamped
