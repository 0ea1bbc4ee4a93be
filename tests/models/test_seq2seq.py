"""Seq2SeqTransformer: causality, padding invariance, encode-once, cross-attention weights, init, loss, overfitting,
the chapter's switches (embedding scale, Linear init, ReLU feed-forward), cached decoding and cache reordering."""

import math

import pytest
import torch
from torch import nn

from tinyformer.attention.spec import BlockSpec
from tinyformer.config import build
from tinyformer.errors import UserError
from tinyformer.layers.feedforward import make_feedforward
from tinyformer.models.seq2seq import Seq2SeqConfig, build_seq2seq, seq2seq_loss

PAD, BOS, EOS = 0, 1, 2
TINY = dict(block_size=32, n_embd=32, n_head=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0)
VARIANTS = [{}, {"backend": "manual"}, {"norm_first": False}, {"ffn": "swiglu"}]


def tiny(seed: int = 0, **kw):
    torch.manual_seed(seed)
    return build_seq2seq(Seq2SeqConfig(**(TINY | kw))).eval()


def batch(lengths=(9, 4, 6), T: int = 8, seed: int = 1):
    """src (B, max(lengths)) digits padded with PAD to the right; tgt_in (B, T) BOS then digits, no padding."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, 13, (n,), generator=g)
    tgt = torch.randint(3, 13, (len(lengths), T), generator=g)
    tgt[:, 0] = BOS
    return src, tgt


@pytest.mark.parametrize("kw", VARIANTS, ids=["default", "manual", "post_norm", "swiglu"])
def test_future_target_tokens_do_not_change_past_logits(kw):
    model = tiny(**kw)
    src, tgt = batch()
    t = 3
    changed = tgt.clone()
    changed[:, t + 1 :] = 3 + (tgt[:, t + 1 :] - 3 + 1) % 10  # another digit at every later position
    a, b = model(src, tgt).logits, model(src, changed).logits
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :], atol=1e-4)  # the test can see a change


@pytest.mark.parametrize("broken", ["no triu", "diagonal=0"])
def test_the_causality_test_fails_when_the_mask_is_broken_as_the_chapter_suggests(broken, monkeypatch):
    """Chapter 20.8: delete the triu, or move its diagonal so a position cannot see itself, and the causality
    test fails at once. Both edits, made to the one mask builder (`masks.causal`): the test above catches them."""
    from tinyformer.attention import masks

    real = masks.causal

    def edited(T, S=None, device=None):
        keep = real(T, S, device)  # (T, S): key j <= query i
        if broken == "no triu":
            return torch.ones_like(keep)  # every position sees every other, the future included
        S = keep.size(1)
        itself = torch.arange(S, device=device)[None, :] == torch.arange(T, device=device)[:, None] + (S - T)
        return keep & ~itself  # diagonal=0: a position no longer sees itself (the first sees nothing at all)

    monkeypatch.setattr(masks, "causal", edited)
    with pytest.raises(AssertionError):
        test_future_target_tokens_do_not_change_past_logits({"backend": "manual"})


@pytest.mark.parametrize("backend", ["sdpa", "manual"])
def test_source_padding_does_not_change_logits(backend):
    model = tiny(backend=backend)
    src, tgt = batch(lengths=(9, 4, 6))
    padded = torch.cat([src, torch.full((3, 5), PAD)], dim=1)  # 5 extra PAD columns
    logits = model(src, tgt).logits
    torch.testing.assert_close(model(padded, tgt).logits, logits, atol=1e-5, rtol=0)
    for i, n in enumerate((9, 4, 6)):  # each row alone, with no padding at all
        alone = model(src[i : i + 1, :n], tgt[i : i + 1]).logits
        torch.testing.assert_close(alone[0], logits[i], atol=1e-5, rtol=0)
    not_pad = padded.clone()
    not_pad[1, 4] = 5  # a real token where row 1 had padding: the logits must move
    assert not torch.allclose(model(not_pad, tgt).logits[1], logits[1], atol=1e-4)


def test_target_padding_does_not_change_real_positions_and_gets_no_attention():
    model = tiny()
    src, tgt = batch(T=5)
    padded = torch.cat([tgt, torch.full((3, 4), PAD)], dim=1)  # (3, 9): 4 PAD after the real targets
    out = model(src, padded, need_weights=True)
    torch.testing.assert_close(out.logits[:, :5], model(src, tgt).logits, atol=1e-5, rtol=0)
    for w in out.decoder_attentions:  # (B, H, T, T): no query, not even a PAD one, attends to a PAD key
        assert w.shape == (3, 4, 9, 9)
        assert torch.all(w[..., 5:] == 0)
        assert torch.all(w.triu(1) == 0)  # nor to a future one


def test_target_padding_cannot_change_cross_attention_so_it_needs_only_the_source_mask():
    """Why cross-attention masks source padding only: each row is one target query over the source keys, so a
    PAD target position changes no other row (its own row the loss ignores); a PAD source key would."""
    model = tiny()
    src, tgt = batch(T=5)
    padded = torch.cat([tgt, torch.full((3, 4), PAD)], dim=1)  # (3, 9)
    short, long = model(src, tgt, need_weights=True), model(src, padded, need_weights=True)
    for a, b in zip(short.cross_attentions, long.cross_attentions, strict=True):  # (B, H, T, S)
        torch.testing.assert_close(b[:, :, :5], a, atol=1e-6, rtol=0)
    other = padded.clone()
    other[:, 5:] = 7  # whatever sits at the padded positions: the real rows do not move
    moved = model(src, other, need_weights=True)
    torch.testing.assert_close(moved.cross_attentions[-1][:, :, :5], short.cross_attentions[-1], atol=1e-6, rtol=0)


def test_a_table_per_stack_is_the_chapters_count_and_one_shared_table_saves_one_table():
    """The recipe embeds source and target with a table each (`share_embeddings=False`, as the chapter does), so it
    has the chapter's 931,213 parameters; one table shared by both (`share_embeddings`, Seq2SeqConfig's default
    outside the recipe) has 929,549: vocab_size x n_embd = 13 x 128 = 1,664 fewer."""
    from tinyformer.models import count_parameters

    c = Seq2SeqConfig(vocab_size=13, n_embd=128, n_head=4, d_ff=512, n_encoder_layers=2, n_decoder_layers=2)
    ours = count_parameters(build_seq2seq(c))
    assert ours == 929_549 and ours + c.vocab_size * c.n_embd == 931_213
    c.share_embeddings = False  # the recipe's: a table per stack
    assert count_parameters(build_seq2seq(c)) == 931_213


def test_forward_equals_decode_of_encode():
    model = tiny()
    src, tgt = batch()
    enc = model.encode(src)
    assert enc.memory.shape == (3, 9, 32) and enc.attentions is None
    assert torch.equal(enc.src_valid, src != PAD)
    torch.testing.assert_close(model.decode(tgt, enc.memory, enc.src_valid).logits, model(src, tgt).logits)
    shorter = model.decode(tgt[:, :4], enc.memory, enc.src_valid).logits  # same memory, a shorter target prefix
    torch.testing.assert_close(shorter, model(src, tgt).logits[:, :4], atol=1e-6, rtol=0)


def test_attention_weights_per_layer():
    model = tiny(n_decoder_layers=3)
    src, tgt = batch(lengths=(9, 4, 6), T=7)
    out = model(src, tgt, need_weights=True)
    assert model(src, tgt).cross_attentions is None
    assert [w.shape for w in out.encoder_attentions] == [(3, 4, 9, 9)] * 2
    assert [w.shape for w in out.decoder_attentions] == [(3, 4, 7, 7)] * 3
    assert [w.shape for w in out.cross_attentions] == [(3, 4, 7, 9)] * 3  # (B, H, T, S)
    pad_columns = (src == PAD)[:, None, None, :].expand(3, 4, 7, 9)  # (B, H, T, S)
    assert pad_columns.any()
    for w in out.cross_attentions:
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 4, 7), atol=1e-6, rtol=0)
        assert torch.all(w[pad_columns] == 0)
        assert torch.all(w[~pad_columns] > 0)


def test_sdpa_and_manual_backends_agree():
    fast = tiny(backend="sdpa")
    slow = tiny(seed=1, backend="manual")
    slow.load_state_dict(fast.state_dict())
    src, tgt = batch()
    tgt[0, 6:] = PAD
    torch.testing.assert_close(fast(src, tgt).logits, slow(src, tgt).logits, atol=1e-5, rtol=0)


def test_embedding_init_scale_and_fixed_positions():
    model = build_seq2seq(Seq2SeqConfig(dropout=0.0))  # the seed sizes: D = 128
    w = model.embed.tok.weight
    assert abs(w[1:].std().item() - 128**-0.5) < 0.05 * 128**-0.5 and not w[0].any()  # PAD's row: zero
    assert abs(build_seq2seq(Seq2SeqConfig(embedding_init="default")).embed.tok.weight[1:].std().item() - 1) < 0.05
    ids = torch.tensor([[1, 5, 7, 0, 12]])
    pe = model.embed(ids)[0] - w[ids[0]] * math.sqrt(128)  # what was added to the scaled token vectors
    p, i = torch.arange(5)[:, None], torch.arange(64)[None, :]
    angle = p / 10000 ** (2 * i / 128)  # (5, 64)
    torch.testing.assert_close(pe[:, 0::2], angle.sin(), atol=1e-5, rtol=0)
    torch.testing.assert_close(pe[:, 1::2], angle.cos(), atol=1e-5, rtol=0)
    assert "embed.pe" in dict(model.named_buffers()) and "embed.pe" not in model.state_dict()
    bare = build_seq2seq(Seq2SeqConfig(positions="none", dropout=0.0))
    torch.testing.assert_close(bare.embed(ids), bare.embed.tok.weight[ids] * math.sqrt(128))


def test_linear_layers_are_xavier_uniform_with_zero_bias():
    model = build_seq2seq(Seq2SeqConfig())
    D, V = 128, 13
    qkv = model.encoder.blocks[0].attn.qkv.weight  # (3D, D): one Xavier draw per projection
    for part in qkv.chunk(3):
        bound = math.sqrt(6 / (2 * D))
        assert 0.95 * bound < part.abs().max().item() <= bound
    head_bound = math.sqrt(6 / (D + V))
    assert 0.9 * head_bound < model.head.weight.abs().max().item() <= head_bound
    biases = [m.bias for m in model.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None]
    assert len(biases) > 10 and all(torch.all(b == 0) for b in biases)


def test_loss_ignores_pad_labels():
    model = tiny()
    src, tgt = batch()
    labels = torch.cat([tgt[:, 1:], torch.full((3, 1), EOS)], dim=1)  # tgt_in shifted left
    labels[1, 4:] = PAD
    out = model(src, tgt, labels)
    real = labels != PAD
    logp = out.logits.log_softmax(-1).gather(-1, labels[..., None])[..., 0]  # (B, T)
    torch.testing.assert_close(out.loss, -logp[real].mean())
    noisy = out.logits.detach() + 5 * torch.randn_like(out.logits) * (~real)[..., None]  # only at PAD labels
    torch.testing.assert_close(seq2seq_loss(noisy, labels, PAD), out.loss.detach())
    moved = out.logits.detach() + 5 * torch.randn_like(out.logits) * real[..., None]
    assert not torch.allclose(seq2seq_loss(moved, labels, PAD), out.loss.detach())


def test_overfits_a_few_reversals():
    torch.manual_seed(0)
    model = build_seq2seq(Seq2SeqConfig(**(TINY | dict(n_encoder_layers=1, n_decoder_layers=1)))).train()
    g = torch.Generator().manual_seed(0)
    lengths = [3, 4, 5, 6, 3, 5, 6, 4]
    src = torch.full((8, 7), PAD)
    tgt = torch.full((8, 7), PAD)
    labels = torch.full((8, 7), PAD)
    for i, n in enumerate(lengths):
        digits = torch.randint(3, 13, (n,), generator=g)
        src[i, :n], src[i, n] = digits, EOS
        tgt[i, 0], tgt[i, 1 : n + 1] = BOS, digits.flip(0)
        labels[i, :n], labels[i, n] = digits.flip(0), EOS
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        loss = model(src, tgt, labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model.eval()(src, tgt, labels).loss.item() < 0.05


def test_errors_name_the_bad_value():
    model = tiny()
    src, tgt = batch()
    with pytest.raises(ValueError, match="source length 33 exceeds block_size=32"):
        model(torch.ones(1, 33, dtype=torch.long), tgt[:1])
    with pytest.raises(ValueError, match="target length 40 exceeds block_size=32"):
        model(src[:1], torch.ones(1, 40, dtype=torch.long))
    with pytest.raises(UserError, match="model.n_embd=30 is not divisible by model.n_head=4"):
        Seq2SeqConfig(n_embd=30)
    with pytest.raises(UserError, match="model.pad_id=13"):
        Seq2SeqConfig(pad_id=13)
    with pytest.raises(UserError, match="model.ffn='sigmoid' is not one of gelu, gelu_tanh, relu, relu2, swiglu"):
        Seq2SeqConfig(ffn="sigmoid")


# ---- the chapter's switches ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("positions", ["sinusoidal", "none"])
def test_scale_embeddings_false_drops_exactly_the_sqrt_d_factor(positions):
    on, off = (tiny(seed=3, positions=positions, scale_embeddings=s) for s in (True, False))
    assert torch.equal(on.embed.tok.weight, off.embed.tok.weight)  # same draws: only the factor differs
    ids = torch.tensor([[1, 5, 7, 0, 12, 3]])
    tok = on.embed.tok.weight[ids]  # (1, 6, D)
    pe = on.embed(ids) - tok * math.sqrt(32)  # the positions (zero without them)
    torch.testing.assert_close(off.embed(ids), tok + pe, atol=1e-6, rtol=0)  # the token part / sqrt(D), PE unchanged
    assert on.embed.scale == math.sqrt(32) and off.embed.scale == 1.0
    assert not torch.allclose(on(*batch()).logits, off(*batch()).logits, atol=1e-3)  # and the model sees it


def linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def test_default_init_keeps_pytorchs_kaiming_uniform_for_every_linear():
    model = build_seq2seq(Seq2SeqConfig(init="default"))  # the seed sizes: D = 128, d_ff = 512
    assert len(linears(model)) == 2 * 4 + 2 * 7 + 1  # encoder blocks: 4 Linears, decoder blocks: 7, the head
    for m in linears(model):
        bound = 1 / math.sqrt(m.in_features)  # kaiming_uniform_(a=sqrt(5)) and the bias: U(-1/sqrt(fan_in), ...)
        assert 0.95 * bound < m.weight.abs().max().item() <= bound
        assert 0.9 * bound < m.bias.abs().max().item() <= bound  # not zeroed
    qkv = build_seq2seq(Seq2SeqConfig()).encoder.blocks[0].attn.qkv.weight  # Xavier per projection: sqrt(3 / D)
    assert qkv.abs().max().item() > 1.6 / math.sqrt(128)
    assert abs(model.embed.tok.weight[1:].std().item() - 128**-0.5) < 0.05 * 128**-0.5  # embeddings: own switch
    both = build_seq2seq(Seq2SeqConfig(init="default", embedding_init="default")).embed.tok.weight
    assert abs(both[1:].std().item() - 1) < 0.05


def test_relu_feed_forward_is_the_papers_max_zero_mlp():
    torch.manual_seed(0)
    ffn = make_feedforward(BlockSpec(8, 2, d_ff=16, ffn="relu"))
    x = torch.randn(2, 5, 8)
    hidden = (x @ ffn.fc.weight.T + ffn.fc.bias).clamp(min=0)  # (2, 5, 16): max(0, x W1 + b1)
    torch.testing.assert_close(ffn(x), hidden @ ffn.proj.weight.T + ffn.proj.bias)
    assert (hidden == 0).float().mean() > 0.2  # the clamp did something
    relu, gelu = tiny(ffn="relu"), tiny(ffn="gelu")
    assert isinstance(relu.decoder.blocks[0].mlp.act, nn.ReLU)
    assert sum(p.numel() for p in relu.parameters()) == sum(p.numel() for p in gelu.parameters())
    relu.load_state_dict(gelu.state_dict())  # the same weights, another activation: other logits
    assert not torch.allclose(relu(*batch()).logits, gelu(*batch()).logits, atol=1e-3)


def test_torch_baseline_takes_relu_and_refuses_feed_forwards_it_lacks():
    import torch.nn.functional as F

    from tinyformer.models.torch_seq2seq import TorchSeq2Seq

    assert TorchSeq2Seq(Seq2SeqConfig(impl="torch", ffn="relu")).core.encoder.layers[0].activation is F.relu
    with pytest.raises(UserError, match="model.ffn='swiglu' is not available with model.impl=torch: gelu, relu"):
        Seq2SeqConfig(impl="torch", ffn="swiglu")


def test_switch_values_are_checked_in_one_line_naming_the_field():
    with pytest.raises(UserError, match="^model.init='kaiming' is not one of xavier, default$"):
        Seq2SeqConfig(init="kaiming")
    with pytest.raises(UserError, match="^model.scale_embeddings expects bool, got 'no'$"):
        build(Seq2SeqConfig, {"scale_embeddings": "no"}, "model.")
    c = build(Seq2SeqConfig, {"scale_embeddings": False, "init": "default", "ffn": "relu"}, "model.")
    assert (c.scale_embeddings, c.init, c.ffn) == (False, "default", "relu")


# ---- cached decoding -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", VARIANTS, ids=["default", "manual", "post_norm", "swiglu"])
def test_cached_decode_one_token_at_a_time_equals_a_full_decode(kw):
    """Each step feeds only the newest token; its logits are the full decode's logits at that position."""
    model = tiny(**kw)
    src, tgt = batch(lengths=(9, 4, 6), T=7)
    tgt[1, 5:] = PAD  # a row that finished: padding in the prefix stays hidden as a key, as in the full decode
    enc = model.encode(src)
    full = model.decode(tgt, enc.memory, enc.src_valid).logits  # (B, T, V)
    cache = model.new_cache(enc, capacity=tgt.size(1))
    steps = [model.decode(tgt[:, t : t + 1], enc.memory, enc.src_valid, cache=cache, start=t).logits for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert not torch.allclose(steps[3], full[:, 2:3], atol=1e-4)  # positions differ: the test can see a mix-up


def test_cached_decode_takes_chunks_and_rewinds():
    """A prefix of 3 then 4 tokens at once equals the full decode; rewinding to position 2 overwrites the rest."""
    model = tiny()
    src, tgt = batch(T=7)
    enc = model.encode(src)
    full = model.decode(tgt, enc.memory, enc.src_valid).logits
    cache = model.new_cache(enc)
    first = model.decode(tgt[:, :3], enc.memory, enc.src_valid, cache=cache, start=0).logits
    rest = model.decode(tgt[:, 3:], enc.memory, enc.src_valid, cache=cache, start=3).logits
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, atol=1e-5, rtol=0)
    other = tgt.clone()
    other[:, 2:] = 3 + (tgt[:, 2:] - 3 + 1) % 10
    again = model.decode(other[:, 2:], enc.memory, enc.src_valid, cache=cache, start=2).logits
    torch.testing.assert_close(again, model.decode(other, enc.memory, enc.src_valid).logits[:, 2:], atol=1e-5, rtol=0)


def test_cached_decode_refuses_positions_past_the_block_or_without_a_cache():
    model = tiny(block_size=10)
    src, tgt = batch(T=2)
    enc = model.encode(src)
    with pytest.raises(ValueError, match=r"target positions \[9, 11\) exceed block_size=10"):
        model.decode(tgt, enc.memory, enc.src_valid, cache=model.new_cache(enc), start=9)
    with pytest.raises(ValueError, match="start=3 without a cache"):
        model.decode(tgt, enc.memory, enc.src_valid, start=3)


def test_a_reordered_cache_continues_each_row_from_its_new_parent():
    """Rows moved by `reorder` decode on as if the moved prefixes (and sources, with cross=True) had been run."""
    model = tiny()
    src, tgt = batch(lengths=(9, 4, 6), T=6)
    tgt[2, 3:] = PAD  # a padded row: its tgt_valid must move with it
    enc = model.encode(src)
    cache = model.new_cache(enc, capacity=6)
    model.decode(tgt[:, :4], enc.memory, enc.src_valid, cache=cache, start=0)  # positions 0-3 cached
    index = torch.tensor([2, 0, 2])  # row 0 <- old row 2, row 1 <- old row 0, row 2 stays
    cache.reorder(index)
    moved = model.encode(src[index])
    step = model.decode(tgt[index, 4:], moved.memory, moved.src_valid, cache=cache, start=4).logits
    full = model.decode(tgt[index], moved.memory, moved.src_valid).logits[:, 4:]
    torch.testing.assert_close(step, full, atol=1e-5, rtol=0)
    assert not torch.allclose(step, model.decode(tgt, enc.memory, enc.src_valid).logits[:, 4:], atol=1e-4)
    with pytest.raises(ValueError, match=r"index \(2,\) must have one entry per cache row, \(3,\)"):
        cache.reorder(torch.tensor([0, 1]))


def test_the_chapters_two_embeddings_one_per_stack_with_a_zero_padding_row():
    """share_embeddings=False: the encoder and the decoder each embed with their own table (the chapter's
    TokenAndPosition per stack): 13 x 128 more parameters, and the decoder's output moves with its own table
    only. The padding row of each is zero and stays zero through training (padding_idx: no gradient)."""
    torch.manual_seed(0)
    shared, apart = build_seq2seq(Seq2SeqConfig(dropout=0.0)), build_seq2seq(Seq2SeqConfig(share_embeddings=False))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(apart) - count(shared) == 13 * 128 and apart.tgt_embed is not None and shared.tgt_embed is None
    apart.eval()
    src, tgt = batch()
    before = apart(src, tgt).logits
    with torch.no_grad():
        apart.tgt_embed.tok.weight[3:] += 1.0  # the decoder's digits only
    assert not torch.allclose(before, apart(src, tgt).logits)
    enc = apart.encode(src).memory
    with torch.no_grad():
        apart.tgt_embed.tok.weight[3:] += 1.0
    torch.testing.assert_close(apart.encode(src).memory, enc)  # the encoder never reads the decoder's table
    apart.train()
    tgt[0, 6:] = PAD  # padding in both inputs: its rows would move if they took gradients
    opt = torch.optim.SGD(apart.parameters(), lr=1.0)
    apart(src, tgt[:, :-1], tgt[:, 1:]).loss.backward()
    opt.step()
    assert not apart.embed.tok.weight[0].any() and not apart.tgt_embed.tok.weight[0].any()
