"""The masked-LM and classify tasks end to end: tiny runs through the one Trainer and the CLI."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from tinyformer.cli import main
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.errors import UserError
from tinyformer.runs import load_run

TINY_BERT = ["model.n_layer=1", "model.n_head=2", "model.n_embd=16", "model.d_ff=32", "model.block_size=32"]
FAST = ["train.max_iters=6", "train.eval_interval=3", "train.batch_size=4", "train.log_interval=2", "train.device=cpu"]


def sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory) -> Path:
    src = Path(__file__).parents[1] / "conftest.py"  # any English-ish text will do for a tokenizer
    text = (src.read_text() + "\n\n") * 30
    data = tmp_path_factory.mktemp("mlm") / "text.txt"
    data.write_text(text)
    out = data.parent / "run"
    args = ["train", "mlm", "--data", str(data), "--out", str(out)]
    args += sets(*TINY_BERT, *FAST, "data.seq_len=24", "data.vocab_size=200")
    assert main(args) == 0
    return out


def test_mlm_run_folder_has_a_huggingface_tokenizer_and_scores(mlm_run):
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(mlm_run / "tokenizer.json")).token_to_id("[MASK]") == 4
    val = [json.loads(x) for x in (mlm_run / "metrics.jsonl").read_text().splitlines() if '"val"' in x]
    assert [r["step"] for r in val] == [0, 3, 6] and all(0.0 <= r["masked_acc"] <= 1.0 for r in val)
    for r in val:
        assert r["perplexity"] == pytest.approx(2.718281828 ** r["loss"], rel=1e-6)


def test_fill_prints_top_k_with_falling_probabilities(mlm_run, capsys):
    assert main(["fill", str(mlm_run), "the [MASK] of", "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[MASK] #1:" and len(lines) == 4
    probs = [float(line.split()[-1]) for line in lines[1:]]
    assert not any(line.split()[0].startswith("[") for line in lines[1:])  # no [PAD], [CLS], ... as a filler
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0


def test_fill_and_eval_errors_are_one_line(mlm_run, capsys):
    for args, words in (
        (["fill", str(mlm_run), "no mask here"], "has no [MASK]"),
        (["fill", str(mlm_run), "[MASK]", "--top", "0"], "--top 0"),
        (["classify", str(mlm_run), "a text"], "needs a `train classify` run"),
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1


def test_eval_mlm_scores_the_whole_held_out_split(mlm_run, capsys):
    from tinyformer.tasks.mlm import MLMTask

    run = load_run(mlm_run)
    task = MLMTask.prepare(run.config, run.tokenizer)
    assert main(["eval", str(mlm_run)]) == 0
    masked = int(capsys.readouterr().out.split(" masked tokens")[0].split()[-1].replace(",", ""))
    held_out_pieces = task.val_batch[0].numel() - 2 * len(task.val_batch[0])  # every window but [CLS] and [SEP]
    assert held_out_pieces >= len(task.val) - 22  # the windows cover the held-out stream (a tail shorter than one)
    assert abs(masked / held_out_pieces - 0.15) < 0.03


def test_viz_attention_works_on_the_masked_lm(mlm_run, tmp_path):
    assert main(["viz", "attention", str(mlm_run), "--text", "the test of it", "--out", str(tmp_path)]) == 0
    assert list(tmp_path.glob("*.png"))


# ---- classify -------------------------------------------------------------------------------------------------------
WORDS = {"sea": "ship sail wave salt tide", "war": "sword shield blood march siege", "love": "kiss heart dear sweet"}


def labelled_csv(path: Path, n: int = 40) -> Path:
    """An easy table: each label has its own words, so a working classifier scores 1.0."""
    rng = random.Random(0)
    lines = ["text,label"]
    for i in range(n):
        label = list(WORDS)[i % 3]
        lines.append(" ".join(rng.choices(WORDS[label].split(), k=rng.randint(2, 6))) + f",{label}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("encoder", ["transformer", "lstm"])
def test_classify_trains_on_a_table_and_scores_its_test_split(tmp_path, encoder, capsys):
    data = labelled_csv(tmp_path / "easy.csv", 60)
    out = tmp_path / encoder
    fast = [
        "data.seq_len=32",
        "train.max_iters=60",
        "train.eval_interval=20",
        "train.batch_size=8",
        "train.lr=3e-3",
        "train.device=cpu",
    ]
    args = ["train", "classify", "--data", str(data), "--out", str(out)]
    assert main(args + sets(f"model.encoder={encoder}", "model.n_layer=1", *TINY_BERT[1:], *fast)) == 0
    scores = json.loads((out / "test.json").read_text())
    assert scores["acc"] == 1.0 and scores["macro_f1"] == 1.0 and scores["majority_acc"] < 0.5
    assert sum(map(sum, scores["confusion"])) == scores["n"] == 12  # 20% of 60, stratified
    assert (out / "confusion.png").stat().st_size > 10_000
    capsys.readouterr()
    assert main(["classify", str(out), "sword and blood"]) == 0
    assert capsys.readouterr().out.split()[0] == "war"


def test_classify_table_errors_name_the_column(tmp_path, capsys):
    data = labelled_csv(tmp_path / "t.csv")
    assert main(["train", "classify", "--data", str(data), "--label-col", "speaker"]) == 2
    err = capsys.readouterr().err
    assert "no column 'speaker'" in err and "text, label" in err and err.count("\n") == 1


def test_pretrained_init_copies_the_masked_lm_encoder(mlm_run, tmp_path, capsys):
    from safetensors.torch import load_file

    from tinyformer.runs import prepare_run
    from tinyformer.tasks.classify import ClassifyTask

    data = labelled_csv(tmp_path / "t.csv")
    overrides = ["model.n_layer=1", "data.seq_len=24", *TINY_BERT[1:], f"model.init_from={json.dumps(str(mlm_run))}"]
    config, task_cls, _, _ = prepare_run("classify", [], [f"data.path={json.dumps(str(data))}", *overrides])
    task = ClassifyTask.prepare(config)
    assert task.tokenizer.vocab_size == SubwordTokenizer.load(mlm_run / "tokenizer.json").vocab_size
    model = task.build_model()
    task.init_model(model, load_run(mlm_run))
    said = capsys.readouterr().out  # one line, as for MiniLM: where the encoder came from
    assert said.startswith(f"model.init_from={str(mlm_run)!r}: the encoder of that masked-LM run") and "6 steps" in said
    mlm = load_file(mlm_run / "best.safetensors")
    for name, p in model.encoder.state_dict().items():
        assert torch.equal(p, mlm[f"bert.{name}"]), name
    task.config.model.n_embd = 32  # a size that does not match the masked-LM run
    with pytest.raises(UserError, match="n_embd"):
        task.init_model(task.build_model(), load_run(mlm_run))
    task.config.model.n_embd, task.config.data.seq_len = 16, 32  # longer than the masked LM's training windows
    with pytest.raises(UserError, match="never trained"):
        task.init_model(task.build_model(), load_run(mlm_run))


def test_finish_scores_the_best_validation_weights(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from tinyformer.tasks.classify import ClassifyTask

    # evaluations at steps 0, 4, 8, 12: the lowest error rate is step 8's (step 0's untrained weights never count),
    # the lowest loss step 4's, neither the last
    seen, evals = {}, iter([(0.1, 0.1), (1.0, 0.5), (1.5, 0.25), (2.0, 0.75)])
    finish = ClassifyTask.finish
    monkeypatch.setattr(ClassifyTask, "finish", lambda self, m, d: seen.update(m.state_dict()) or finish(self, m, d))
    monkeypatch.setattr(ClassifyTask, "evaluate", lambda *a: dict(zip(("loss", "error"), next(evals), strict=True)))
    data, out = labelled_csv(tmp_path / "t.csv"), tmp_path / "run"
    fast = ["data.seq_len=32", "train.max_iters=12", "train.eval_interval=4", "train.device=cpu"]
    assert main(["train", "classify", "--data", str(data), "--out", str(out), *sets(*TINY_BERT, *fast)]) == 0
    best, latest = load_file(out / "best.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(seen[k], best[k]) for k in best)
    assert any(not torch.equal(seen[k], latest[k]) for k in latest)
    assert load_run(out).state.best_val == 0.25  # chosen by error rate, not by loss


def test_classifier_run_resumes_and_loads_with_its_list_fields(tmp_path):
    data, out = labelled_csv(tmp_path / "t.csv"), tmp_path / "cnn"
    fast = ["train.max_iters=4", "train.eval_interval=2", "train.device=cpu", "model.encoder=cnn"]
    args = ["train", "classify", "--data", str(data), "--out", str(out), *sets(*fast, "model.kernel_sizes=[2, 3]")]
    assert main(args) == 0
    assert main(["train", "classify", "--resume", str(out), "--set", "train.max_iters=6"]) == 0
    run = load_run(out)
    assert run.config.model.kernel_sizes == [2, 3] and run.config.model.labels == ["love", "sea", "war"]
    assert run.state.step == 6 and [c.kernel_size[0] for c in run.model.encoder.convs] == [2, 3]


def test_classify_user_errors_are_one_line(tmp_path, capsys, mlm_run):
    two_each = tmp_path / "two.csv"
    two_each.write_text("text,label\na b,x\nc d,x\ne f,y\ng h,y\n")
    (tmp_path / "arr.json").write_text('[{"text": "a", "label": "b"}]')
    cnn = tmp_path / "cnn"
    fast = ["train.max_iters=2", "train.eval_interval=2", "train.device=cpu", "model.encoder=cnn"]
    assert (
        main(["train", "classify", "--data", str(labelled_csv(tmp_path / "t.csv")), "--out", str(cnn), *sets(*fast)])
        == 0
    )
    capsys.readouterr()
    cases = [
        (["train", "classify", "--data", str(two_each)], "val split would be empty"),
        (["train", "classify", "--data", str(tmp_path / "arr.json")], "one object per line"),
        (["train", "classify", "--set", "model.kernel_sizes=[2, 'x']"], "model.kernel_sizes[1] expects int"),
        (["viz", "attention", str(cnn), "--text", "sea", "--out", str(tmp_path)], "'cnn' classifier has no attention"),
        (["fill", str(mlm_run), "caf\udce9 [MASK]"], "not valid UTF-8"),
        (["classify", str(cnn), "   "], "the text is empty"),
    ]
    for args, words in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_macro_f1_and_confusion_by_hand():
    from tinyformer.tasks.classify import scores

    gold = torch.tensor([0, 0, 0, 1, 1, 2])
    pred = torch.tensor([0, 0, 1, 1, 2, 2])
    r = scores(pred, gold, 3)
    assert r["confusion"] == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    f1 = [2 * 1 * (2 / 3) / (1 + 2 / 3), 0.5, 2 * 0.5 * 1 / 1.5]  # per class: P=1,R=2/3; P=1/2,R=1/2; P=1/2,R=1
    assert r["acc"] == pytest.approx(4 / 6) and r["macro_f1"] == pytest.approx(sum(f1) / 3)
