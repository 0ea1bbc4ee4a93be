"""The course's own implementations, the yardsticks of `bench train` and `bench reverse`.

Written plainly, as the course writes them, and not slowed down: a speed ratio
against them says what tinyformer gains over the code a learner already has.

- `LabGPT`, the lab's MiniGPT: one bias-free `qkv` Linear, scores masked with
  `masked_fill` of a registered (1, 1, T, T) lower-triangular buffer, softmax,
  dropout only after `proj` and after the feed-forward, none on the embeddings
  or the attention weights; Pre-LayerNorm; a bias-free head. Trained in fp32
  with `torch.optim.AdamW(model.parameters(), lr=3e-4)` (`lab_optimizer`).
- `ChapterSeq2Seq`, chapter 20's encoder-decoder (Vaswani et al., 2017):
  attention written out with dropout on the weights and `finfo.min` masking,
  embeddings scaled by sqrt(D) plus sinusoidal positions, Pre-Norm blocks,
  Xavier init. Trained with a shuffled `DataLoader` over sequences padded to
  the full length (`chapter_loader`), Adam betas (0.9, 0.98), eps 1e-9 and the
  Noam `LambdaLR` (`chapter_optimizer`); scored by greedy decoding without a
  KV cache (`greedy_exact_match`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tinyformer.data.reversal import BOS, EOS, PAD

MAX_LEN = 64  # rows of the encoder-decoder's position table (tinyformer's block_size)


# ---- the lab's MiniGPT -----------------------------------------------------------------------------------------------
class LabAttention(nn.Module):
    def __init__(self, d: int, h: int, block: int, p: float) -> None:
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(p)
        tril = torch.tril(torch.ones(block, block, dtype=torch.bool)).view(1, 1, block, block)
        self.register_buffer("tril", tril, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)  # (B, T, D) each
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))  # (B, H, T, Dh)
        att = (q @ k.transpose(-2, -1)) * (D // self.h) ** -0.5  # (B, H, T, T)
        att = att.masked_fill(~self.tril[:, :, :T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)  # (B, H, T, Dh) -> (B, T, D)
        return self.drop(self.proj(y))


class LabBlock(nn.Module):
    def __init__(self, d: int, h: int, block: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = LabAttention(d, h, block, p)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(p))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class LabGPT(nn.Module):
    """The lab's character model; weights N(0, 0.02) and zero biases, as the lab initialises them."""

    def __init__(self, vocab: int, block: int = 128, d: int = 128, h: int = 4, layers: int = 4, p: float = 0.1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[LabBlock(d, h, block, p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.apply(_lab_init)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """idx, targets (B, T) -> mean next-token cross-entropy."""
        T = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))  # (B, T, D)
        logits = self.head(self.ln_f(self.blocks(x)))  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def _lab_init(m: nn.Module) -> None:
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)


def lab_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Exactly the lab's line: AdamW's defaults (implementation included) but the learning rate."""
    return torch.optim.AdamW(model.parameters(), lr=3e-4)


# ---- chapter 20's encoder-decoder ------------------------------------------------------------------------------------
class ChapterAttention(nn.Module):
    """Multi-head attention written out: queries from x, keys and values from `kv` (x itself, or the memory)."""

    def __init__(self, d: int, h: int, p: float) -> None:
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor, kv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, D), kv (B, S, D), mask (B, 1, T or 1, S) True = may attend -> (B, T, D)."""
        B, T, D = x.shape
        q = self.q(x).view(B, T, self.h, -1).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)  # (B, H, S, Dh)
        v = self.v(kv).view(B, kv.size(1), self.h, -1).transpose(1, 2)  # (B, H, S, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // self.h)  # (B, H, T, S)
        weights = self.drop(scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(dim=-1))
        return self.o((weights @ v).transpose(1, 2).reshape(B, T, D))  # (B, H, T, Dh) -> (B, T, D)


def _feed_forward(d: int, d_ff: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d))


class ChapterEncoderLayer(nn.Module):
    def __init__(self, d: int, h: int, d_ff: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.ff, self.drop = ChapterAttention(d, h, p), _feed_forward(d, d_ff), nn.Dropout(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.drop(self.attn(h, h, mask))
        return x + self.drop(self.ff(self.ln2(x)))


class ChapterDecoderLayer(nn.Module):
    def __init__(self, d: int, h: int, d_ff: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.cross = ChapterAttention(d, h, p), ChapterAttention(d, h, p)
        self.ff, self.drop = _feed_forward(d, d_ff), nn.Dropout(p)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, tgt_mask: torch.Tensor, src_mask: torch.Tensor):
        h = self.ln1(x)
        x = x + self.drop(self.self_attn(h, h, tgt_mask))
        x = x + self.drop(self.cross(self.ln2(x), memory, src_mask))
        return x + self.drop(self.ff(self.ln3(x)))


def sinusoids(length: int, d: int) -> torch.Tensor:
    """(length, D): PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D))."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]  # (L, 1)
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))  # (D/2,)
    pe = torch.zeros(length, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe


class ChapterSeq2Seq(nn.Module):
    """Chapter 20's model: one token embedding for source and target, 2 + 2 Pre-Norm layers, Xavier init."""

    def __init__(self, vocab: int = 13, d: int = 128, h: int = 4, d_ff: int = 512, layers=(2, 2), p: float = 0.1):
        super().__init__()
        self.d = d
        self.embed = nn.Embedding(vocab, d)
        self.register_buffer("pe", sinusoids(MAX_LEN, d), persistent=False)
        self.drop = nn.Dropout(p)
        self.encoder = nn.ModuleList(ChapterEncoderLayer(d, h, d_ff, p) for _ in range(layers[0]))
        self.decoder = nn.ModuleList(ChapterDecoderLayer(d, h, d_ff, p) for _ in range(layers[1]))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab)
        for w in self.parameters():
            if w.dim() > 1:
                nn.init.xavier_uniform_(w)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.embed(ids) * math.sqrt(self.d) + self.pe[: ids.size(1)])  # (B, L, D)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, D) and the source mask (B, 1, 1, S) (padding may not be attended)."""
        src_mask = (src != PAD)[:, None, None, :]  # (B, 1, 1, S)
        x = self._embed(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.enc_norm(x), src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """tgt_in (B, T) -> logits (B, T, V); each position sees itself, earlier positions and no padding."""
        T = tgt_in.size(1)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=tgt_in.device))  # (T, T)
        tgt_mask = causal & (tgt_in != PAD)[:, None, None, :]  # (B, 1, T, T)
        x = self._embed(tgt_in)
        for layer in self.decoder:
            x = layer(x, memory, tgt_mask, src_mask)
        return self.out(self.dec_norm(x))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_in, *self.encode(src))


def chapter_loss(model: ChapterSeq2Seq, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: the decoder reads tgt without its last token and predicts tgt without BOS."""
    logits = model(src, tgt[:, :-1])  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)


def chapter_loader(src: torch.Tensor, tgt: torch.Tensor, batch_size: int = 64) -> DataLoader:
    """Shuffled batches of whole pairs, padded to the full length; the last partial batch is dropped
    (20,000 / 64 -> 312 steps an epoch, as tinyformer's epoch)."""
    return DataLoader(TensorDataset(src, tgt), batch_size=batch_size, shuffle=True, drop_last=True)


def noam_factor(step: int, d: int = 128, warmup: int = 1000) -> float:
    """d^-1/2 * min(step^-1/2, step * warmup^-3/2); LambdaLR asks for step 0 first, which counts as step 1."""
    step = max(step, 1)
    return d**-0.5 * min(step**-0.5, step * warmup**-1.5)


def chapter_optimizer(model: nn.Module, d: int = 128, warmup: int = 1000):
    """-> (Adam with betas (0.9, 0.98), eps 1e-9, and its Noam LambdaLR); call both `.step()`s every batch."""
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: noam_factor(step, d, warmup))


@torch.no_grad()
def greedy_exact_match(model: ChapterSeq2Seq, src: torch.Tensor, tgt: torch.Tensor) -> float:
    """The share of pairs whose greedy output (no KV cache: the whole prefix is re-run every step) equals the
    target up to and including EOS. src (N, S), tgt (N, T + 1) with BOS first. Call it in eval mode."""
    labels = tgt[:, 1:]  # (N, T)
    memory, src_mask = model.encode(src)
    ys = torch.full((len(src), 1), BOS)  # (N, 1)
    done = torch.zeros(len(src), dtype=torch.bool)
    while ys.size(1) <= labels.size(1) and not done.all():
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1).masked_fill(done, PAD)  # (N,)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == EOS
    pred = F.pad(ys[:, 1:], (0, labels.size(1) - ys.size(1) + 1), value=PAD)  # (N, T)
    return float((pred == labels).all(1).float().mean())
