"""GPT-2 into MiniGPT: same logits as transformers, same greedy tokens with and without the KV cache and as
`generate`, the export gives back the same tensors, and every bad source is one line with nothing written.

The GPT-2 here is a randomly initialised small `GPT2LMHeadModel` saved by the test with a small byte-level
BPE of our own as its tokenizer: no network. Its init is wide (std 0.5) so greedy decoding wanders over many
tokens instead of repeating one, which would hide a position that is off by one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.cli_helpers import user_error
from tests.models.greedy import assert_greedy_50_equal
from tinyformer.cli import main
from tinyformer.data.bpe import BPETokenizer
from tinyformer.errors import UserError
from tinyformer.hub import hf_config, hf_weights
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.models.gpt2 import config_from_gpt2, gpt2_state_dict, import_gpt2

transformers = pytest.importorskip("transformers")
PROMPT = "First Citizen:\nBefore we proceed any further, hear me speak."


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> Path:
    from tests.conftest import SYNTHETIC

    folder = tmp_path_factory.mktemp("gpt2")
    tok = BPETokenizer.train([SYNTHETIC * 3], 320, specials=("<|endoftext|>",))
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=tok.vocab_size,
        n_positions=128,
        n_embd=32,
        n_layer=2,
        n_head=4,
        initializer_range=0.5,
        bos_token_id=None,
        eos_token_id=None,
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    tok.save(folder / "tokenizer.json")
    return folder


def load_both(folder: Path) -> tuple[MiniGPT, torch.nn.Module]:
    ours = MiniGPT(GPTConfig(dropout=0.0, **config_from_gpt2(hf_config(folder)))).eval()
    import_gpt2(ours, hf_weights(folder))
    return ours, transformers.GPT2LMHeadModel.from_pretrained(folder).eval()


def prompt_ids(folder: Path) -> torch.Tensor:
    return torch.tensor([BPETokenizer.from_folder(folder).encode(PROMPT)])  # (1, T)


def test_imported_gpt2_gives_the_logits_of_transformers(gpt2_folder):
    ours, hf = load_both(gpt2_folder)
    ids = prompt_ids(gpt2_folder)
    with torch.no_grad():
        assert (ours(ids).logits - hf(ids).logits).abs().max() < 1e-4
    assert ours.config.ffn == "gelu_tanh" and ours.config.tie_weights and ours.config.qkv_bias
    assert ours.head.weight is ours.tok_emb.weight


def test_greedy_50_tokens_equal_with_and_without_cache_and_to_transformers_generate(gpt2_folder):
    ours, hf = load_both(gpt2_folder)
    ids = prompt_ids(gpt2_folder)
    assert_greedy_50_equal(ours, hf, ids)


def test_export_of_an_imported_model_gives_back_the_same_tensors(gpt2_folder):
    ours, _ = load_both(gpt2_folder)
    original = {k: v for k, v in hf_weights(gpt2_folder).items() if not k.endswith(".attn.bias")}
    exported = gpt2_state_dict(ours)
    assert set(exported) == set(original)
    for k, v in original.items():
        assert torch.equal(exported[k], v), k


def test_unbuildable_gpt2_configs_name_the_key(gpt2_folder):
    hf = hf_config(gpt2_folder)
    for change, key in (
        ({"model_type": "bert"}, "model_type='bert'"),
        ({"activation_function": "relu"}, "activation_function='relu'"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ):
        with pytest.raises(UserError, match=key):
            config_from_gpt2(hf | change)
    model = MiniGPT(GPTConfig(**config_from_gpt2(hf)))
    weights = hf_weights(gpt2_folder)
    del weights["transformer.h.1.mlp.c_fc.weight"]
    with pytest.raises(UserError, match="no tensor 'transformer.h.1.mlp.c_fc.weight'"):
        import_gpt2(model, weights)


# ---- through the command line ------------------------------------------------------------------------------------
TRAIN = ["--set", "train.max_iters=6", "--set", "train.batch_size=2", "--set", "train.eval_iters=1"]
TRAIN += ["--set", "train.eval_interval=3", "--set", "data.seq_len=32", "--set", "sample.tokens=8", "--device", "cpu"]


def test_train_from_gpt2_then_sample_eval_export_and_view(gpt2_folder, text_file, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "gpt", "--data", str(text_file), "--set", f"model.init_from={gpt2_folder}", *TRAIN,
                 "--out", str(run)]) == 0  # fmt: skip
    config = json.loads((run / "config.json").read_text())["model"]
    assert (config["n_layer"], config["n_embd"], config["ffn"], config["tie_weights"]) == (2, 32, "gelu_tanh", True)
    saved, theirs = BPETokenizer.load(run / "tokenizer.json"), BPETokenizer.from_folder(gpt2_folder)
    assert saved.hf.get_vocab() == theirs.hf.get_vocab() and saved.encode(PROMPT) == theirs.encode(PROMPT)
    capsys.readouterr()
    assert main(["sample", str(run), "--prompt", "ROMEO:", "--tokens", "5", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")
    assert main(["eval", str(run)]) == 0
    assert "bits per character" in capsys.readouterr().out
    assert main(["export", "hf", str(run), str(tmp_path / "hf")]) == 0
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = prompt_ids(gpt2_folder)
    ours = MiniGPT(GPTConfig(dropout=0.0, **config_from_gpt2(hf_config(tmp_path / "hf")))).eval()
    import_gpt2(ours, hf_weights(tmp_path / "hf"))
    with torch.no_grad():
        assert (back(ids).logits - ours(ids).logits).abs().max() < 1e-4
    out = tmp_path / "views"
    assert main(["viz", "attention", str(run), "--text", "ROMEO: hello", "--layer", "1", "--out", str(out)]) == 0
    assert [p.stat().st_size > 1000 for p in out.glob("*.png")] == [True]


def test_bad_sources_are_one_line_and_write_nothing(gpt2_folder, trained, text_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("tinyformer.hub.hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    empty = tmp_path / "noweights"
    empty.mkdir()
    (empty / "config.json").write_text((gpt2_folder / "config.json").read_text())
    (empty / "tokenizer.json").write_text((gpt2_folder / "tokenizer.json").read_text())
    for source, message in (
        (trained, "is a tinyformer run; continue it with --resume"),
        (bert, "model_type='bert' in config.json: MiniGPT loads gpt2, llama, qwen2"),
        (empty, "holds no model.safetensors"),
        ("surely-not-a-model-xyz/none", "the hub is unreachable"),
    ):
        out = tmp_path / "run"
        err = user_error(capsys, "train", "gpt", "--data", str(text_file), "--set", f"model.init_from={source}",
                         *TRAIN, "--out", str(out))  # fmt: skip
        assert message in err
        assert not out.exists()
