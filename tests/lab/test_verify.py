"""Staleness by behaviour (`tools.lab.verify`, `make lab VERIFY=1`), both ways, on a scratch clone of the code:

- a commit that changes no behaviour (a refusal of bad input in config.py, a comment, a renamed local) keeps
  every source it reaches fresh: its CI-size build is bit-identical, and the source says so;
- a commit that moves a number (another init std in the encoder-decoder, another evaluation seed for the
  GPT) stales exactly the sources it reaches, naming the facts and weights that moved.

The sources are the two cheapest that train (`make demo`'s GPT and the reversal's CPU preset) and one that
trains nothing (a recipe's table). One stamp has a fingerprint taken when it was made; the other has none,
so its stamped commit's build is made again in a scratch worktree, as for a stamp from before fingerprints.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import needs_play
from tinyformer.lab.placeholders import made_text
from tools.lab.verify import fingerprint, made_now, moved, verify

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["lab/demo", "lab/reverse-fast", "lab/recipes-gpt"]
pytestmark = [pytest.mark.slow, needs_play]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> tuple[Path, dict]:
    """A git repository holding this tree's code at one commit, and the stamps of NAMES made there (the GPT's
    with the fingerprint its making took, the others without)."""
    root = tmp_path_factory.mktemp("verify") / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("src", "tools"):
        shutil.copytree(ROOT / part, root / part, ignore=ignore)
    (root / "configs").symlink_to("src/tinyformer/presets")
    git(root.parent, "init", "-q", "-b", "main", str(root))
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "made")
    commit = git(root, "rev-parse", "--short=10", "HEAD")
    stamps = {n: {"commit": commit, "date": "2026-12-07 00:00 UTC", "dirty": False} for n in NAMES}
    made = made_now(root, root / "runs", "lab/demo")
    stamps["lab/demo"]["fingerprints"] = {made["kind"]: made}
    return root, stamps


def commit_change(root: Path, edits: dict[str, tuple[str, str]], branch: str) -> str:
    """A branch from the stamped commit with `edits` ({file: (old text, new text)}) committed."""
    git(root, "checkout", "-q", "-B", branch, "main")
    for rel, (old, new) in edits.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{rel}: the text to change is not there once: {old!r}"
        path.write_text(text.replace(old, new), encoding="utf-8")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", branch)
    return git(root, "rev-parse", "--short=10", "HEAD")


def check(root: Path, stamps: dict, tmp_path: Path, runs: Path | None = None) -> tuple[dict, dict]:
    """Run the check as `make lab VERIFY=1` does, on a copy of the stamps, into `runs` (default: a new folder
    under `tmp_path`): (what it found, the stamps after)."""
    docs = tmp_path / "docs"
    docs.mkdir(parents=True)
    (docs / "facts.json").write_text(json.dumps({"stamps": json.loads(json.dumps(stamps))}), encoding="utf-8")
    found = verify(root, docs, runs or tmp_path / "runs", NAMES, jobs=2)
    return found, json.loads((docs / "facts.json").read_text(encoding="utf-8"))["stamps"]


NEUTRAL = {
    "src/tinyformer/config.py": (  # a refusal of bad input no figure reaches
        "        if not (math.isfinite(self.time_budget)",
        "        if self.batch_size > 10**9:\n"
        "            raise ValueError(f'train.batch_size={self.batch_size} is over a billion')\n"
        "        if not (math.isfinite(self.time_budget)",
    ),
    "src/tinyformer/models/gpt.py": ("\n\ndef param_count(", "\n\n# A comment, nothing more.\ndef param_count("),
    "src/tinyformer/layers/init.py": (  # a renamed local
        "        nn.init.normal_(m.weight, std=std)",
        "        spread = std\n        nn.init.normal_(m.weight, std=spread)",
    ),
}


def test_a_commit_that_changes_no_behaviour_keeps_every_source_fresh(clone, tmp_path):
    root, stamps = clone
    head = commit_change(root, NEUTRAL, "neutral")
    found, after = check(root, stamps, tmp_path)
    assert set(found) == set(NAMES)  # config.py is the code of every command
    for name, record in found.items():
        assert record["moved"] == [], (name, record["moved"])
        assert record["commit"] == head
        text = made_text(after[name], [])
        assert text.endswith(f"behaviour unchanged through {head[:7]}") and "stale" not in text, text
    assert after["lab/reverse-fast"]["fingerprints"][found["lab/reverse-fast"]["kind"]]["weights"]  # made again


def test_a_commit_that_moves_a_number_stales_exactly_the_sources_it_reaches_and_names_what_moved(clone, tmp_path):
    root, stamps = clone
    wider = (
        "nn.init.normal_(m.weight, std=m.embedding_dim**-0.5)",
        "nn.init.normal_(m.weight, std=1.5 * m.embedding_dim**-0.5)",
    )
    commit_change(root, {"src/tinyformer/models/seq2seq_parts.py": wider}, "init-std")
    found, after = check(root, stamps, tmp_path / "std", tmp_path / "runs")
    assert found["lab/reverse-fast"]["moved"], "a wider embedding init left the reversal's build the same"
    assert "weights model.safetensors" in found["lab/reverse-fast"]["moved"]
    assert any(m.startswith("fact ") and "loss" in m for m in found["lab/reverse-fast"]["moved"])
    assert not found.get("lab/demo", {}).get("moved")  # the GPT does not run the encoder-decoder's init
    assert "stale: behaviour changed" in made_text(after["lab/reverse-fast"], [])

    seed = (
        'seed = derive(t.seed + 1) if t.eval_batches == "fixed"',
        'seed = derive(t.seed + 2) if t.eval_batches == "fixed"',
    )
    commit_change(root, {"src/tinyformer/tasks/gpt.py": seed}, "eval-seed")
    found, after = check(root, stamps, tmp_path / "seed", tmp_path / "runs")  # one runs/, as a user has
    what = found["lab/demo"]["moved"]
    assert "fact best val loss" in what and not any(m.startswith("weights") for m in what), what  # same training
    assert not found.get("lab/reverse-fast", {}).get("moved")
    assert "best val loss" in made_text(after["lab/demo"], [])

    # the next commit, which only comments the GPT, is built afresh: not read from the eval seed's builds
    commit_change(root, {"src/tinyformer/models/gpt.py": NEUTRAL["src/tinyformer/models/gpt.py"]}, "gpt-comment")
    found, after = check(root, stamps, tmp_path / "comment", tmp_path / "runs")
    assert found["lab/demo"]["moved"] == [], found["lab/demo"]["moved"]


def test_fingerprints_compare_facts_weights_and_printed_lines_and_leave_out_times(tmp_path):
    a = {"facts": {"best val loss": "1.5", "steps": "30"}, "weights": {"model.safetensors": "ab"}, "printed": {}}
    b = json.loads(json.dumps(a))
    assert moved(a, b) == []
    b["facts"]["best val loss"] = "1.6"
    b["weights"]["model.safetensors"] = "cd"
    b["printed"]["line 2"] = "exact match 0.5"
    assert moved(a, b) == ["fact best val loss", "weights model.safetensors", "printed line 2"]
    a["facts"]["table 3: 32 / manual"] = "0.22 ms / 10 MiB"  # a time and a memory size, whatever the key says
    b["facts"]["table 3: 32 / manual"] = "0.36 ms / 10 MiB"
    assert moved(a, b) == ["fact best val loss", "weights model.safetensors", "printed line 2"]
    folder = tmp_path / "lab" / "gpt-sample"
    folder.mkdir(parents=True)
    (folder / "stdout.txt").write_text("ROMEO: a sample\n(300 tokens in 1.2 s, 250 tokens/s)\n", encoding="utf-8")
    assert fingerprint("lab/gpt-sample", tmp_path)["printed"] == {"line 1": "ROMEO: a sample"}
