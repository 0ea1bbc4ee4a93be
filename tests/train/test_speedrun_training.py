"""The speedrun's training switches: Muon for the blocks' matrices, the warmup-stable-decay schedule and
sequence-length warmup, each held to its claim, and an interrupted run with all three resumes bit-exactly."""

import pytest
import torch

from tests.conftest import tiny_run_config
from tests.train.test_trainer import make_trainer, weights
from tinyformer.config import DataConfig, TrainConfig
from tinyformer.device import seed_everything
from tinyformer.errors import UserError
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.tasks import GPTTask
from tinyformer.tasks.gpt import window_at
from tinyformer.train.optim import Optimizers, make_optimizer, muon_matrices
from tinyformer.train.schedules import lr_at
from tinyformer.train.trainer import Trainer


def small_gpt() -> MiniGPT:
    torch.manual_seed(0)
    return MiniGPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0))


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    model = small_gpt()
    names = {id(p): n for n, p in model.named_parameters()}
    hidden = {names[id(p)] for p in muon_matrices(model)}
    assert hidden == {
        f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")
    }
    opt = make_optimizer(model, TrainConfig(optimizer="muon"))
    assert isinstance(opt, Optimizers) and isinstance(opt.parts[0], torch.optim.Muon)
    assert isinstance(make_optimizer(model, TrainConfig()), torch.optim.AdamW)  # the default is unchanged
    in_muon = {id(p) for g in opt.parts[0].param_groups for p in g["params"]}
    in_adamw = {id(p) for g in opt.parts[1].param_groups for p in g["params"]}
    assert not in_muon & in_adamw and in_muon | in_adamw == {id(p) for p in model.parameters()}


def singular_spread(update: torch.Tensor) -> tuple[float, float]:
    s = torch.linalg.svdvals(update)
    return float(s.min() / s.max()), float(s.max())


def test_muons_step_is_orthogonalised_where_adamws_is_not():
    """One step from a gradient whose singular values span 100x: Muon moves the matrix along U V^T of the
    gradient (Newton-Schulz leaves every singular value of the update within its tolerance, about 0.7-1.2),
    AdamW's first step moves each entry by lr * sign(g), which keeps the gradient's dominant direction."""
    g = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(128, 32, generator=g))
    v, _ = torch.linalg.qr(torch.randn(32, 32, generator=g))
    grad = u @ torch.diag(torch.logspace(0, -2, 32)) @ v.T  # (128, 32), condition number 100
    spreads = {}
    for kind in ("muon", "adamw"):
        model = small_gpt()
        w = model.blocks[0].mlp.fc.weight  # (128, 32)
        before = w.detach().clone()
        opt = make_optimizer(model, TrainConfig(optimizer=kind, lr=1e-3, weight_decay=0.0))
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        w.grad = grad.clone()
        opt.step()
        spreads[kind] = singular_spread(w.detach() - before)
    low, top = spreads["muon"]
    assert low > 0.5  # every direction of the matrix moved by about the same amount
    assert top == pytest.approx(1e-3 * 0.2 * 128**0.5 * 1.0, rel=0.35)  # match_rms_adamw: lr * 0.2 * sqrt(max dim)
    assert spreads["adamw"][0] < 0.3


def test_wsd_warms_up_holds_then_decays_linearly_to_the_floor():
    c = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=100, schedule="wsd", cooldown=0.2)
    lrs = [lr_at(s, c) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(lr == 1e-3 for lr in lrs[10:80])  # stable
    steps = [a - b for a, b in zip(lrs[80:], lrs[81:])]
    assert all(d == pytest.approx(9e-4 / 20) for d in steps)  # one equal step down each time
    assert lrs[99] == pytest.approx(1e-4 + 9e-4 / 20)  # the last step taken is one step above the floor
    with pytest.raises(UserError, match="cooldown"):
        TrainConfig(schedule="wsd", cooldown=0.0)


def test_the_window_grows_from_an_eighth_to_the_whole_and_the_batches_are_the_same_windows_cut(text_file):
    assert [window_at(s, 128, 8) for s in (0, 4, 7, 8, 100)] == [16, 72, 114, 128, 128]
    assert window_at(0, 16, 4) == 8 and window_at(0, 128, 0) == 128
    shapes, firsts = {}, {}
    for warmup in (0, 6):
        cfg = tiny_run_config(text_file, max_iters=8)
        cfg.data.seq_warmup = warmup
        seed_everything(0)
        task = GPTTask.prepare(cfg)
        task.seek(0)
        g = torch.Generator().manual_seed(0)
        batches = [task.train_batch(4, g) for _ in range(8)]
        shapes[warmup] = [x.shape[1] for x, _ in batches]
        firsts[warmup] = batches
    assert shapes[0] == [16] * 8 and shapes[6] == [8, 9, 10, 12, 13, 14, 16, 16]
    for (x, y), (fx, fy) in zip(firsts[6], firsts[0]):  # the same random starts: each short window a prefix
        assert torch.equal(x, fx[:, : x.shape[1]]) and torch.equal(y, fy[:, : y.shape[1]])
    with pytest.raises(UserError, match="seq_warmup"):
        DataConfig(seq_warmup=-1)


def test_a_run_with_muon_wsd_and_window_warmup_resumes_bit_exactly(text_file, tmp_path):
    kw = dict(optimizer="muon", schedule="wsd", warmup_iters=2, grad_accum=2)

    def trainer(folder, resume=False):
        cfg = tiny_run_config(text_file, 0.1, "auto", **kw)
        cfg.data.seq_warmup = 8
        seed_everything(cfg.train.seed)
        task = GPTTask.prepare(cfg)
        return Trainer(task.build_model(), task, cfg.train, tmp_path / folder, resume=resume, progress=False)

    full = trainer("full")
    assert full.fit().status == "finished"
    part = trainer("part")
    assert part.fit(until=5).status == "stopped"  # inside the window warmup, mid schedule
    resumed = trainer("part", resume=True)
    assert resumed.fit().status == "finished"
    a, b = weights(full), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], w) for k, w in weights(make_trainer(text_file, tmp_path / "plain")).items())


def test_muon_under_fp16_is_refused_in_one_line():
    with pytest.raises(UserError, match="muon"):
        TrainConfig(optimizer="muon", precision="fp16")
