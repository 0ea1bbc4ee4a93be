"""The GPT-2 speedrun's model switches, each held to what it claims (all off by default):

- `qk_norm`: queries and keys at RMS 1 per head, so a score is at most sqrt(Dh) whatever the weights' scale;
- `ffn="relu2"`: the MLP's activation is relu(x)^2;
- `zero_init`: each block's output projections start at zero, so a fresh block is the identity, and learns;
- `logit_softcap`: no logit beyond the cap in size, about unchanged where |logit| << cap;
and each keeps the cache equivalence of generation."""

import pytest
import torch
import torch.nn.functional as F

from tests.generate.test_sampling import trace  # the very steps `generate` takes, with or without the cache
from tests.models.test_gpt_variants import gpt, tokens  # a small MiniGPT (eval mode) and its token batches
from tinyformer.attention.multihead import MultiHeadAttention
from tinyformer.attention.spec import BlockSpec
from tinyformer.errors import UserError
from tinyformer.layers.feedforward import FeedForward
from tinyformer.models.gpt import GPTConfig, param_count
from tinyformer.models.gpt2 import check_exportable


def scaled_qk(attn: MultiHeadAttention, factor: float) -> None:
    """Multiply the query and key rows of the fused projection (weights and biases) by `factor`."""
    D = attn.head_dim * attn.n_head
    with torch.no_grad():
        attn.qkv.weight[: 2 * D] *= factor
        attn.qkv.bias[: 2 * D] *= factor


@pytest.mark.parametrize("qk_norm", [True, False])
def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys(qk_norm):
    torch.manual_seed(0)
    attn = MultiHeadAttention(BlockSpec(32, 4, qk_norm=qk_norm)).eval()
    x = torch.randn(2, 12, 32)
    y0, w0 = attn(x, causal=True, need_weights=True)
    scaled_qk(attn, 30.0)
    y1, w1 = attn(x, causal=True, need_weights=True)
    if qk_norm:
        assert torch.allclose(y0, y1, atol=1e-5) and torch.allclose(w0, w1, atol=1e-5)
        # |q.k| / sqrt(Dh) <= sqrt(Dh): no weight can beat another by more than exp(2 sqrt(Dh)) in one row
        seen = torch.tril(torch.ones(12, 12, dtype=torch.bool))
        ratio = w1.amax(-1) / w1.masked_fill(~seen, float("inf")).amin(-1)
        assert ratio.max() <= torch.exp(torch.tensor(2 * 8**0.5)) * (1 + 1e-4)
    else:  # the control: without the norm, the same scaling sharpens the weights towards one-hot
        assert w1.amax(-1).mean() > w0.amax(-1).mean() + 0.2


def test_relu2_is_relu_squared_with_the_same_parameters():
    torch.manual_seed(0)
    ff = FeedForward(16, 64, act="relu2")
    x = torch.randn(3, 5, 16)
    assert torch.allclose(ff(x), ff.proj(F.relu(ff.fc(x)) ** 2), atol=1e-6)
    assert param_count(GPTConfig(vocab_size=30, ffn="relu2")) == param_count(GPTConfig(vocab_size=30))
    assert sum(p.numel() for p in gpt(ffn="relu2").parameters()) == sum(p.numel() for p in gpt().parameters())


@pytest.mark.parametrize("init", ["gpt2", "default"])
def test_zero_init_makes_every_fresh_block_the_identity_and_it_still_learns(init):
    model = gpt(zero_init=True, init=init)
    x = torch.randn(2, 10, 32)
    for block in model.blocks:
        out, _ = block(x, causal=True)
        assert torch.equal(out, x)
    assert not torch.equal(gpt(init=init).blocks[0](x, causal=True)[0], x)  # the control: the usual init is not
    model.train()
    model(tokens(), tokens(seed=2)).loss.backward()
    for block in model.blocks:  # gradients reach the zeroed projections: they leave zero at the first step
        assert block.attn.proj.weight.grad.abs().sum() > 0 and block.mlp.proj.weight.grad.abs().sum() > 0


def test_soft_capped_logits_stay_inside_the_cap_and_are_unchanged_where_small():
    capped, plain = gpt(logit_softcap=5.0), gpt()
    with torch.no_grad():
        for m in (capped, plain):
            m.head.weight.mul_(200.0)  # logits far beyond the cap
    a, b = capped(tokens()).logits, plain(tokens()).logits
    assert b.abs().max() > 50 and a.abs().max() <= 5.0  # tanh rounds to exactly 1 in fp32 far out
    assert torch.allclose(a, 5.0 * torch.tanh(b / 5.0), atol=1e-4)
    loose, plain = gpt(logit_softcap=1e4), gpt()  # a cap far above every logit changes nothing measurable
    assert torch.allclose(loose(tokens()).logits, plain(tokens()).logits, atol=1e-4)


@pytest.mark.parametrize(
    "kw", [dict(qk_norm=True, positions="rope"), dict(logit_softcap=3.0), dict(ffn="relu2", zero_init=True)]
)
def test_each_switch_keeps_cached_generation_equal_to_rerunning_the_window(kw):
    model = gpt(**kw)
    with torch.no_grad():
        for block in model.blocks:  # zero_init's blocks would be the identity: give them something to say
            for p in (block.attn.proj.weight, block.mlp.proj.weight):
                p.add_(0.05 * torch.randn_like(p))
    prompt = tokens(T=5)
    for temperature in (0.0, 1.0):
        a, b = (trace(model, prompt, 40, use_cache, temperature) for use_cache in (True, False))
        assert torch.equal(a[0], b[0]) and (a[1] - b[1]).abs().max() < 1e-5


def test_a_negative_cap_and_an_export_of_a_switched_model_are_one_line_errors():
    with pytest.raises(UserError, match="logit_softcap"):
        GPTConfig(vocab_size=30, logit_softcap=-1.0)
    for kw in (dict(qk_norm=True), dict(logit_softcap=15.0), dict(ffn="relu2")):
        with pytest.raises(UserError, match="cannot be exported"):
            check_exportable(gpt(**kw))
