"""The references are the course's own code, and the default recipes are the course's: each fact is pinned by
the number the course's documents give (../shared/course), and each reference computes what tinyformer's
default model computes, weight for weight (else a speed ratio compares different work)."""

import math

import pytest
import torch
import torch.nn.functional as F

from tinyformer.bench import reference as ch
from tinyformer.bench.reference import LabGPT, lab_optimizer
from tinyformer.data.reversal import BOS, EOS, PAD, make_split
from tinyformer.models.gpt import MiniGPT
from tinyformer.tasks import GPTTask, ReverseTask
from tinyformer.train.optim import make_optimizer
from tinyformer.train.schedules import lr_at


# ---- the lab's MiniGPT ----------------------------------------------------------------------------------------------
def lab_state(ours: MiniGPT) -> dict:
    """tinyformer's MiniGPT weights under the lab's names (the lab's mask buffer is the lab's own)."""
    rename = {"mlp.fc": "ffn.0", "mlp.proj": "ffn.2"}
    state = {}
    for key, value in ours.state_dict().items():
        for a, b in rename.items():
            key = key.replace(a, b)
        state[key] = value
    return state


def default_gpt(**changes) -> MiniGPT:
    """The model of `tinyformer train gpt` (the lab's recipe) for a 65-character vocabulary."""
    config = GPTTask.default_config().model
    for k, v in {"vocab_size": 65, **changes}.items():
        setattr(config, k, v)
    return MiniGPT(config)


def test_the_default_gpt_is_the_labs_model_weight_for_weight():
    torch.manual_seed(0)
    ours, ref = default_gpt().eval(), LabGPT(65).eval()
    assert sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in ours.parameters()) == 824_832
    missing, unexpected = ref.load_state_dict(lab_state(ours), strict=False)
    assert unexpected == [] and all(k.endswith("attn.mask") for k in missing)
    x, y = torch.randint(0, 65, (2, 128)), torch.randint(0, 65, (2, 128))
    torch.testing.assert_close(ref(x, y)[1], ours(x, y).loss, atol=1e-5, rtol=0)
    rates = {name: m.p for name, m in ours.named_modules() if isinstance(m, torch.nn.Dropout)}
    assert rates.pop("drop") == 0.0 and set(rates.values()) == {0.1}  # none on the embeddings, 0.1 after each branch


def test_the_lab_and_the_default_gpt_keep_pytorchs_own_initialisation():
    """The lab has no init code: embeddings N(0, 1), Linears U(+-1/sqrt(fan_in)) with such a bias."""
    torch.manual_seed(0)
    for model in (LabGPT(65), default_gpt()):
        emb = dict(model.named_parameters())["tok_emb.weight"]
        assert abs(emb.std().item() - 1.0) < 0.05
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert len(linears) == 4 * 4 + 1
        for m in linears:
            bound = 1 / math.sqrt(m.in_features)
            assert 0.95 * bound < m.weight.abs().max().item() <= bound
            assert m.bias is None or 0.9 * bound < m.bias.abs().max().item() <= bound


def test_the_default_recipe_trains_as_the_labs_loop():
    """Same weights, same batches, no dropout: five steps of tinyformer's optimizer on the lab's recipe (AdamW's
    0.01 decay on every parameter, constant 3e-4, no clipping) give the lab's losses and weights."""
    config = GPTTask.default_config()
    torch.manual_seed(0)
    ours, ref = default_gpt(dropout=0.0), LabGPT(65, p=0.0)
    ref.load_state_dict(lab_state(ours), strict=False)
    opt_ours, opt_ref = make_optimizer(ours, config.train), lab_optimizer(ref)
    g = torch.Generator().manual_seed(1)
    for step in range(5):
        x, y = torch.randint(0, 65, (4, 128), generator=g), torch.randint(0, 65, (4, 128), generator=g)
        for group in opt_ours.param_groups:
            group["lr"] = lr_at(step, config.train)
        a, b = ours(x, y).loss, ref(x, y)[1]
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        for opt, loss in ((opt_ours, a), (opt_ref, b)):
            opt.zero_grad()
            loss.backward()
            opt.step()
    theirs = dict(ref.named_parameters())
    for name, p in lab_state(ours).items():
        torch.testing.assert_close(p, theirs[name].detach(), atol=1e-5, rtol=0)


def test_lab_gpt_is_causal():
    torch.manual_seed(0)
    model = LabGPT(20, block=16, d=32, h=4, layers=2).eval()
    x = torch.randint(0, 20, (2, 16))
    changed = x.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 20
    a, b = model(x)[0], model(changed)[0]
    torch.testing.assert_close(a[:, :10], b[:, :10], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_lab_gpt_drops_out_only_after_proj_and_the_feed_forward(monkeypatch):
    """No dropout on the embeddings or the (B, H, T, T) attention weights: every dropout call in a training
    step is on a (B, T, D) residual branch, two per block, and the modules sit where the lab puts them."""
    model = LabGPT(20, block=16, d=32, h=4, layers=3).train()
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)]
    assert names == [f"blocks.{i}.{part}" for i in range(3) for part in ("attn.drop", "ffn.3")]
    shapes, real = [], F.dropout
    monkeypatch.setattr(F, "dropout", lambda x, *a, **k: shapes.append(tuple(x.shape)) or real(x, *a, **k))
    model(torch.randint(0, 20, (2, 16)), torch.randint(0, 20, (2, 16)))
    assert shapes == [(2, 16, 32)] * 6


def test_lab_optimizer_is_adamw_with_its_defaults():
    opt = lab_optimizer(LabGPT(20, block=16, d=32, h=4, layers=1))
    defaults = torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults
    assert type(opt) is torch.optim.AdamW and len(opt.param_groups) == 1 and defaults["weight_decay"] == 0.01
    assert opt.defaults == {**defaults, "lr": 3e-4}  # foreach / fused left to PyTorch


# ---- chapter 20's encoder-decoder ------------------------------------------------------------------------------------
def chapter_state(ours) -> dict:
    """tinyformer's encoder-decoder weights under the chapter's names (fused projections split)."""
    state = {"encoder.embed.emb.weight": ours.embed.tok.weight, "decoder.embed.emb.weight": ours.tgt_embed.tok.weight}
    state |= {"out_proj.weight": ours.head.weight, "out_proj.bias": ours.head.bias}
    for side, stack in (("encoder", ours.encoder), ("decoder", ours.decoder)):
        state |= {f"{side}.ln_final.{k}": v for k, v in stack.norm.state_dict().items()}
        for i, block in enumerate(stack.blocks):
            pre = f"{side}.layers.{i}"
            lns = ("ln1", "ln2") if side == "encoder" else ("ln1", "ln2", "ln3")
            state |= {f"{pre}.{ln}.{k}": v for ln in lns for k, v in getattr(block, ln).state_dict().items()}
            state |= {f"{pre}.ffn.0.{k}": v for k, v in block.mlp.fc.state_dict().items()}
            state |= {f"{pre}.ffn.2.{k}": v for k, v in block.mlp.proj.state_dict().items()}
            attns = (
                {"mha": block.attn}
                if side == "encoder"
                else {"self_mha": block.self_attn, "cross_mha": block.cross_attn}
            )
            for name, attn in attns.items():
                fused = [attn.qkv] if not attn.cross else [attn.q, attn.kv]
                weights = torch.cat([f.weight for f in fused]).chunk(3)
                biases = torch.cat([f.bias for f in fused]).chunk(3)
                for w, b, proj in zip(weights, biases, ("W_q", "W_k", "W_v"), strict=True):
                    state |= {f"{pre}.{name}.{proj}.weight": w, f"{pre}.{name}.{proj}.bias": b}
                state |= {f"{pre}.{name}.W_o.{k}": v for k, v in attn.proj.state_dict().items()}
    return state


@pytest.fixture
def default_reverse():
    """The model of `tinyformer train reverse` (the chapter's recipe), in eval mode."""
    torch.manual_seed(0)
    return ReverseTask(ReverseTask.default_config(), None).build_model().eval()


def test_the_default_reverse_model_is_the_chapters_weight_for_weight(default_reverse):
    """931,213 parameters, the chapter's printed count (two embeddings: 929,549 would be one shared table); the
    chapter's model with tinyformer's weights computes tinyformer's logits."""
    chapter = ch.ChapterSeq2Seq().eval()
    assert sum(p.numel() for p in chapter.parameters()) == 931_213
    assert sum(p.numel() for p in default_reverse.parameters()) == 931_213
    chapter.load_state_dict(chapter_state(default_reverse))
    src, tgt = ch.chapter_pairs(16, seed=1)
    torch.testing.assert_close(chapter(src, tgt[:, :-1]), default_reverse(src, tgt[:, :-1]).logits, atol=2e-5, rtol=0)


def test_the_chapters_initialisation_in_the_reference_and_the_default_model(default_reverse):
    """Embeddings N(0, 128^-0.5) with the PAD row zero; Xavier-uniform Linears (bound sqrt(6 / (in + out)) per
    projection) with zero biases; a 14-row position table."""
    torch.manual_seed(0)
    chapter = ch.ChapterSeq2Seq()
    for emb in (
        chapter.encoder.embed.emb,
        chapter.decoder.embed.emb,
        default_reverse.embed.tok,
        default_reverse.tgt_embed.tok,
    ):
        assert not emb.weight[PAD].any() and abs(emb.weight[1:].std().item() - 128**-0.5) < 0.1 * 128**-0.5
    for m in chapter.modules():
        if isinstance(m, torch.nn.Linear):
            bound = math.sqrt(6 / (m.in_features + m.out_features))
            assert 0.95 * bound < m.weight.abs().max().item() <= bound and not m.bias.any()
    assert chapter.encoder.embed.pe.shape == (14, 128) and default_reverse.config.block_size == 14


def test_the_chapters_pairs_are_14_wide_seeded_0_and_1():
    """make_dataset(20000, seed=0) trains, make_dataset(1000, seed=1) is held out: numpy's default_rng, 14 wide.
    The default recipe draws the same pairs and scores the chapter's first 500 held-out ones."""
    import numpy as np

    src, tgt = ch.chapter_pairs(20_000, seed=0)
    assert src.shape == tgt.shape == (20_000, 14)
    rng = np.random.default_rng(0)
    length = int(rng.integers(3, 13))
    assert src[0, :length].tolist() == (rng.integers(0, 10, length) + 3).tolist() and src[0, length] == EOS
    task = ReverseTask.prepare(ReverseTask.default_config())
    assert torch.equal(task.train[0], src) and torch.equal(task.train[1], tgt)
    assert torch.equal(task.val[0], ch.chapter_pairs(1000, seed=1)[0][: ch.N_SCORED])


def test_the_noam_rate_is_the_chapters_formula_at_step_plus_one():
    """lr = 128^-0.5 * min(s^-0.5, s * 1000^-1.5), s = step + 1: at the 1st, 1,000th and 3,120th update, and the
    rates the chapter's log prints after epochs 1, 3 and 10 (312 updates each)."""
    d, w = 128, 1000
    rate = {n: d**-0.5 * min(n**-0.5, n * w**-1.5) for n in (1, 1000, 3120)}  # the n-th update
    recipe = ReverseTask.default_config().train
    for n, expected in rate.items():
        assert ch.noam_factor(n - 1) == pytest.approx(expected) == pytest.approx(lr_at(n - 1, recipe))
    assert [f"{ch.noam_factor(e * 312):.2e}" for e in (1, 3, 10)] == ["8.75e-04", "2.62e-03", "1.58e-03"]
    assert recipe.max_iters == 3120 and recipe.eval_interval == 312 and recipe.beta2 == 0.98 and recipe.eps == 1e-9


def test_chapter_optimizer_steps_the_noam_rate():
    opt, schedule = ch.chapter_optimizer(ch.ChapterSeq2Seq(d=32, h=4, d_ff=64), d=32, warmup=10)
    assert type(opt) is torch.optim.Adam and opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    rates = []
    for _ in range(20):
        rates.append(opt.param_groups[0]["lr"])  # the rate of this step
        opt.step()
        schedule.step()
    assert rates == pytest.approx([ch.noam_factor(step, 32, 10) for step in range(20)])
    assert max(rates) == rates[9]  # the 10th update: s = warmup


def test_chapter_decoder_is_causal():
    torch.manual_seed(0)
    chapter = ch.ChapterSeq2Seq(d=32, h=4, d_ff=64).eval()
    src, tgt = ch.chapter_pairs(4, seed=1)
    changed = tgt.clone()
    changed[:, 6:] = torch.where(changed[:, 6:] > 2, 3 + (changed[:, 6:] - 2) % 10, 7)  # other tokens, no padding
    a, b = chapter(src, tgt[:, :-1]), chapter(src, changed[:, :-1])
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_chapter_source_padding_changes_nothing():
    torch.manual_seed(0)
    chapter = ch.ChapterSeq2Seq(d=32, h=4, d_ff=64).eval()
    src, tgt = make_split(4, 3, 8, seed=2)  # 10 wide
    padded = F.pad(src, (0, 4), value=PAD)  # the chapter's test: more PAD on the right changes no output
    torch.testing.assert_close(chapter(src, tgt[:, :-1]), chapter(padded, tgt[:, :-1]), atol=1e-5, rtol=0)


class Oracle:
    """A stand-in model whose next token is the label at that position: greedy decoding writes `labels`."""

    def __init__(self, labels: torch.Tensor) -> None:
        self.labels = labels

    def eval(self):
        return self

    def encode(self, src):
        return None, None

    def decode(self, ys, memory, src_mask):
        return F.one_hot(self.labels[:, : ys.size(1)], 13).float()  # (N, T, V)


def test_greedy_exact_match_compares_up_to_eos():
    src, tgt = ch.chapter_pairs(50, seed=3)
    assert ch.greedy_exact_match(Oracle(tgt[:, 1:]), src, tgt) == 1.0
    wrong = tgt[:, 1:].clone()
    wrong[0, 0] = 3 + (wrong[0, 0] - 2) % 10  # another digit
    wrong[1, (wrong[1] == EOS).nonzero()[0, 0] + 1] = 5  # past EOS: decoding has stopped, no effect
    assert ch.greedy_exact_match(Oracle(wrong), src, tgt) == pytest.approx(49 / 50)
    assert ch.greedy_decode(Oracle(tgt[:, 1:]), src)[:, 0].eq(BOS).all()


def test_chapter_loader_gives_312_full_width_shuffled_batches_an_epoch():
    src, tgt = ch.chapter_pairs(20_000, seed=0)
    batches = list(ch.chapter_loader(src, tgt, batch_size=64))
    assert len(batches) == 312 and all(s.shape == (64, 14) and t.shape == (64, 14) for s, t in batches)
    assert not torch.equal(batches[0][0], src[:64])  # shuffled
