"""A folder of tiny runs, one of each task, that the playground tests serve (trained once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import FAST, TINY
from tests.tasks.test_nlp_tasks import labelled_csv
from tests.tasks.test_token_heads import names_sentences, qa_records, write_conll, write_jsonl
from tinyformer.cli import main

ENCODER = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=16",
    "model.d_ff=32",
    "model.block_size=32",
    "data.seq_len=24",
]
STEPS = ["train.max_iters=4", "train.eval_interval=2", "train.batch_size=4", "train.device=cpu"]


def sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory, text_slice) -> Path:
    """runs/{gpt, nested/reverse, classify, tag, qa, mlm}: every task the playground has a view for."""
    root = tmp_path_factory.mktemp("served")
    data = tmp_path_factory.mktemp("served-data")
    train = {
        "gpt": ["gpt", "--data", str(text_slice), *TINY, *FAST, *sets("train.max_iters=20", "sample.tokens=20")],
        "nested/reverse": [
            "reverse",
            *sets("model.n_embd=32", "model.d_ff=64", "data.n_train=300", "data.n_val=40", *STEPS),
        ],
        "classify": ["classify", "--data", str(labelled_csv(data / "easy.csv", 30)), *sets(*ENCODER, *STEPS)],
        "tag": ["tag", "--data", str(write_conll(data / "names.conll", names_sentences())), *sets(*ENCODER, *STEPS)],
        "qa": [
            "qa",
            "--data",
            str(write_jsonl(data / "qa.jsonl", qa_records())),
            *sets(*ENCODER, *STEPS, "data.stride=8"),
        ],
        "mlm": ["mlm", "--data", str(text_slice), *sets(*ENCODER, *STEPS, "data.vocab_size=200")],
    }
    for name, args in train.items():
        assert main(["train", *args, "--out", str(root / name)]) == 0, name
    return root


@pytest.fixture(scope="session")
def text_slice(tmp_path_factory) -> Path:
    import os

    from tests.conftest import SYNTHETIC

    src = os.environ.get("TINYFORMER_DATA")
    text = Path(src).read_text(encoding="utf-8")[:30_000] if src and Path(src).is_file() else SYNTHETIC
    path = tmp_path_factory.mktemp("slice") / "slice.txt"
    path.write_text(text, encoding="utf-8")
    return path
