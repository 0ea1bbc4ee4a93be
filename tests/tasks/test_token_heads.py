"""Token heads and their tasks: padding invariance of the tagger and the span extractor, the tagger's loss at first
pieces only, tiny tagging and QA sets fitted to 100 % through `tinyformer train`, the `tag` and `qa` commands, bad
input as one-line errors, a tagger started from a masked-LM run, and both built-in tasks end to end."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.cli_helpers import user_error
from tinyformer.cli import main
from tinyformer.data.tokenizers import IGNORE
from tinyformer.models.token_heads import EncoderHeadConfig, SpanExtractor, TokenTagger
from tinyformer.runs import load_run

TAGS = ["O", "B-PER", "I-PER"]
V = 40  # vocabulary of the unit-test models


def sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def head_config(positions: str = "rope", backend: str = "sdpa") -> EncoderHeadConfig:
    sizes = dict(n_embd=16, n_layer=2, n_head=2, d_ff=32, block_size=32)
    return EncoderHeadConfig(V, TAGS, **sizes, positions=positions, backend=backend, dropout=0.0)


def padded(rows: list[torch.Tensor], width: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) (B, width): the padding holds random ids, not [PAD], so only the mask can hide it."""
    ids = torch.randint(5, V, (len(rows), width), generator=g)  # (B, T)
    mask = torch.zeros(len(rows), width, dtype=torch.long)  # (B, T)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return ids, mask


# ---------------------------------------------------------------------------- padding invariance


@pytest.mark.parametrize("backend", ["sdpa", "manual"])
@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_tagger_is_padding_invariant(positions, backend):
    torch.manual_seed(0)
    model = TokenTagger(head_config(positions, backend)).eval()
    g = torch.Generator().manual_seed(1)
    sentence, other = torch.randint(5, V, (7,), generator=g), torch.randint(5, V, (25,), generator=g)
    with torch.no_grad():
        alone = model(sentence[None], torch.ones(1, 7, dtype=torch.long)).logits[0]  # (7, C)
        for width in (7, 12, 25):
            ids, mask = padded([sentence, other[:width]], width, g)
            logits = model(ids, mask).logits[0, :7]  # (7, C)
            torch.testing.assert_close(logits, alone, atol=1e-5, rtol=0)
            assert torch.equal(logits.argmax(-1), alone.argmax(-1))


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_span_extractor_is_padding_invariant(positions):
    torch.manual_seed(0)
    model = SpanExtractor(head_config(positions)).eval()
    g = torch.Generator().manual_seed(2)
    sentence, other = torch.randint(5, V, (9,), generator=g), torch.randint(5, V, (24,), generator=g)
    segments = torch.tensor([0] * 4 + [1] * 5)  # question, then passage
    with torch.no_grad():
        alone = model(sentence[None], torch.ones(1, 9, dtype=torch.long), segments[None])
        for width in (9, 16, 24):
            ids, mask = padded([sentence, other[:width]], width, g)
            types = torch.randint(0, 2, (2, width), generator=g)  # padding segments are random too
            types[0, :9] = segments
            out = model(ids, mask, types)
            torch.testing.assert_close(out.start_logits[0, :9], alone.start_logits[0], atol=1e-5, rtol=0)
            torch.testing.assert_close(out.end_logits[0, :9], alone.end_logits[0], atol=1e-5, rtol=0)


def test_span_padding_never_wins_and_gets_no_probability():
    torch.manual_seed(0)
    model = SpanExtractor(head_config()).eval()
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(3, 12, (64,), generator=g)  # (B,): most rows mostly padding
    ids, mask = padded([torch.randint(5, V, (int(n),), generator=g) for n in lengths], 24, g)
    start = (torch.rand(64, generator=g) * lengths).long()  # (B,) gold positions inside each row
    end = (torch.rand(64, generator=g) * lengths).long()
    with torch.no_grad():
        out = model(ids, mask, (torch.arange(24) >= 2).long().expand(64, 24), start, end)
    pad, lowest = mask == 0, torch.finfo(torch.float32).min
    assert bool((out.start_logits[pad] == lowest).all()) and bool((out.end_logits[pad] == lowest).all())
    assert bool((out.start_logits.argmax(-1) < lengths).all()) and bool((out.end_logits.argmax(-1) < lengths).all())
    assert float(out.start_logits.softmax(-1)[pad].max()) == 0.0
    # the loss is the cross-entropy over each row's real positions only
    by_hand = [
        -(F.log_softmax(out.start_logits[i, :n], -1)[start[i]] + F.log_softmax(out.end_logits[i, :n], -1)[end[i]]) / 2
        for i, n in enumerate(lengths.tolist())
    ]
    torch.testing.assert_close(out.loss, torch.stack(by_hand).mean(), atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------- the tagger's loss


def test_tagger_loss_counts_only_labelled_positions():
    torch.manual_seed(0)
    model = TokenTagger(head_config()).eval()
    g = torch.Generator().manual_seed(4)
    ids, mask = padded([torch.randint(5, V, (10,), generator=g), torch.randint(5, V, (6,), generator=g)], 10, g)
    labels = torch.full((2, 10), IGNORE)  # (B, T): [CLS], [SEP], later pieces and padding unlabelled
    first = [(0, 1), (0, 2), (0, 5), (0, 8), (1, 1), (1, 3)]  # (row, position) of each word's first piece
    for k, (i, t) in enumerate(first):
        labels[i, t] = k % 3
    noise = torch.zeros(2, 10, 3)  # (B, T, C): added to the logits

    def shaken(module, args, output):
        return output + noise  # (B, T, C)

    hook = model.head.register_forward_hook(shaken)
    try:
        with torch.no_grad():
            base = model(ids, mask, labels)
            chosen = labels != IGNORE
            by_hand = F.cross_entropy(base.logits[chosen], labels[chosen])
            torch.testing.assert_close(base.loss, by_hand, atol=1e-6, rtol=0)
            noise[~chosen] = 100 * torch.randn(int((~chosen).sum()), 3, generator=g)  # logits at IGNORE positions
            assert float(model(ids, mask, labels).loss) == pytest.approx(float(base.loss), abs=1e-6)
            noise.zero_()
            noise[0, 5] = torch.tensor([5.0, -5.0, 0.0])  # the logits of one first piece
            assert abs(float(model(ids, mask, labels).loss) - float(base.loss)) > 1e-3
            noise.zero_()
            other = labels.clone()
            other[1, 3] = (int(labels[1, 3]) + 1) % 3  # one first piece's tag
            assert abs(float(model(ids, mask, other).loss) - float(base.loss)) > 1e-3
    finally:
        hook.remove()


# ---------------------------------------------------------------------------- tiny sets fitted through the CLI

FIRST_NAMES = ["Romeo", "Juliet", "Tybalt", "Mercutio", "Benvolio", "Rosaline"]
LAST_NAMES = ["Montague", "Capulet"]
FILLER = "the a sword love night speaks with to in of street garden sees meets at kind noble".split()
FIT = [  # a model and schedule that fit the 10 training sentences / questions below in 300 CPU steps
    "model.n_layer=1",
    "model.n_embd=32",
    "model.n_head=2",
    "model.d_ff=64",
    "model.block_size=32",
    "model.dropout=0.0",
    "train.max_iters=300",
    "train.eval_interval=300",  # one evaluation, at the end: best.safetensors = the final weights
    "train.batch_size=8",
    "train.lr=3e-3",
    "train.warmup_iters=10",
    "train.log_interval=100",
    "train.device=cpu",
]


def names_sentences(n: int = 12, seed: int = 0) -> list[tuple[list[str], list[str]]]:
    """Sentences of filler words with one or two names in them, some of two words (B-PER I-PER)."""
    rng, out = random.Random(seed), []
    for _ in range(n):
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 7))]
        tags = ["O"] * len(words)
        for _ in range(rng.randint(1, 2)):
            k = rng.randrange(len(words) + 1)
            name = [rng.choice(FIRST_NAMES)] + ([rng.choice(LAST_NAMES)] if rng.random() < 0.4 else [])
            words[k:k] = name
            tags[k:k] = ["B-PER"] + ["I-PER"] * (len(name) - 1)
        out.append((words, tags))
    return out


def write_conll(path: Path, sentences: list[tuple[list[str], list[str]]]) -> Path:
    path.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(*s)) for s in sentences) + "\n", "utf-8")
    return path


FACTS = [
    ("Romeo", "loves", "Juliet", "Verona"),
    ("Tybalt", "fights", "Mercutio", "the street"),
    ("Juliet", "meets", "the friar", "the cell"),
    ("Benvolio", "follows", "Romeo", "the grove"),
    ("Paris", "courts", "Juliet", "the hall"),
    ("Mercutio", "mocks", "Tybalt", "the square"),
    ("The nurse", "carries", "a letter", "the garden"),
    ("Capulet", "hosts", "a feast", "his house"),
    ("Balthasar", "brings", "news", "Mantua"),
    ("Lady Montague", "mourns", "her son", "the tomb"),
    ("The prince", "banishes", "Romeo", "the square"),
    ("Friar John", "loses", "the letter", "the road"),
]


def qa_records() -> list[dict]:
    """One question per passage; half the answers sit past the first window of data.seq_len=24."""
    rows = []
    for i, (who, does, what, where) in enumerate(FACTS):
        fact, filler = f"In {where}, {who} {does} {what} at night.", "The moon is pale and the wind is cold."
        context = f"{fact} {filler}" if i % 2 else f"{filler} {fact}"
        answer = {"text": who, "answer_start": context.index(f"{who} {does}")}
        rows.append({"id": f"q{i}", "context": context, "question": f"Who {does} {what}?", "answers": [answer]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tag_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tag")
    data = write_conll(root / "names.conll", names_sentences())
    args = ["train", "tag", "--data", str(data), "--out", str(root / "run")]
    small = sets(*FIT, "data.seq_len=12", "data.vocab_size=100")  # names of several pieces, sentences of several rows
    assert main(args + small) == 0
    return root / "run"


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qa")
    data = write_jsonl(root / "facts.jsonl", qa_records())
    args = ["train", "qa", "--data", str(data), "--out", str(root / "run")]
    assert main(args + sets(*FIT, "data.seq_len=24", "data.stride=8")) == 0
    return root / "run"


def test_tag_run_fits_its_training_sentences(tag_run):
    from tinyformer.tasks.tag import TagTask

    run = load_run(tag_run, weights="latest")
    task = TagTask.prepare(run.config, run.tokenizer)
    gold = task.splits["train"].tags
    assert len(gold) == 10 and any("I-PER" in tags for tags in gold)
    rows = task.rows["train"]
    assert any(len(ids) - 2 > sum(label != IGNORE for label in labels) for ids, labels, _ in rows)
    assert len({i for _, _, i in rows}) == 10 < len(rows)  # some sentences are cut into several rows
    pred, loss = task.predict_split(run.model, "train")
    assert pred == gold and loss < 0.1


def test_qa_run_fits_its_training_questions(qa_run):
    from tinyformer.tasks.qa import QATask

    run = load_run(qa_run, weights="latest")
    task = QATask.prepare(run.config, run.tokenizer)
    assert len(task.splits["train"]) == 10 and all(len(ws) > 1 for ws in task.windows["train"])
    assert {w.start > 0 for ws in task.windows["train"] for w in ws} == {True, False}  # some windows miss the answer
    r = task.score(run.model, "train")
    assert r["em"] == 1.0 and r["f1"] == 1.0
    assert r["predictions"] == [e.answers[0][0] for e in task.splits["train"]]


def test_a_passage_asked_several_questions_is_encoded_once_into_the_same_windows(qa_run):
    from tinyformer.data.qa import make_windows

    tok, record = load_run(qa_run, weights=None).tokenizer, qa_records()[1]
    context, gold = record["context"], record["answers"][0]
    span = (gold["answer_start"], gold["answer_start"] + len(gold["text"]))
    asked = [(record["question"], span), ("Where?", None), ("Who is in the street?", (0, 2))]
    encoded: dict = {}
    shared = [make_windows(tok, q, context, 24, 8, a, 64, encoded) for q, a in asked]
    alone = [make_windows(tok, q, context, 24, 8, a, 64) for q, a in asked]
    assert [[vars(w) for w in ws] for ws in shared] == [[vars(w) for w in ws] for ws in alone]
    assert list(encoded) == [context] and len(shared[0]) > 1


# ---------------------------------------------------------------------------- the commands


def test_tag_command_prints_each_word_with_its_tag(tag_run, capsys):
    from tinyformer.tasks.tag import TagTask

    run = load_run(tag_run, weights=None)
    train = TagTask.prepare(run.config, run.tokenizer).splits["train"]
    capsys.readouterr()
    for words, tags in list(zip(train.words, train.tags))[:4]:
        assert main(["tag", str(tag_run), " ".join(words)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split() for line in lines] == [[w, t] for w, t in zip(words, tags)]
    assert main(["tag", str(tag_run), "Romeo, come! o'er the wall."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["Romeo", ",", "come", "!", "o'er", "the", "wall", "."]
    assert all(len(line.split()) == 2 and line.split()[1] in TAGS for line in lines)


def answer_lines(out: str) -> tuple[str, int, int]:
    text, info = out.rsplit("\n(probability ", 1)
    a, b = re.search(r"characters (\d+)-(\d+) of the passage", info).groups()
    return text, int(a), int(b)


def test_qa_command_answers_with_a_span_of_the_passage(qa_run, tmp_path, capsys):
    from tinyformer.tasks.qa import QATask

    run = load_run(qa_run, weights=None)
    capsys.readouterr()
    for e in QATask.prepare(run.config, run.tokenizer).splits["train"][:3]:
        passage = tmp_path / "passage.txt"
        passage.write_text(e.context, encoding="utf-8")
        assert main(["qa", str(qa_run), "--context", str(passage), e.question]) == 0
        from_file = capsys.readouterr().out
        text, a, b = answer_lines(from_file.strip())
        assert text == e.answers[0][0] and e.context[a:b] == text  # fitted: the gold answer, where it stands
        assert main(["qa", str(qa_run), "--context", e.context, e.question]) == 0
        assert capsys.readouterr().out == from_file  # the text itself instead of a file: the same answer
    unseen = "A stranger walks in the rain with a lantern while the bells ring."
    long = " ".join(["The moon is pale and the wind is cold."] * 8 + ["In Verona, Romeo loves Juliet at night."])
    assert len(long) > 255  # one line longer than a file name may be: the text itself, in many windows
    for passage, question in ((unseen, "Who walks in the rain?"), (long, "Who loves Juliet?")):
        assert main(["qa", str(qa_run), "--context", passage, question]) == 0
        text, a, b = answer_lines(capsys.readouterr().out.strip())
        assert text and passage[a:b] == text


def test_finished_runs_write_their_test_scores(tag_run, qa_run):
    tag = json.loads((tag_run / "test.json").read_text())
    assert set(tag) == {"unseen_names", "test"} and tag["unseen_names"] == []
    assert {"f1", "precision", "recall", "token_acc", "gazetteer", "n", "loss"} <= set(tag["test"])
    assert tag["test"]["n"] == 1 and 0.0 <= tag["test"]["gazetteer"]["f1"] <= 1.0
    qa = json.loads((qa_run / "test.json").read_text())
    assert {"em", "f1", "loss", "n", "examples"} <= set(qa) and qa["n"] == 1 and qa["baseline"] is None
    assert 0.0 <= qa["em"] <= qa["f1"] <= 1.0  # one question: exact match implies F1 1
    assert (qa_run / "span.png").stat().st_size > 5_000


def test_eval_rescores_the_test_split_as_the_finished_run_did(tag_run, qa_run, capsys):
    capsys.readouterr()
    for run in (tag_run, qa_run):
        assert main(["eval", str(run)]) == 0
        saved = json.loads((run / "test.json").read_text())
        scores = saved.get("test", saved)
        lines = capsys.readouterr().out.splitlines()
        assert f"F1 {scores['f1']:.4f}" in lines[0], lines
    tag = json.loads((tag_run / "test.json").read_text())["test"]["per_type"]["PER"]
    per = next(line.split() for line in tag_lines(tag_run, capsys) if line.startswith("test: PER"))
    assert [float(x) for x in per[2:5]] == pytest.approx([tag["precision"], tag["recall"], tag["f1-score"]], abs=1e-4)


def tag_lines(run, capsys) -> list[str]:
    assert main(["eval", str(run)]) == 0
    return capsys.readouterr().out.splitlines()


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("task", "name", "text", "says"),
    [
        ("tag", "a.conll", "Romeo B-PER\nloves O\n\nJuliet\n\nTybalt B-PER\n", ["line 4", "'Juliet' has no tag"]),
        ("tag", "a.conll", "Romeo B-PER\n\nJuliet B-PER\n\nTybalt X-PER\n", ["line 5", "'X-PER' is not BIO"]),
        ("tag", "a.conll", "Romeo PER\n", ["line 1", "'PER' is not BIO"]),
        ("tag", "a.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n', ["line 1", "2 tokens but 1 tags"]),
    ],
)
def test_bad_tag_files_are_one_line_errors(tmp_path, capsys, task, name, text, says):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    err = user_error(capsys, "train", task, "--data", str(p), "--out", str(tmp_path / "run"))
    assert str(p) in err and all(s in err for s in says), err
    assert not (tmp_path / "run" / "config.json").exists()


def test_bad_qa_files_are_one_line_errors(tmp_path, capsys):
    good = qa_records()
    moved = [*good[:3], {**good[3], "answers": [{"text": "Benvolio", "answer_start": 3}]}]
    empty = [*good[:2], {**good[2], "context": "  "}]
    for rows, says in ((moved, ["line 4", "'Benvolio' does not match the context at 3"]), (empty, ["line 3"])):
        p = write_jsonl(tmp_path / "bad.jsonl", rows)
        err = user_error(capsys, "train", "qa", "--data", str(p), "--out", str(tmp_path / "run"))
        assert str(p) in err and all(s in err for s in says), err
    assert "empty or missing context" in err


def test_data_that_cannot_make_a_run_is_refused_before_any_folder(tmp_path, capsys):
    run = tmp_path / "run"
    cases = [
        ("tag", write_conll(tmp_path / "o.conll", [(["the", "cat"], ["O", "O"])] * 9), [], "every tag is O"),
        ("tag", write_conll(tmp_path / "3.conll", names_sentences(3)), ["data.val_fraction=0.5"], "would be empty"),
        ("qa", write_jsonl(tmp_path / "3.jsonl", qa_records()[:3]), ["data.val_fraction=0.5"], "no training passage"),
        ("qa", write_jsonl(tmp_path / "q.jsonl", qa_records()), ["model.type_vocab_size=1"], "2 segments"),
    ]
    blank = qa_records()
    blank[4]["answers"] = [{"text": " ", "answer_start": blank[4]["context"].index(" ")}]
    cases.append(("qa", write_jsonl(tmp_path / "blank.jsonl", blank), [], "line 5"))
    for task, data, overrides, says in cases:
        err = user_error(capsys, "train", task, "--data", str(data), "--out", str(run), *sets(*overrides))
        assert says in err and not run.exists(), err


def test_bad_inference_input_is_one_line(tag_run, qa_run, tmp_path, capsys):
    capsys.readouterr()
    assert "the passage is empty" in user_error(capsys, "qa", str(qa_run), "--context", "", "Who?")
    assert "no passage" in user_error(capsys, "qa", str(qa_run), "Who?")
    assert "is a folder" in user_error(capsys, "qa", str(qa_run), "--context", str(tmp_path), "Who?")
    assert "no such file" in user_error(capsys, "qa", str(qa_run), "--context", str(tmp_path / "gone.txt"), "Who?")
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    assert "is empty" in user_error(capsys, "qa", str(qa_run), "--context", str(tmp_path / "empty.txt"), "Who?")
    assert "question is empty" in user_error(capsys, "qa", str(qa_run), "--context", "Romeo sighs.", "  ")
    assert "has no words" in user_error(capsys, "tag", str(tag_run), "   ")
    assert "'tag' run" in user_error(capsys, "qa", str(tag_run), "--context", "Romeo sighs.", "Who?")


# ---------------------------------------------------------------------------- from a masked-LM run

TINY_BERT = ["model.n_layer=1", "model.n_head=2", "model.n_embd=16", "model.d_ff=32", "model.block_size=32"]


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mlm")
    text = "\n\n".join(" ".join(w) + "." for w, _ in names_sentences(60, seed=1))
    (root / "text.txt").write_text((text + "\n\n") * 5, encoding="utf-8")
    fast = ["train.max_iters=6", "train.eval_interval=3", "train.batch_size=4", "train.device=cpu"]
    args = ["train", "mlm", "--data", str(root / "text.txt"), "--out", str(root / "run")]
    assert main(args + sets(*TINY_BERT, *fast, "data.seq_len=24", "data.vocab_size=200")) == 0
    return root / "run"


def test_tagger_starts_from_the_masked_lm_encoder(mlm_run, tmp_path, capsys):
    from safetensors.torch import load_file

    from tinyformer.data.subword import SubwordTokenizer
    from tinyformer.runs import load_source, prepare_run
    from tinyformer.tasks.tag import TagTask

    data = write_conll(tmp_path / "names.conll", names_sentences())
    init = f"model.init_from={json.dumps(str(mlm_run))}"
    config, _, _, _ = prepare_run(
        "tag", [], [f"data.path={json.dumps(str(data))}", init, "data.seq_len=24", *TINY_BERT]
    )
    task = TagTask.prepare(config)
    mlm_tok = SubwordTokenizer.load(mlm_run / "tokenizer.json")
    assert task.tokenizer.hf.get_vocab() == mlm_tok.hf.get_vocab()
    model = task.build_model()
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    task.init_model(model, load_source(task.init_from()))
    mlm = load_file(mlm_run / "best.safetensors")
    encoder = model.encoder.state_dict()
    assert encoder.keys() == {k.removeprefix("bert.") for k in mlm if k.startswith("bert.")}
    for name, p in encoder.items():
        assert torch.equal(p, mlm[f"bert.{name}"]), name
    assert not torch.equal(encoder["tok_emb.weight"], fresh["encoder.tok_emb.weight"])  # not the random init
    assert torch.equal(model.head.weight, fresh["head.weight"])  # the tagging head stays new

    # through `tinyformer train`: one step at a tiny learning rate leaves the encoder next to the masked LM's
    out = tmp_path / "run"
    slow = ["train.max_iters=1", "train.eval_interval=1", "train.lr=1e-7", "train.device=cpu", "data.seq_len=24"]
    assert main(["train", "tag", "--data", str(data), "--out", str(out), *sets(init, *TINY_BERT, *slow)]) == 0
    trained = load_file(out / "model.safetensors")
    for name, p in mlm.items():
        if name.startswith("bert."):
            assert (trained[f"encoder.{name.removeprefix('bert.')}"] - p).abs().max() < 1e-5, name
    capsys.readouterr()
    too_long = sets(init, *TINY_BERT, *slow[:-1], "data.seq_len=32")
    err = user_error(capsys, "train", "tag", "--data", str(data), "--out", str(tmp_path / "r2"), *too_long)
    assert "never trained" in err


# ---------------------------------------------------------------------------- the built-in tasks

BUILTIN = [
    "model.n_layer=1",
    "model.n_embd=16",
    "model.n_head=2",
    "model.d_ff=32",
    "model.block_size=64",
    "data.vocab_size=300",
    "train.max_iters=4",
    "train.eval_interval=4",
    "train.batch_size=4",
    "train.device=cpu",
]


@pytest.fixture
def play() -> Path:
    path = os.environ.get("TINYFORMER_DATA")
    if not path or not Path(path).is_file():
        pytest.skip("the built-in tasks read Tiny Shakespeare: set TINYFORMER_DATA")
    return Path(path)


def test_builtin_tag_task_scores_seen_and_unseen_names(play, tmp_path):
    from tinyformer.tasks.tag import TagTask

    out = tmp_path / "run"
    assert main(["train", "tag", "--out", str(out), *sets(*BUILTIN, "data.seq_len=32")]) == 0
    r = json.loads((out / "test.json").read_text())
    assert {"test", "unseen", "unseen_names"} <= set(r) and len(r["unseen_names"]) > 10
    for part in ("test", "unseen"):
        assert r[part]["n"] > 50 and 0.0 <= r[part]["f1"] <= 1.0 and 0.0 <= r[part]["token_acc"] <= 1.0
    # the gazetteer knows only training names: none occurs in the unseen part, and here every name of the test
    # part also occurs in training (checked), so it finds every test mention and nothing else
    assert r["unseen"]["gazetteer"]["f1"] == 0.0 and r["unseen"]["gazetteer"]["recall"] == 0.0
    run = load_run(out, weights=None)
    task = TagTask.prepare(run.config, run.tokenizer)
    names = {
        part: {w for ws, ts in zip(s.words, s.tags) for w, t in zip(ws, ts) if t != "O"}
        for part, s in task.splits.items()
    }
    assert names["test"] <= names["train"] and not names["unseen"] & (names["train"] | names["val"])
    assert names["unseen"] <= set(r["unseen_names"])
    assert r["test"]["gazetteer"]["f1"] == 1.0
    # what the Trainer logs and selects by is the same entity F1 and token accuracy as the full scores
    from tinyformer.tasks.tag import scores

    model = load_run(out).model
    logged, (pred, _) = task.evaluate(model), task.predict_split(model, "val")
    full = scores(task.splits["val"].tags, pred)
    assert (logged["f1"], logged["token_acc"], logged["error"]) == (full["f1"], full["token_acc"], 1 - full["f1"])


@pytest.mark.slow
def test_builtin_qa_task_scores_against_the_baseline(play, tmp_path):
    out = tmp_path / "run"
    qa = ["data.seq_len=64", "data.max_question=24", "data.stride=16"]
    assert main(["train", "qa", "--out", str(out), *sets(*BUILTIN, *qa)]) == 0
    r = json.loads((out / "test.json").read_text())
    assert r["n"] > 100 and 0.0 <= r["em"] <= r["f1"] <= 1.0
    assert 0.0 < r["baseline"]["em"] <= r["baseline"]["f1"] < 1.0  # the nearest header: often, not always, right
    assert all(e["question"].startswith("Who says '") for e in r["examples"])
    assert (out / "span.png").stat().st_size > 5_000
