"""MiniGPT's attention variants: grouped-/multi-query attention (n_kv_head) and linear attention.

Each equality here is a claim of the variants lab: n_kv_head = n_head is today's model; grouped-query attention
is multi-head attention with each KV head copied to its group; the cache holds only the KV heads; linear
attention is causal and its recurrent (generation) form equals its parallel (training) form."""

import pytest
import torch

from tests.generate.test_sampling import trace  # the very steps `generate` takes, with or without the cache
from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.linear import LinearState
from tinyformer.errors import UserError
from tinyformer.generate.sampling import generate
from tinyformer.models.bert import BertConfig, BertEncoder
from tinyformer.models.gpt import GPTConfig, MiniGPT, param_count


def gpt(seed=0, **kw) -> MiniGPT:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=30, block_size=32, n_layer=2, n_head=4, n_embd=32, dropout=0.0) | kw
    return MiniGPT(GPTConfig(**cfg)).eval()


def tokens(B=2, T=20, seed=1):
    return torch.randint(0, 30, (B, T), generator=torch.Generator().manual_seed(seed))


# ---- grouped- and multi-query attention ---------------------------------------------------------------------
def test_n_kv_head_equal_to_n_head_is_todays_model_exactly():
    today, same = gpt(), gpt(n_kv_head=4)
    assert {k: v.shape for k, v in today.state_dict().items()} == {k: v.shape for k, v in same.state_dict().items()}
    for (name, a), b in zip(today.state_dict().items(), same.state_dict().values()):
        assert torch.equal(a, b), name  # the same parameters drawn in the same order
    assert torch.equal(today(tokens()).logits, same(tokens()).logits)


def expand_kv_heads(grouped: MiniGPT) -> MiniGPT:
    """A multi-head model whose key/value projections are `grouped`'s, each KV head copied to its group."""
    c = grouped.config
    full = gpt(n_kv_head=0, **{k: getattr(c, k) for k in ("n_head", "positions", "qkv_bias")})
    sd, D, Dh, group = dict(grouped.state_dict()), c.n_embd, c.n_embd // c.n_head, c.n_head // c.kv_heads
    for name in [n for n in sd if n.endswith("attn.qkv.weight")]:
        q, k, v = sd[name].split([D, c.kv_heads * Dh, c.kv_heads * Dh])  # (D, D), (Dkv, D) x 2
        heads = [t.view(c.kv_heads, Dh, D).repeat_interleave(group, dim=0).reshape(D, D) for t in (k, v)]
        sd[name] = torch.cat([q, *heads])  # (3D, D)
    full.load_state_dict(sd)
    return full


@pytest.mark.parametrize("n_kv_head", [1, 2])
@pytest.mark.parametrize("backend", ["sdpa", "manual"])
@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_grouped_query_attention_is_mha_with_kv_heads_shared_by_their_group(n_kv_head, backend, positions):
    grouped = gpt(n_kv_head=n_kv_head, backend=backend, positions=positions)
    full = expand_kv_heads(grouped)
    torch.testing.assert_close(grouped(tokens()).logits, full(tokens()).logits, atol=1e-5, rtol=0)
    assert param_count(grouped.config) == sum(p.numel() for p in grouped.parameters()) < param_count(full.config)


@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_the_cache_holds_only_the_kv_heads_and_gives_the_uncached_tokens(n_kv_head):
    model = gpt(n_kv_head=n_kv_head, positions="rope")
    cache = model.new_cache(2, 32)
    assert all(isinstance(c, KVCache) and c.k.shape == (2, n_kv_head, 32, 8) for c in cache)
    prompt = tokens(T=5)
    for temperature in (0.0, 1.0):
        a, b = (trace(model, prompt, 40, use_cache, temperature) for use_cache in (True, False))
        assert torch.equal(a[0], b[0]) and (a[1] - b[1]).abs().max() < 1e-5


def test_n_kv_head_must_divide_n_head():
    with pytest.raises(UserError, match=r"model.n_kv_head=3 must divide model.n_head=4"):
        GPTConfig(n_head=4, n_kv_head=3)


# ---- linear attention -------------------------------------------------------------------------------------
@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none"])
def test_linear_attention_is_causal(positions):
    model = gpt(attention="linear", positions=positions)
    idx = tokens()
    changed = idx.clone()
    changed[:, 9:] = (idx[:, 9:] + 1) % 30
    a, b = model(idx).logits, model(changed).logits
    torch.testing.assert_close(a[:, :9], b[:, :9], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 9:], b[:, 9:], atol=1e-4)


def test_recurrent_state_equals_the_parallel_form_token_by_token():
    model = gpt(attention="linear")
    idx = tokens(T=32)
    parallel = model(idx).logits  # (B, T, V): the training form, prefix sums over chunks
    state = model.new_cache(2)
    assert all(isinstance(s, LinearState) for s in state)
    with torch.no_grad():
        steps = [model(idx[:, t : t + 1], cache=state, start=t).logits for t in range(32)]
    torch.testing.assert_close(torch.cat(steps, 1), parallel, atol=1e-5, rtol=0)
    assert sum(s.nbytes() for s in state) == 2 * 2 * 4 * (8 * 8 + 8) * 4  # layers x B x H x (Dh^2 + Dh) x fp32


def test_linear_generation_with_the_state_equals_rerunning_the_window():
    model = gpt(attention="linear")
    prompt = tokens(T=5)
    for temperature in (0.0, 1.0):  # 45 tokens: past block_size 32, so the window slides and the state rebuilds
        a, b = (trace(model, prompt, 45, use_cache, temperature) for use_cache in (True, False))
        assert torch.equal(a[0], b[0]) and (a[1] - b[1]).abs().max() < 1e-5
    assert generate(model, prompt, 10, temperature=0).shape == (2, 15)


def test_linear_attention_has_the_same_parameters_as_softmax():
    assert param_count(GPTConfig(vocab_size=65, attention="linear")) == param_count(GPTConfig(vocab_size=65))


def test_linear_attention_refuses_weights_rope_and_grouped_heads_in_one_line():
    with pytest.raises(UserError, match="no attention weights"):
        gpt(attention="linear")(tokens(), need_weights=True)
    with pytest.raises(UserError, match="model.attention=linear works with"):
        GPTConfig(attention="linear", positions="rope")
    with pytest.raises(UserError, match="model.attention=linear works with"):
        GPTConfig(attention="linear", n_kv_head=2)
    with pytest.raises(UserError, match="model.attention='cosine' is not one of"):
        GPTConfig(attention="cosine")


def test_linear_encoder_ignores_padding():
    torch.manual_seed(0)
    model = BertEncoder(
        BertConfig(vocab_size=30, block_size=16, n_layer=2, n_head=2, n_embd=16, d_ff=32, attention="linear")
    ).eval()
    ids = tokens(B=1, T=7)
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 7 + [0] * 4])
    a = model(ids).last_hidden_state
    b = model(padded, mask).last_hidden_state[:, :7]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    unmasked = model(padded).last_hidden_state[:, :7]
    assert not torch.allclose(a, unmasked, atol=1e-3)


def test_classifier_and_token_heads_take_linear_attention_and_refuse_it_with_rope():
    from tinyformer.models.classifier import ClassifierConfig, TextClassifier
    from tinyformer.models.token_heads import EncoderHeadConfig

    cfg = ClassifierConfig(vocab_size=30, labels=["a", "b"], n_embd=16, n_head=2, d_ff=32, n_layer=1)
    torch.manual_seed(0)
    model = TextClassifier(ClassifierConfig(**{**cfg.__dict__, "attention": "linear", "positions": "learned"}))
    assert all(b.attn.kind == "linear" for b in model.encoder.blocks)
    for make in (ClassifierConfig, EncoderHeadConfig):
        with pytest.raises(UserError, match="does not take rotary positions"):
            make(attention="linear", positions="rope")


@pytest.mark.parametrize("kw", [{}, {"n_kv_head": 1}, {"n_kv_head": 2}, {"attention": "linear"}])
def test_cache_bytes_is_what_new_cache_allocates(kw):
    model = gpt(**kw)
    caches = model.new_cache(3, 10)
    allocated = sum(b.numel() * b.element_size() for c in caches for b in c.buffers())
    assert model.cache_bytes(3, 10) == allocated > 0
