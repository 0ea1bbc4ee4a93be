"""The course's own implementations, the yardsticks of `bench train` and `bench reverse`.

Each behaves as the course's code does in every fact, checked against the documents in ../shared/course
(tests/bench/test_reference.py pins their numbers), and is written plainly, as the course writes it, not
slowed down: a speed ratio against them says what tinyformer gains over the code a learner already has.

- `LabGPT`, the MiniGPT lab's model (`000_*.txt`, step 2): one bias-free `qkv` Linear, scores divided by
  sqrt(d_k) and masked with `masked_fill(mask == 0, -inf)` of a registered (1, 1, T, T) lower-triangular
  float buffer, softmax, dropout only after `proj` and at the end of the feed-forward (none on the embeddings
  or the attention weights), Pre-LayerNorm, a bias-free head, PyTorch's default initialisation (the lab has
  no init code). Trained with `torch.optim.AdamW(model.parameters(), lr=3e-4)` (`lab_optimizer`), in fp32.
- `ChapterSeq2Seq`, chapter 20's encoder-decoder (`001_*.txt`, 20.2-20.7): per stack a token embedding
  (`padding_idx`, N(0, d^-0.5) with the PAD row zero) times sqrt(d) plus a 14-row sinusoidal table, then
  dropout; attention written out with dropout on the weights and `finfo.min` masking; a GELU feed-forward
  ending in dropout; Pre-Norm layers and a final LayerNorm per stack; Xavier-uniform on every Linear with
  zero biases: 931,213 parameters. Trained on `chapter_pairs` (numpy `default_rng(0)` / `(1)`, 14 wide)
  after `torch.manual_seed(0)`, by a shuffled `DataLoader` of 64 with `drop_last` (`chapter_loader`), Adam
  betas (0.9, 0.98), eps 1e-9 and the Noam `LambdaLR` at `step + 1` (`chapter_optimizer`); scored after
  every epoch by greedy decoding without a KV cache on the first 500 held-out pairs (`greedy_exact_match`).
  On a CPU the chapter runs in fp32 (its bf16 autocast is for CUDA: `chapter_autocast`).

Masks here hold tinyformer's convention (True = may attend), the chapter's (True = hidden) flipped at the
one place each is built: the same softmax, the project's one convention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tinyformer.data.reversal import BOS, EOS, PAD, make_split

SEQ_LEN = 14  # the chapter's MAX_LEN + 2: the width of every pair and the rows of the position table
VOCAB = 13  # PAD 0, BOS 1, EOS 2, digits 3-12
N_SCORED = 500  # exact_match(model, src_val[:500], tgt_val[:500]) after every epoch


# ---- the lab's MiniGPT -----------------------------------------------------------------------------------------------
class LabAttention(nn.Module):
    def __init__(self, d: int, h: int, block: int, p: float) -> None:
        super().__init__()
        self.n_head, self.d_k = h, d // h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(p)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, D) each
        q = q.view(B, T, self.n_head, self.d_k).transpose(1, 2)  # (B, H, T, Dh)
        k = k.view(B, T, self.n_head, self.d_k).transpose(1, 2)  # (B, H, T, Dh)
        v = v.view(B, T, self.n_head, self.d_k).transpose(1, 2)  # (B, H, T, Dh)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_k)  # (B, H, T, T)
        att = F.softmax(att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")), dim=-1)
        out = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # (B, H, T, Dh) -> (B, T, D)
        return self.drop(self.proj(out))


class LabBlock(nn.Module):
    def __init__(self, d: int, h: int, block: int, p: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = LabAttention(d, h, block, p)
        self.ln2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(p))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class LabGPT(nn.Module):
    """The lab's character model, initialised as PyTorch initialises its layers (the lab has no init code)."""

    def __init__(self, vocab: int, block: int = 128, d: int = 128, h: int = 4, layers: int = 4, p: float = 0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(block, d)
        self.blocks = nn.Sequential(*[LabBlock(d, h, block, p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) -> (logits (B, T, V), mean next-token cross-entropy against `targets`, or None)."""
        T = idx.size(1)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))  # (B, T, D)
        logits = self.head(self.ln_f(self.blocks(x)))  # (B, T, V)
        # the lab's .view, as .reshape: a bf16 autocast head may hand back a layout .view refuses
        loss = None if targets is None else F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def lab_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """Exactly the lab's line: AdamW's defaults (weight decay 0.01 on every parameter) but the learning rate."""
    return torch.optim.AdamW(model.parameters(), lr=3e-4)


# ---- chapter 20's encoder-decoder ------------------------------------------------------------------------------------
def sinusoids(length: int, d: int) -> torch.Tensor:
    """(length, D): PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D))."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]  # (L, 1)
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))  # (D/2,)
    pe = torch.zeros(length, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe


class TokenAndPosition(nn.Module):
    """Dropout(Embedding(ids) * sqrt(D) + PE[:L]); the embedding N(0, D^-1/2) with its PAD row zero."""

    def __init__(self, vocab: int, d: int, max_len: int, p: float) -> None:
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(vocab, d, padding_idx=PAD)
        nn.init.normal_(self.emb.weight, mean=0.0, std=d**-0.5)
        with torch.no_grad():
            self.emb.weight[PAD].zero_()
        self.register_buffer("pe", sinusoids(max_len, d), persistent=False)
        self.drop = nn.Dropout(p)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.emb(ids) * math.sqrt(self.d) + self.pe[: ids.size(1)])  # (B, L, D)


class ChapterAttention(nn.Module):
    """Multi-head attention written out: queries from q, keys and values from k and v."""

    def __init__(self, d: int, h: int, p: float) -> None:
        super().__init__()
        self.h, self.d_k = h, d // h
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d, d) for _ in range(4))
        self.attn_drop = nn.Dropout(p)

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, H, L, Dh)
        B, L, _ = x.shape
        return x.view(B, L, self.h, self.d_k).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """mask broadcastable to (B, H, Lq, Lk), True = may attend -> (B, Lq, D)."""
        Q, K, V = self._split(self.W_q(q)), self._split(self.W_k(k)), self._split(self.W_v(v))
        scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, Lq, Lk)
        weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
        out = self.attn_drop(weights) @ V  # (B, H, Lq, Dh)
        B, _, L, _ = out.shape
        return self.W_o(out.transpose(1, 2).reshape(B, L, self.h * self.d_k))  # (B, Lq, D)


def feed_forward(d: int, d_ff: int, p: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d), nn.Dropout(p))


class ChapterEncoderLayer(nn.Module):
    def __init__(self, d: int, h: int, d_ff: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mha = ChapterAttention(d, h, p)
        self.ffn = feed_forward(d, d_ff, p)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.drop(self.mha(h, h, h, mask))
        return x + self.ffn(self.ln2(x))


class ChapterDecoderLayer(nn.Module):
    def __init__(self, d: int, h: int, d_ff: int, p: float) -> None:
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_mha, self.cross_mha = ChapterAttention(d, h, p), ChapterAttention(d, h, p)
        self.ffn = feed_forward(d, d_ff, p)
        self.drop1, self.drop2 = nn.Dropout(p), nn.Dropout(p)

    def forward(self, x, memory, self_mask, cross_mask) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.drop1(self.self_mha(h, h, h, self_mask))
        h = self.ln2(x)
        x = x + self.drop2(self.cross_mha(h, memory, memory, cross_mask))
        return x + self.ffn(self.ln3(x))


class ChapterStack(nn.Module):
    """The chapter's Encoder or Decoder: its own embedding, its layers, a final LayerNorm (Pre-Norm)."""

    def __init__(self, layer: type, vocab: int, d: int, h: int, d_ff: int, n: int, max_len: int, p: float):
        super().__init__()
        self.embed = TokenAndPosition(vocab, d, max_len, p)
        self.layers = nn.ModuleList(layer(d, h, d_ff, p) for _ in range(n))
        self.ln_final = nn.LayerNorm(d)


class ChapterSeq2Seq(nn.Module):
    """Chapter 20's `Transformer(VOCAB, VOCAB, d_model=128, num_heads=4, dff=512, num_layers=2, max_len=14)`."""

    def __init__(
        self, vocab: int = VOCAB, d: int = 128, h: int = 4, d_ff: int = 512, layers: int = 2, p: float = 0.1
    ) -> None:
        super().__init__()
        self.encoder = ChapterStack(ChapterEncoderLayer, vocab, d, h, d_ff, layers, SEQ_LEN, p)
        self.decoder = ChapterStack(ChapterDecoderLayer, vocab, d, h, d_ff, layers, SEQ_LEN, p)
        self.out_proj = nn.Linear(d, vocab)
        for m in self.modules():  # Xavier on the Linears only: the embeddings keep N(0, d^-0.5)
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, D) and the source mask (B, 1, 1, S): padding may not be attended."""
        src_mask = (src != PAD)[:, None, None, :]  # (B, 1, 1, S)
        x = self.encoder.embed(src)
        for layer in self.encoder.layers:
            x = layer(x, src_mask)
        return self.encoder.ln_final(x), src_mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """tgt_in (B, T) -> logits (B, T, V); each position sees itself, earlier positions and no padding."""
        T = tgt_in.size(1)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=tgt_in.device))[None, None]  # (1, 1, T, T)
        self_mask = causal & (tgt_in != PAD)[:, None, None, :]  # (B, 1, T, T)
        x = self.decoder.embed(tgt_in)
        for layer in self.decoder.layers:
            x = layer(x, memory, self_mask, src_mask)
        return self.out_proj(self.decoder.ln_final(x))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_in, *self.encode(src))


def chapter_pairs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The chapter's `make_dataset(n, seed)`: src and tgt (n, 14); seed 0 trains, seed 1 is held out."""
    return make_split(n, 3, 12, seed)


def chapter_loss(model: ChapterSeq2Seq, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: the decoder reads tgt without its last token and predicts tgt without BOS; in fp32."""
    logits = model(src, tgt[:, :-1])  # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), tgt[:, 1:].reshape(-1), ignore_index=PAD)


def chapter_loader(src: torch.Tensor, tgt: torch.Tensor, batch_size: int = 64) -> DataLoader:
    """Shuffled batches of whole 14-wide pairs; the last partial batch is dropped (20,000 / 64: 312 an epoch)."""
    return DataLoader(TensorDataset(src, tgt), batch_size=batch_size, shuffle=True, drop_last=True)


def noam_factor(step: int, d: int = 128, warmup: int = 1000) -> float:
    """The chapter's `noam_lambda`: LambdaLR asks for step 0 first, and it computes with step + 1."""
    step = step + 1
    return d**-0.5 * min(step**-0.5, step * warmup**-1.5)


def chapter_optimizer(model: nn.Module, d: int = 128, warmup: int = 1000):
    """-> (Adam with lr 1.0, betas (0.9, 0.98), eps 1e-9, and its Noam LambdaLR); both `.step()` every batch."""
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: noam_factor(step, d, warmup))


def chapter_autocast(device: torch.device, bf16: bool):
    """The chapter's one line around the forward and the loss: bf16 autocast where it is on (CUDA with bf16,
    or a CPU with native bf16 in `bench`'s "reference+bf16"), else nothing."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16)


@torch.no_grad()
def greedy_decode(model: ChapterSeq2Seq, src: torch.Tensor, max_len: int = SEQ_LEN) -> torch.Tensor:
    """The chapter's greedy decoding: the whole prefix re-run every step (no KV cache), PAD after EOS."""
    model.eval()
    memory, src_mask = model.encode(src)
    out = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len - 1):
        nxt = model.decode(out, memory, src_mask)[:, -1].argmax(-1).masked_fill(finished, PAD)  # (B,)
        out = torch.cat([out, nxt[:, None]], dim=1)
        finished |= nxt == EOS
        if finished.all():
            break
    return out


def greedy_exact_match(model: ChapterSeq2Seq, src: torch.Tensor, tgt: torch.Tensor) -> float:
    """The chapter's `exact_match`: the share of pairs whose greedy output equals the target up to and
    including EOS. src (N, S), tgt (N, T) with BOS first."""
    pred = greedy_decode(model, src).tolist()
    ok = 0
    for p, t in zip(pred, tgt.tolist(), strict=True):
        t = t[1 : t.index(EOS) + 1]  # without BOS, up to EOS
        ok += p[1 : len(t) + 1] == t
    return ok / len(src)
