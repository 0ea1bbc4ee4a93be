"""Shared fixtures: tiny configs and local text only (no network)."""

from __future__ import annotations

import contextlib
import io
import os
import random
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import FAST, TINY, cli
from tests.processes import no_process_left, pytest_sessionfinish  # noqa: F401  (every test: nothing left running)
from tinyformer import choices
from tinyformer.config import RunConfig, TrainConfig
from tinyformer.models.gpt import GPTConfig, MiniGPT

# `make test` and `make check` run the suite on every core with pytest-xdist (-n auto --dist loadgroup): one
# worker process per core, one torch thread each (two threads in each of two workers on two cores doubled the
# CPU time of the fast tier), and the processes the tests start inherit that.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"

SHARED = {"quick_study": "studies", "quick_runs": "studies", "user_install": "install"}  # minutes to make


def pytest_collection_modifyitems(config, items):
    """The tests that read the CI-size studies share one xdist worker (`xdist_group`), and those that use the
    user's install another, so each is made once a session, as in a run without workers."""
    for item in items:
        group = next((g for name, g in SHARED.items() if name in getattr(item, "fixturenames", ())), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


SYNTHETIC = (
    "FIRST CITIZEN:\nWe are accounted poor citizens, the patricians good.\n\n"
    "MENENIUS:\nWhat work's, my countrymen, in hand? where go you?\n\n"
    "ROMEO:\nBut, soft! what light through yonder window breaks?\n\n"
) * 40


@pytest.fixture(scope="session", autouse=True)
def choice_cache(tmp_path_factory) -> Path:
    """The tests' own cache of measured speed choices (`tinyformer.choices`), not the user's; subprocesses
    inherit it. One per session: runs of the same shapes in one session take the same backend."""
    folder = tmp_path_factory.mktemp("choices")
    os.environ[choices.CACHE_ENV] = str(folder)
    return folder


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    """About 20k characters: a slice of Tiny Shakespeare when TINYFORMER_DATA is set, else synthetic."""
    src = os.environ.get("TINYFORMER_DATA")
    text = Path(src).read_text(encoding="utf-8")[:20_000] if src and Path(src).is_file() else SYNTHETIC
    p = tmp_path / "slice.txt"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.fixture
def tiny_gpt_config() -> GPTConfig:
    return GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)


@pytest.fixture
def tiny_gpt(tiny_gpt_config: GPTConfig) -> MiniGPT:
    torch.manual_seed(0)
    return MiniGPT(tiny_gpt_config).eval()


def tiny_run_config(text_file: Path, dropout: float = 0.1, backend: str = "auto", **train) -> RunConfig:
    """A whole gpt run config small enough to train in a second or two."""
    model = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16, dropout=dropout, backend=backend)
    t = dict(max_iters=12, batch_size=4, eval_interval=4, eval_iters=2, log_interval=2, device="cpu")
    cfg = RunConfig(task="gpt", model=model, train=TrainConfig(**(t | train)))
    cfg.data.path = str(text_file)
    cfg.sample.tokens = 20  # the end-of-run sample.txt: a line, not 500 one-token steps
    return cfg


# ---- the CI-sized lab: every study made once per session, where the lab's quick build then finds it ----
HAS_PLAY = Path(os.environ.get("TINYFORMER_DATA", "/nonexistent")).is_file()
needs_play = pytest.mark.skipif(not HAS_PLAY, reason="needs the play: set TINYFORMER_DATA")


@dataclass
class Study:
    folder: Path
    report: Path
    stdout: str  # what the study printed while it was made


@pytest.fixture(scope="session")
def quick_runs(tmp_path_factory) -> Path:
    """The runs root of the CI-sized lab build (`lab build --quick`). The study tests make their studies here,
    in the folders the lab reads, and tests/lab/test_build.py builds the guide from the same root: a study
    trains once per session, whichever test asks for it first."""
    return tmp_path_factory.mktemp("lab-quick")


@pytest.fixture(scope="session")
def quick_study(quick_runs):
    """`quick_study(name)`: the study made as `lab build --quick` makes it (its quick command, through the CLI's
    own entry point, into its lab folder), at the first call, after the sources it reads (a masked LM)."""
    from tinyformer.cli import main
    from tinyformer.lab.sources import SOURCES, complete, needs
    from tools.lab.build import produce

    made: dict[str, Study] = {}

    def make(source) -> None:
        for name in needs(source, True):
            if not complete(SOURCES[name], quick_runs / SOURCES[name].path, True):
                make(SOURCES[name])
        produce(source, quick_runs, True, main)

    def study(name: str) -> Study:
        if name not in made:
            source = SOURCES[f"experiments/{name}"]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                make(source)
            folder = quick_runs / source.path
            made[name] = Study(folder, folder / source.done, printed.getvalue())
        return made[name]

    return study


# ---- run folders shared by the command-line tests (trained once per session) ----
@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> Path:
    """One ~30-step run on a slice, shared by the end-to-end tests below."""
    src = os.environ.get("TINYFORMER_DATA")
    text = Path(src).read_text(encoding="utf-8")[:60_000] if src else SYNTHETIC * 3
    root = tmp_path_factory.mktemp("e2e")
    (root / "slice.txt").write_text(text, encoding="utf-8")
    r = cli(
        "train",
        "gpt",
        "--data",
        str(root / "slice.txt"),
        *TINY,
        *FAST,
        "--set",
        "train.max_iters=30",
        "--set",
        "sample.tokens=50",
        "--out",
        str(root / "run"),
    )
    assert r.returncode == 0, r.stderr
    assert "done: step 30" in r.stdout
    return root / "run"


@pytest.fixture(scope="session")
def reversal_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rev") / "run"
    r = cli(
        "train",
        "reverse",
        "--set",
        "model.n_embd=32",
        "--set",
        "model.d_ff=64",
        "--set",
        "data.n_train=500",
        "--set",
        "data.n_val=50",
        "--set",
        "train.max_iters=20",
        "--set",
        "train.eval_interval=10",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "exact_match" in r.stdout
    return out


# ---- pairs for `train seq2seq`: lower-case words -> upper case, written per test (no data file is committed) ----
def upper_case_words(n: int = 200, seed: int = 0) -> list[str]:
    """`n` distinct lower-case words of 3-8 letters, sorted, from `seed`."""
    rng = random.Random(seed)
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8))))
    return sorted(words)


def write_tsv(path: Path, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> Path:
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def upper_pairs(tmp_path: Path) -> Path:
    """200 lower-case words and their upper case: a TSV with the columns src and tgt."""
    return write_tsv(tmp_path / "upper.tsv", ("src", "tgt"), [(w, w.upper()) for w in upper_case_words()])


SEQ2SEQ_TINY = [  # a model and schedule that learn the 180 training pairs of `upper_pairs` in 400 CPU steps
    "model.n_embd=32",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.dropout=0.0",
    "model.attn_dropout=0.0",
    "model.block_size=16",
    "train.max_iters=400",
    "train.batch_size=32",
    "train.lr=3e-3",
    "train.warmup_iters=30",
    "train.eval_interval=400",  # one evaluation, at the end: best.safetensors = the final weights
]


@pytest.fixture(scope="session")
def seq2seq_run(tmp_path_factory) -> Path:
    """The upper-casing run of `upper_pairs` (character vocabulary), trained once, through the command line."""
    root = tmp_path_factory.mktemp("s2s")
    data = write_tsv(root / "upper.tsv", ("src", "tgt"), [(w, w.upper()) for w in upper_case_words()])
    args = ["train", "seq2seq", "--data", str(data), "--source-col", "src", "--target-col", "tgt"]
    r = cli(*args, *(x for s in SEQ2SEQ_TINY for x in ("--set", s)), "--device", "cpu", "--out", str(root / "run"))
    assert r.returncode == 0, r.stderr
    assert "exact match (greedy): train " in r.stdout, r.stdout
    return root / "run"


# ---- a real browser: Debian's Chromium, driven by playwright (never a downloaded one) ----
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip("needs Chromium at /usr/bin/chromium: apt-get install -y chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


# ---- the user's install: a wheel of this checkout in a new venv, as `make demo` installs it (not editable) ----
ROOT = Path(__file__).resolve().parents[1]
USER_EXTRAS = "serve,hf"  # what `make demo` installs beside the package: the extras the README's commands use


def fresh_copy(target: Path) -> Path:
    """The project's files as a fresh clone of this working tree would have them once committed: tracked and new
    files that git does not ignore (no runs/, no .venv), links kept as links."""
    import shutil
    import subprocess

    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listed, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        source, copy = ROOT / name, target / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            copy.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, copy)
    return target


@pytest.fixture(scope="session")
def user_install(tmp_path_factory) -> Path:
    """The bin folder of a new venv holding torch's CPU build (the version this suite runs), then the wheel built
    from a fresh copy of this checkout with the extras `make demo` installs: what a user gets, not the suite's
    own environment. Needs the package index (PyPI) for the package's dependencies."""
    import subprocess
    import venv

    root = tmp_path_factory.mktemp("user-install")
    source = fresh_copy(root / "source")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(source), "--no-deps", "-w", str(root / "wheel")], check=True, timeout=600)
    (wheel,) = (root / "wheel").glob("tinyformer-*.whl")
    venv.create(root / "venv", with_pip=True)
    bin_dir = root / "venv" / "bin"
    pip = [str(bin_dir / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    torch_version = torch.__version__.split("+")[0]
    subprocess.run([*pip, "install", f"torch=={torch_version}"], check=True, timeout=900)
    subprocess.run([*pip, "install", f"{wheel}[{USER_EXTRAS}]"], check=True, timeout=900)
    return bin_dir
