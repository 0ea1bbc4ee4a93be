"""Shared fixtures: tiny configs and local text only (no network)."""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
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

SHARED = {"user_install": "install"}  # minutes to make


def pytest_configure(config):
    """Under xdist (`-n`), tests are handed to the workers in the order `pytest_collection_modifyitems` leaves
    them in, a group where its first test stands: not the largest groups first (xdist's default reorder)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def rank(item) -> int:
    """Where a test goes in the order the workers take tests in: the longest work first, each chain of it as
    early as it can start, so that the last minutes of a run on two workers are short tests on both. First the
    CI-size lab's build (the sources nothing else makes, and every study it finds unmade), then the user's
    install (a new venv), then the study tests (which make their studies beside the build), then the guide's
    pages and notebooks (which read what those made), then every other slow test, and the fast ones last."""
    names = getattr(item, "fixturenames", ())
    if item.name.startswith("test_quick_build_runs_every_source"):
        return 0
    if "user_install" in names:
        return 1
    if "quick_study" in names and item.module.__name__ != "tests.test_docs_run":
        return 2
    if "notebook_runs" in names or "quick_study" in names:
        return 3
    return 4 if item.get_closest_marker("slow") else 5


def pytest_collection_modifyitems(config, items):
    """The tests that use the user's install share one xdist worker (`xdist_group`), so it is made once a session,
    as in a run without workers (the CI-size lab is shared by every worker: `QuickLab`); and the tests are ordered
    by `rank`, keeping their collected order within a rank."""
    for item in items:
        group = next((g for name, g in SHARED.items() if name in getattr(item, "fixturenames", ())), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=rank)  # stable


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


# ---- the CI-sized lab: every source made once per session, where the lab's quick build then finds it ----
HAS_PLAY = Path(os.environ.get("TINYFORMER_DATA", "/nonexistent")).is_file()
needs_play = pytest.mark.skipif(not HAS_PLAY, reason="needs the play: set TINYFORMER_DATA")


@dataclass
class Study:
    folder: Path
    report: Path
    stdout: str  # what the study printed while it was made (by whichever worker made it)


def session_folder(tmp_path_factory) -> Path:
    """The session's temporary folder, which all of its xdist workers share (each worker's basetemp is a folder
    in it); without workers, the basetemp itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class QuickLab:
    """The runs root of the CI-sized lab build (`lab build --quick`), one for the whole session, shared by its
    workers. A source is made by the first test, on any worker, that asks for it, with the lab's own quick
    command (`tools.lab.build.produce`, through the CLI's entry point) after the sources it reads; a worker that
    asks meanwhile waits for it, then reuses it, so nothing trains twice.

    Making holds a lock of the source's *family*: the sources that write under one folder of the root (the
    bake-off, its masked LM and the MiniLM rows all write experiments/classifiers; the reversal ablation and its
    cells experiments/reverse-ablation). `study(name)` returns once the study's whole family is complete, so a
    test that copies its folder never copies a source half made."""

    def __init__(self, root: Path):
        self.runs = root / "lab-quick"
        self.locks = root / "lab-quick-locks"  # beside the runs root, never in it: the build reads every folder
        self.runs.mkdir(exist_ok=True)
        self.locks.mkdir(exist_ok=True)
        self._held: set[str] = set()

    @staticmethod
    def family(name: str) -> str:
        from tinyformer.lab.sources import SOURCES

        return "/".join(Path(SOURCES[name].path).parts[:2])

    @contextlib.contextmanager
    def holding(self, family: str):
        """This worker holds `family`'s lock (again, if it already does: making a source makes what it reads)."""
        import fcntl

        if family in self._held:
            yield
            return
        with open(self.locks / (family.replace("/", "--") + ".lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            self._held.add(family)
            try:
                yield
            finally:
                self._held.discard(family)
                fcntl.flock(f, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def holding_all(self, families):
        """This worker holds the lock of every family in `families` (taken in order) until the block ends."""
        with contextlib.ExitStack() as stack:
            for family in sorted(set(families)):
                stack.enter_context(self.holding(family))
            yield

    def printed(self, name: str) -> Path:
        return self.locks / (name.replace("/", "--") + ".printed.txt")

    def make(self, name: str) -> None:
        """Source `name` complete under the root: made here, after what it reads, unless it already is."""
        from tinyformer.cli import main
        from tinyformer.lab.sources import SOURCES, complete, needs
        from tools.lab.build import produce

        source = SOURCES[name]
        for other in needs(source, True):
            self.make(other)
        with self.holding(self.family(name)):
            if complete(source, self.runs / source.path, True):
                return
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                produce(source, self.runs, True, main)
            self.printed(name).write_text(printed.getvalue(), encoding="utf-8")

    def family_of(self, name: str) -> list[str]:
        from tinyformer.lab.sources import SOURCES

        return [n for n in SOURCES if self.family(n) == self.family(name)]

    def study(self, name: str) -> Study:
        """The study `experiments/NAME`, its whole family complete."""
        from tinyformer.lab.sources import SOURCES, needs

        source = SOURCES[f"experiments/{name}"]
        self.studies([source.name])
        printed = [self.printed(n) for n in [*needs(source, True), source.name]]
        stdout = "".join(p.read_text(encoding="utf-8") for p in printed if p.is_file())
        folder = self.runs / source.path
        return Study(folder, folder / source.done, stdout)

    def studies(self, names) -> None:
        """Every source in the families of the sources `names` (and what they read) complete."""
        for name in names:
            for member in self.family_of(name):
                self.make(member)

    def copy(self, names, target: Path) -> Path:
        """The families of the sources `names`, complete, copied from the root into `target` (a runs root of
        its own, laid out the same)."""
        self.studies(names)
        for family in dict.fromkeys(self.family(n) for n in names):
            copy_runs(self.runs / family, target / family)
        return target


WEIGHTS = (".safetensors", ".pt", ".bin")  # a run's weights and state: written once, atomically, never in place


def copy_runs(source: Path, target: Path) -> Path:
    """A folder of runs copied to `target` to be used there: weights hard-linked (a finished run never rewrites
    them, and a new save replaces the name rather than writing into the file, so the original cannot change),
    every other file copied, a writer's temp files (`.NAME.tmp`) left out."""

    def link_or_copy(src: str, dst: str) -> None:
        if src.endswith(WEIGHTS):
            Path(dst).unlink(missing_ok=True)  # a copy made again over an earlier one (dirs_exist_ok)
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(
        source, target, copy_function=link_or_copy, ignore=shutil.ignore_patterns(".*.tmp"), dirs_exist_ok=True
    )
    return target


@pytest.fixture(scope="session")
def quick_lab(tmp_path_factory) -> QuickLab:
    return QuickLab(session_folder(tmp_path_factory))


@pytest.fixture(scope="session")
def quick_runs(quick_lab) -> Path:
    """The runs root of the CI-sized lab build (`lab build --quick`), shared by the session's workers: the study
    tests make their studies here, in the folders the lab reads, and tests/lab/test_build.py builds the guide from
    the same root."""
    return quick_lab.runs


@pytest.fixture(scope="session")
def quick_study(quick_lab):
    """`quick_study(name)`: the study made as `lab build --quick` makes it, once a session (see `QuickLab`)."""
    return quick_lab.study


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
    # --no-compile: no .pyc written for every installed module at install time (torch's alone: 14 s of 20 s on 2
    # cores); Python writes those it imports as it imports them
    install = [str(bin_dir / "python"), "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-compile"]
    torch_version = torch.__version__.split("+")[0]
    subprocess.run([*install, f"torch=={torch_version}"], check=True, timeout=900)
    subprocess.run([*install, f"{wheel}[{USER_EXTRAS}]"], check=True, timeout=900)
    return bin_dir
