"""The declared model interfaces (`tinyformer.models.protocols`): every registered task's model offers what its
task declares, the declarations agree with the views the task lists, and the check itself catches a missing
member, a missing parameter and a parameter without its default."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tinyformer.models.protocols import Attentive, CausalLM, EncoderDecoder, unmet
from tinyformer.tasks import TASKS

SMALL = dict(n_embd=32, n_head=4, n_layer=1, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, block_size=32)
SMALL |= dict(vocab_size=40, labels=["a", "b", "c"], hidden=16)


def small_model(name: str) -> torch.nn.Module:
    """The model `TASKS[name]` builds, at a small size (each SMALL field its model config has)."""
    task = TASKS[name]
    config = task.default_config()
    fields = {f.name for f in dataclasses.fields(config.model)}
    model = dataclasses.replace(config.model, **{k: v for k, v in SMALL.items() if k in fields})
    return task(dataclasses.replace(config, model=model), tokenizer=None).build_model()


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_registered_tasks_model_offers_the_interfaces_its_task_declares(name):
    task, model = TASKS[name], small_model(name)
    assert task.protocols, name
    for protocol in task.protocols:
        assert isinstance(model, protocol), (name, protocol.__name__)
        assert unmet(model, protocol) == [], (name, protocol.__name__)
    assert (CausalLM in task.protocols) == ("generate" in task.views)
    assert (Attentive in task.protocols) == ("attention" in task.views)


def test_the_check_names_what_is_missing():
    gpt = small_model("gpt")

    class NoCache(torch.nn.Module):  # MiniGPT's surface, but new_cache takes no capacity and start no default
        config, attention_names, max_context = gpt.config, ("causal",), None

        def forward(self, idx, targets=None, *, need_weights=False, cache=None, start):
            return gpt(idx)

        def new_cache(self, batch_size):
            return []

        def check_context(self, T):
            return T

        def attention_parts(self, idx, attention_mask=None):
            return []

    problems = unmet(NoCache(), CausalLM)
    assert "new_cache: takes no 'capacity'" in problems and "forward: 'start' has no default" in problems
    assert "no cache_bytes" in problems and "no set_ntk" in problems
    assert {"no encode", "no decode"} <= set(unmet(gpt, EncoderDecoder))


def test_torchs_encoder_decoder_offers_the_encoder_protocol_without_a_cache():
    from tinyformer.models.outputs import EncodedSource

    model = small_model("reverse")
    torch_model = TASKS["reverse"](
        dataclasses.replace(
            TASKS["reverse"].default_config(),
            model=dataclasses.replace(model.config, impl="torch"),
        ),
        tokenizer=None,
    ).build_model()
    assert unmet(torch_model, EncoderDecoder) == []
    assert torch_model.new_cache(EncodedSource(torch.zeros(1, 3, 32), torch.ones(1, 3, dtype=torch.bool))) is None


def test_each_config_hands_its_blocks_the_fields_of_the_same_name():
    """What `BlockSpec.of` reads of each model config, by name: a switch misspelt in a config would silently take
    the spec's default, and this list would not grow."""
    from tinyformer.attention.spec import BlockSpec, picked
    from tinyformer.models.bert import BertConfig
    from tinyformer.models.gpt import GPTConfig
    from tinyformer.models.seq2seq import Seq2SeqConfig

    every = {f.name for f in dataclasses.fields(BlockSpec)}
    assert set(picked(BlockSpec, GPTConfig())) == every - {"norm_first"}  # GPT is Pre-LayerNorm: the default
    assert set(picked(BlockSpec, BertConfig())) == every - {"qkv_bias", "bias", "qk_norm", "ffn", "norm", "n_kv_head"}
    seq2seq = {"n_embd", "n_head", "d_ff", "dropout", "attn_dropout", "backend", "ffn", "norm_first"}
    assert set(picked(BlockSpec, Seq2SeqConfig())) == seq2seq
    assert BlockSpec.of(BertConfig()).norm_eps == 1e-12 and not BlockSpec.of(BertConfig()).norm_first
