import pytest
import torch

from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT, param_breakdown, param_count


@pytest.mark.parametrize(
    "backend, positions",
    [("sdpa", "learned"), ("manual", "learned"), ("sdpa", "sinusoidal"), ("sdpa", "rope"), ("manual", "rope")],
)
def test_future_tokens_do_not_change_past_logits(tiny_gpt_config, backend, positions):
    torch.manual_seed(0)
    cfg = GPTConfig(**{**tiny_gpt_config.__dict__, "backend": backend, "positions": positions})
    model = MiniGPT(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (3, 12))
    t = 5
    changed = idx.clone()
    changed[:, t + 1 :] = (idx[:, t + 1 :] + 1) % cfg.vocab_size
    a, b = model(idx).logits, model(changed).logits
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=1e-4)  # the test can see a change


def test_backends_give_the_same_logits(tiny_gpt_config):
    torch.manual_seed(0)
    fast = MiniGPT(tiny_gpt_config).eval()
    slow = MiniGPT(GPTConfig(**{**tiny_gpt_config.__dict__, "backend": "manual"})).eval()
    slow.load_state_dict(fast.state_dict())
    idx = torch.randint(0, tiny_gpt_config.vocab_size, (2, 16))
    torch.testing.assert_close(fast(idx).logits, slow(idx).logits, atol=1e-5, rtol=0)


def test_seed_recipe_has_824832_parameters():
    cfg = GPTConfig(vocab_size=65)
    assert param_count(cfg) == 824_832
    assert sum(p.numel() for p in MiniGPT(cfg).parameters()) == 824_832


@pytest.mark.parametrize(
    "kw",
    [
        dict(vocab_size=65),
        dict(vocab_size=100, n_layer=1, n_head=1),
        dict(vocab_size=7, block_size=33, n_layer=3, n_head=2, n_embd=24, mlp_ratio=2),
        dict(vocab_size=65, n_layer=8, n_embd=256, qkv_bias=True),
        dict(vocab_size=300, n_layer=2, qkv_bias=True, tie_weights=True, ffn="gelu_tanh"),  # GPT-2's shape
        dict(vocab_size=65, n_layer=2, ffn="swiglu"),
        dict(vocab_size=65, positions="rope"),
        dict(vocab_size=65, positions="sinusoidal"),
        dict(vocab_size=65, norm="rmsnorm", bias=False, positions="rope", ffn="swiglu", n_kv_head=2, mlp_ratio=3.0625),
        dict(vocab_size=65, norm="rmsnorm", qkv_bias=True, n_kv_head=1),  # RMSNorm with biases elsewhere
        dict(vocab_size=65, bias=False, ffn="gelu"),  # LayerNorms and MLP without biases
    ],
)
def test_parameter_formula_equals_count(kw):
    cfg = GPTConfig(**kw)
    counted = sum(p.numel() for p in MiniGPT(cfg).parameters())
    assert param_count(cfg) == counted
    assert {name for name, *_ in param_breakdown(cfg)} >= {"token embedding", "block attention", "block MLP"}


def test_output_dataclass_and_attention_weights(tiny_gpt):
    idx = torch.randint(0, 11, (2, 10))
    out = tiny_gpt(idx)
    assert out.logits.shape == (2, 10, 11) and out.loss is None and out.attentions is None
    out = tiny_gpt(idx, idx, need_weights=True)
    assert out.loss.ndim == 0
    assert len(out.attentions) == 2 and out.attentions[0].shape == (2, 2, 10, 10)
    assert torch.all(out.attentions[1].triu(1) == 0)  # causal: nothing above the diagonal


def test_context_longer_than_block_is_refused_for_learned_positions_only(tiny_gpt_config):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="exceed block_size=16"):
        MiniGPT(tiny_gpt_config)(torch.zeros(1, 17, dtype=torch.long))
    for positions in ("sinusoidal", "rope", "none"):
        model = MiniGPT(GPTConfig(**{**tiny_gpt_config.__dict__, "positions": positions}))
        assert model(torch.zeros(1, 40, dtype=torch.long)).logits.shape == (1, 40, 11)


def test_position_kinds_change_what_the_model_computes(tiny_gpt_config):
    """One token repeated: added positions (learned, sinusoidal) make each position's logits differ; with no
    positions, or RoPE (which rotates queries and keys but leaves the equal values alone), they are equal."""
    idx = torch.full((1, 10), 3)
    for positions, constant in [("none", True), ("learned", False), ("sinusoidal", False), ("rope", True)]:
        torch.manual_seed(0)
        model = MiniGPT(GPTConfig(**{**tiny_gpt_config.__dict__, "positions": positions})).eval()
        logits = model(idx).logits[0]  # (T, V)
        same = torch.allclose(logits, logits[:1].expand_as(logits), atol=1e-5)
        assert same == constant, positions


def test_removing_the_causal_mask_lets_the_past_see_the_future(tiny_gpt_config):
    torch.manual_seed(0)
    model = MiniGPT(GPTConfig(**{**tiny_gpt_config.__dict__, "causal": False})).eval()
    idx = torch.randint(0, 11, (1, 8))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 11
    assert not torch.allclose(model(idx).logits[0, 0], model(changed).logits[0, 0], atol=1e-5)


def test_config_validation_names_the_field():
    with pytest.raises(UserError, match="model.n_embd=130 is not divisible by model.n_head=4"):
        GPTConfig(n_embd=130, n_head=4)
    with pytest.raises(UserError, match="model.backend='flash'"):
        GPTConfig(backend="flash")
    with pytest.raises(UserError, match="model.positions='alibi'"):
        GPTConfig(positions="alibi")
    with pytest.raises(UserError, match="even head width"):
        GPTConfig(n_embd=12, n_head=4, positions="rope")


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_gpt_config):
    grads = []
    for recompute in (False, True):
        torch.manual_seed(0)
        cfg = GPTConfig(**{**tiny_gpt_config.__dict__, "dropout": 0.1, "grad_checkpoint": recompute})
        model = MiniGPT(cfg).train()
        idx = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
        torch.manual_seed(5)  # the same dropout masks; checkpoint replays them in the recomputation
        loss = model(idx, idx).loss
        loss.backward()
        grads.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == grads[1][0]
    for a, b in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
