"""Llama and Qwen2 into MiniGPT and back: the logits of transformers (fp32, at most 1e-4 apart), the same 50
greedy tokens as its `generate`, an export that gives back the same tensors, and a Llama-style run that goes
through every command (train, sample, chat, the playground's API, eval, info, viz, export hf, init_from) with no
special case.

The checkpoints are small random `LlamaForCausalLM` and `Qwen2ForCausalLM` built here, with grouped-query
attention, a rope_theta that is not the default and an rms_norm_eps that is not LayerNorm's, and a character
vocabulary of our own as the tokenizer: no network. Their init is wide (std 0.3) so that greedy decoding wanders
over many tokens instead of repeating one, which would hide a position that is off by one.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest
import torch

from tests.models.greedy import assert_greedy_50_equal
from tinyformer.cli import main
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.hub import hf_config, hf_weights
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.models.hf_lm import config_from_hf, export_hf, import_hf
from tinyformer.models.llama import config_from_llama

transformers = pytest.importorskip("transformers")
PROMPT = "First Citizen:\nBefore we proceed any further, hear me speak."
CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def save_checkpoint(folder: Path, kind: str, tie: bool = False) -> Path:
    from tests.conftest import SYNTHETIC

    tok = CharTokenizer.from_text(SYNTHETIC + PROMPT)
    torch.manual_seed(0)
    config = getattr(transformers, "LlamaConfig" if kind == "llama" else "Qwen2Config")(
        vocab_size=tok.vocab_size,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        rope_theta=50000.0,
        initializer_range=0.3,
        tie_word_embeddings=tie,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = getattr(transformers, CLASSES[kind])(config)
    if kind == "qwen2":  # Qwen2 initialises its q/k/v biases at zero: make them count
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.3)
    model.save_pretrained(folder)
    tok.to_hf().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return folder


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory) -> Path:
    return save_checkpoint(tmp_path_factory.mktemp(request.param), request.param)


def load_both(folder: Path) -> tuple[MiniGPT, torch.nn.Module]:
    ours = MiniGPT(GPTConfig(dropout=0.0, **config_from_hf(hf_config(folder)))).eval()
    import_hf(ours, hf_weights(folder))
    return ours, transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def prompt_ids(folder: Path) -> torch.Tensor:
    from tinyformer.data.bpe import folder_tokenizer

    return torch.tensor([folder_tokenizer(folder).encode(PROMPT)])  # (1, T)


def test_imported_checkpoint_gives_the_logits_of_transformers(checkpoint):
    ours, hf = load_both(checkpoint)
    ids = torch.cat([prompt_ids(checkpoint), prompt_ids(checkpoint).flip(1)])  # (2, T): a batch of two
    with torch.no_grad():
        difference = (ours(ids).logits - hf(ids).logits).abs().max().item()
    print(f"{hf_config(checkpoint)['model_type']}: max abs logit difference {difference:.2e}")
    assert difference < 1e-4
    c = ours.config
    assert (c.norm, c.ffn, c.positions, c.bias, c.kv_heads, c.rope_base, c.norm_eps) == (
        "rmsnorm", "swiglu", "rope", False, 2, 50000.0, 1e-6,
    )  # fmt: skip
    assert c.qkv_bias == (hf_config(checkpoint)["model_type"] == "qwen2")


def test_greedy_50_tokens_equal_with_and_without_cache_and_to_transformers_generate(checkpoint):
    ours, hf = load_both(checkpoint)
    ids = prompt_ids(checkpoint)
    assert_greedy_50_equal(ours, hf, ids)


def test_export_of_an_imported_model_gives_back_the_same_tensors_and_config(checkpoint):
    ours, _ = load_both(checkpoint)
    original = hf_weights(checkpoint)
    config, exported = export_hf(ours)
    assert set(exported) == set(original)
    for k, v in original.items():
        assert torch.equal(exported[k], v), k
    assert config_from_hf(config) == config_from_hf(hf_config(checkpoint))
    assert config["architectures"] == [CLASSES[hf_config(checkpoint)["model_type"]]]


def test_a_tied_head_is_read_as_one_matrix(tmp_path):
    folder = save_checkpoint(tmp_path / "tied", "llama", tie=True)
    ours, hf = load_both(folder)
    assert ours.head.weight is ours.tok_emb.weight
    ids = prompt_ids(folder)
    with torch.no_grad():
        assert (ours(ids).logits - hf(ids).logits).abs().max() < 1e-4


def test_unbuildable_configs_and_tensors_name_the_key(tmp_path):
    folder = save_checkpoint(tmp_path / "llama", "llama")
    hf = hf_config(folder)
    for change, key in (
        ({"model_type": "mistral"}, "model_type='mistral'"),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        ({"head_dim": 32}, "head_dim=32"),
        ({"attention_bias": True}, "attention_bias=True"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, "rope type 'llama3'"),
    ):
        with pytest.raises(UserError, match=key):
            config_from_hf(hf | change)
    model = MiniGPT(GPTConfig(**config_from_llama(hf)))
    weights = hf_weights(folder)
    del weights["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(UserError, match="no tensor 'model.layers.1.self_attn.k_proj.weight'"):
        import_hf(model, weights)
    weights = hf_weights(folder) | {"model.layers.0.mlp.extra.weight": torch.zeros(1)}
    with pytest.raises(UserError, match="does not know, e.g. 'model.layers.0.mlp.extra.weight'"):
        import_hf(model, weights)


def test_init_from_takes_every_architecture_field_from_the_checkpoint(tmp_path):
    """A run's own switches (here the speedrun's qk_norm and soft cap, GPT-2's LayerNorm eps) do not survive into a
    model built from a checkpoint that has none: the logits stay transformers'."""
    from tinyformer.config import RunConfig
    from tinyformer.tasks.gpt import from_pretrained

    folder = save_checkpoint(tmp_path / "llama", "llama")
    mine = GPTConfig(qk_norm=True, logit_softcap=5.0, norm_eps=1e-3, ffn="relu2", n_kv_head=1, dropout=0.0)
    config, _ = from_pretrained(RunConfig(task="gpt", model=dataclasses.replace(mine, init_from=str(folder))))
    assert (config.model.qk_norm, config.model.logit_softcap, config.model.norm_eps) == (False, 0.0, 1e-6)
    ours = MiniGPT(config.model).eval()
    import_hf(ours, hf_weights(folder))
    _, hf = load_both(folder)
    ids = prompt_ids(folder)
    with torch.no_grad():
        assert (ours(ids).logits - hf(ids).logits).abs().max() < 1e-4


def test_what_gpt2_cannot_hold_is_refused_on_export():
    for kw in (dict(norm="rmsnorm"), dict(bias=False)):
        with pytest.raises(UserError, match="GPT-2 has LayerNorms and biases"):
            export_hf(MiniGPT(GPTConfig(vocab_size=10, n_layer=1, n_embd=16, n_head=2, **kw)))


# ---- the gpt_llama preset through the command line ------------------------------------------------------------
TRAIN = ["--set", "train.max_iters=6", "--set", "train.batch_size=2", "--set", "train.eval_iters=1"]
TRAIN += ["--set", "train.eval_interval=3", "--set", "model.block_size=32", "--set", "sample.tokens=8"]
TRAIN += ["--device", "cpu", "--set", "train.precision=fp32"]


@pytest.mark.slow  # ten commands, two short trainings
def test_a_llama_run_goes_through_every_command_and_round_trips_through_transformers(
    text_file, tmp_path, capsys, monkeypatch
):
    run, hf_dir = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "gpt", "--config", "gpt_llama", "--data", str(text_file), *TRAIN, "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["sample", str(run), "--prompt", "ROMEO:", "--tokens", "5", "--temperature", "0"]) == 0
    sampled = capsys.readouterr().out
    assert sampled.startswith("ROMEO:")
    monkeypatch.setattr(sys, "stdin", io.StringIO("/temperature 0\nROMEO:\n"))
    assert main(["chat", str(run), "--device", "cpu", "--tokens", "5"]) == 0
    assert capsys.readouterr().out == sampled.removeprefix("ROMEO:")  # chat continues the line as sample does
    from fastapi.testclient import TestClient

    from tinyformer.serve.app import create_app

    answer = TestClient(create_app(tmp_path)).post(
        "/api/generate", json={"run": "run", "prompt": "ROMEO:", "tokens": 5, "temperature": 0}
    )
    assert answer.json()["text"] + "\n" == sampled  # the playground generates what sample prints
    assert main(["eval", str(run)]) == 0
    assert "bits per character" in capsys.readouterr().out
    assert main(["info", str(run)]) == 0
    info = capsys.readouterr().out
    assert "block RMS norms" in info and "by formula" in info
    views = tmp_path / "views"
    assert main(["viz", "attention", str(run), "--text", "ROMEO: hello", "--layer", "1", "--out", str(views)]) == 0
    assert [p.stat().st_size > 1000 for p in views.glob("*.png")] == [True]
    assert main(["export", "hf", str(run), str(hf_dir)]) == 0
    assert json.loads((hf_dir / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]

    from tinyformer.runs import load_run

    ours = load_run(run, device="cpu").model.eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    ids = prompt_ids(hf_dir)
    with torch.no_grad():
        assert (ours(ids).logits - theirs(ids).logits).abs().max() < 1e-4

    assert f"transformers.LlamaForCausalLM.from_pretrained({str(hf_dir)!r})" in capsys.readouterr().out

    again = tmp_path / "again"  # the exported folder read back as model.init_from: the same model at step 0
    fresh = [*TRAIN, "--set", "train.max_iters=1", "--set", f"model.init_from={hf_dir}"]
    fresh += ["--set", "train.eval_batches=fixed"]  # the preset's estimate (the recipe's draws new batches)
    assert main(["train", "gpt", "--data", str(text_file), *fresh, "--out", str(again)]) == 0
    architecture = config_from_hf(hf_config(hf_dir)).keys()  # the rest (dropout, init) is the new run's choice
    new, old = (json.loads((f / "config.json").read_text())["model"] for f in (again, run))
    assert {k: new[k] for k in architecture} == {k: old[k] for k in architecture}

    def val_losses(folder: Path) -> list[float]:
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if r.get("split") == "val"]

    assert val_losses(again)[0] == pytest.approx(min(val_losses(run)), abs=1e-6)  # best.safetensors, as exported
