"""The references are the course's own code: each property of the recipe the benchmarks claim is checked,
and they compute the functions they stand in for (else a speed ratio compares different work)."""

import pytest
import torch
import torch.nn.functional as F

from tinyformer.bench import reference as ch
from tinyformer.bench.reference import LabGPT, lab_optimizer
from tinyformer.config import TrainConfig
from tinyformer.data.reversal import EOS, PAD, make_split
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.tasks import ReverseTask
from tinyformer.train.schedules import lr_at


# ---- the lab's MiniGPT ----------------------------------------------------------------------------------------------
def test_lab_gpt_is_minigpt_written_plainly():
    torch.manual_seed(0)
    ours = MiniGPT(GPTConfig(vocab_size=65)).eval()
    ref = LabGPT(65).eval()
    assert sum(p.numel() for p in ref.parameters()) == sum(p.numel() for p in ours.parameters()) == 824_832
    rename = {"tok_emb": "tok", "pos_emb": "pos", "mlp.fc": "mlp.0", "mlp.proj": "mlp.2", ".drop.": ".attn.drop."}
    state = {}
    for key, value in ours.state_dict().items():
        for a, b in rename.items():
            key = key.replace(a, b)
        state[key] = value
    ref.load_state_dict(state)
    x, y = torch.randint(0, 65, (2, 128)), torch.randint(0, 65, (2, 128))
    torch.testing.assert_close(ref(x, y), ours(x, y).loss, atol=1e-5, rtol=0)


def lab_logits(model: LabGPT, idx: torch.Tensor) -> torch.Tensor:
    """The (B, T, V) logits of the forward that returns only the loss, caught at the head."""
    caught = []
    hook = model.head.register_forward_hook(lambda m, inputs, out: caught.append(out))
    model(idx, idx)
    hook.remove()
    return caught[0]


def test_lab_gpt_is_causal():
    torch.manual_seed(0)
    model = LabGPT(20, block=16, d=32, h=4, layers=2).eval()
    x = torch.randint(0, 20, (2, 16))
    changed = x.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 20
    a, b = lab_logits(model, x), lab_logits(model, changed)
    torch.testing.assert_close(a[:, :10], b[:, :10], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_lab_gpt_drops_out_only_after_proj_and_the_feed_forward(monkeypatch):
    """No dropout on the embeddings or the (B, H, T, T) attention weights: every dropout call in a training
    step is on a (B, T, D) residual branch, two per block, and the modules sit where the lab puts them."""
    model = LabGPT(20, block=16, d=32, h=4, layers=3).train()
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)]
    assert names == [f"blocks.{i}.{part}" for i in range(3) for part in ("attn.drop", "mlp.3")]
    shapes, real = [], F.dropout
    monkeypatch.setattr(F, "dropout", lambda x, *a, **k: shapes.append(tuple(x.shape)) or real(x, *a, **k))
    model(torch.randint(0, 20, (2, 16)), torch.randint(0, 20, (2, 16)))
    assert shapes == [(2, 16, 32)] * 6


def test_lab_optimizer_is_adamw_with_its_defaults():
    opt = lab_optimizer(LabGPT(20, block=16, d=32, h=4, layers=1))
    defaults = torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults
    assert type(opt) is torch.optim.AdamW and len(opt.param_groups) == 1
    assert opt.defaults == {**defaults, "lr": 3e-4}  # foreach / fused left to PyTorch


# ---- chapter 20's encoder-decoder ------------------------------------------------------------------------------------
@pytest.fixture
def chapter() -> ch.ChapterSeq2Seq:
    torch.manual_seed(0)
    return ch.ChapterSeq2Seq(d=32, h=4, d_ff=64).eval()


def test_chapter_model_has_the_size_of_tinyformers_reverse_recipe():
    config = ReverseTask.default_config()
    ours = ReverseTask(config, None).build_model()
    count = sum(p.numel() for p in ch.ChapterSeq2Seq().parameters())
    assert count == sum(p.numel() for p in ours.parameters()) == 929_549


def test_chapter_decoder_is_causal(chapter):
    src, tgt = make_split(4, 3, 12, seed=1)
    changed = tgt.clone()
    changed[:, 6:] = torch.where(changed[:, 6:] > 2, 3 + (changed[:, 6:] - 2) % 10, 7)  # other tokens, no padding
    a, b = chapter(src, tgt[:, :-1]), chapter(src, changed[:, :-1])
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_chapter_source_padding_changes_nothing(chapter):
    src, tgt = make_split(4, 3, 8, seed=2)
    padded = F.pad(src, (0, 5), value=PAD)
    torch.testing.assert_close(chapter(src, tgt[:, :-1]), chapter(padded, tgt[:, :-1]), atol=1e-5, rtol=0)


def test_noam_factor_warms_up_then_decays_as_tinyformers_schedule():
    d, w = 128, 1000
    assert ch.noam_factor(0) == ch.noam_factor(1) == pytest.approx(d**-0.5 * w**-1.5)
    assert ch.noam_factor(w) == pytest.approx(d**-0.5 * w**-0.5)  # the peak
    assert ch.noam_factor(4 * w) == pytest.approx(ch.noam_factor(w) / 2)
    recipe = TrainConfig(lr=d**-0.5 * w**-0.5, schedule="noam", warmup_iters=w)
    for step in (1, 10, 999, 1000, 1001, 3120):
        assert ch.noam_factor(step) == pytest.approx(lr_at(step - 1, recipe))


def test_chapter_optimizer_steps_the_noam_rate():
    opt, schedule = ch.chapter_optimizer(ch.ChapterSeq2Seq(d=32, h=4, d_ff=64), d=32, warmup=10)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    rates = []
    for _ in range(20):
        rates.append(opt.param_groups[0]["lr"])  # the rate of this step
        opt.step()
        schedule.step()
    assert rates == pytest.approx([ch.noam_factor(step, 32, 10) for step in range(20)])
    assert max(rates) == rates[10]  # step 0 counts as 1, so the peak comes one step after tinyformer's


class Oracle:
    """A stand-in model whose next token is the label at that position: greedy decoding writes `labels`."""

    def __init__(self, labels: torch.Tensor) -> None:
        self.labels = labels

    def encode(self, src):
        return None, None

    def decode(self, ys, memory, src_mask):
        return F.one_hot(self.labels[:, : ys.size(1)], 13).float()  # (N, T, V)


def test_greedy_exact_match_compares_up_to_eos():
    src, tgt = make_split(50, 3, 12, seed=3)
    assert ch.greedy_exact_match(Oracle(tgt[:, 1:]), src, tgt) == 1.0
    wrong = tgt[:, 1:].clone()
    wrong[0, 0] = 3 + (wrong[0, 0] - 2) % 10  # another digit
    wrong[1, (wrong[1] == EOS).nonzero()[0, 0] + 1] = 5  # past EOS: decoding has stopped, no effect
    assert ch.greedy_exact_match(Oracle(wrong), src, tgt) == pytest.approx(49 / 50)


def test_chapter_loader_gives_full_length_shuffled_epochs():
    src, tgt = make_split(200, 3, 12, seed=4)
    batches = list(ch.chapter_loader(src, tgt, batch_size=64))
    assert len(batches) == 3 and all(s.shape == (64, 13) and t.shape == (64, 14) for s, t in batches)
    assert not torch.equal(batches[0][0], src[:64])  # shuffled
