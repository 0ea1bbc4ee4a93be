"""One-file MiniGPT (GPT: Radford et al., 2018). Shapes: B batch, T positions, D width, H heads, Dh = D/H, V vocab."""

import argparse
import os
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


# package: tinyformer.models.gpt.GPTConfig + tinyformer.config.TrainConfig (defaults; configs/gpt_shakespeare.toml)
@dataclass
class Config:
    vocab_size: int = 65  # characters in the text (65 in Tiny Shakespeare)
    block_size: int = 128  # context length T; the learned position table stops there
    n_layer: int = 4  # Transformer blocks
    n_head: int = 4  # attention heads per block (n_embd must divide by it)
    n_embd: int = 128  # model width D; the feed-forward is 4 * D wide
    dropout: float = 0.1  # on the embeddings and on each residual branch
    batch_size: int = 32  # sequences per optimizer step
    lr: float = 3e-4  # AdamW learning rate, constant (no warmup, no decay)
    weight_decay: float = 0.01  # AdamW decay, on matrices only
    grad_clip: float = 1.0  # max global gradient norm
    max_iters: int = 3000  # optimizer steps
    eval_interval: int = 500  # print train/val loss every this many steps, and at the end
    eval_iters: int = 100  # batches averaged per loss estimate


# package: tinyformer.data.tinyshakespeare (resolve_path, read_text, TokenSplits) + data.tokenizers.CharTokenizer
def load_data(path: str | None, device: str = "cpu") -> tuple[list[str], dict[str, torch.Tensor]]:
    path = path or os.environ.get("TINYFORMER_DATA", "")
    if not (os.path.isfile(path) and os.access(path, os.R_OK)):  # a user's mistake: one line, not a traceback
        raise SystemExit(f"minigpt.py: error: no readable data file {path!r}; pass --data PATH or set TINYFORMER_DATA")
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))  # the vocabulary: every distinct character, in sorted order
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids, n = torch.tensor([stoi[ch] for ch in text], device=device), int(len(text) * 0.9)  # (N,); data.val_fraction
    return chars, {"train": ids[:n], "val": ids[n:]}


def get_batch(data: torch.Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None):
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)  # (B,) random windows
    windows = data[starts[:, None] + torch.arange(block_size + 1)]  # (B, T + 1), on data's device
    return windows[:, :-1], windows[:, 1:]  # inputs x and targets y (B, T): y is x shifted left by one


# package: tinyformer.attention.multihead.MultiHeadAttention (self-attention, backend "sdpa", qkv_bias=False)
class CausalSelfAttention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.n_head, self.qkv = c.n_head, nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)  # Q, K, V in one matmul
        self.proj = nn.Linear(c.n_embd, c.n_embd)  # the output projection keeps its bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape  # q, k, v: (B, T, D) each, then split into heads
        q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2) for t in self.qkv(x).split(D, -1))  # (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh): position t sees <= t
        return self.proj(y.transpose(1, 2).reshape(B, T, D))  # (B, T, D): heads merged back, then projected


# package: tinyformer.layers.blocks.TransformerBlock (Pre-LayerNorm) + layers.feedforward.FeedForward (exact GELU)
class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        D, p = c.n_embd, c.dropout  # nn.Dropout: the package's layers.dropout.Dropout only has a cheaper CPU mask
        self.ln1, self.attn, self.drop = nn.LayerNorm(D), CausalSelfAttention(c), nn.Dropout(p)
        mlp = dict(fc=nn.Linear(D, 4 * D), act=nn.GELU(), proj=nn.Linear(4 * D, D), drop=nn.Dropout(p))
        self.ln2, self.mlp = nn.LayerNorm(D), nn.Sequential(OrderedDict(mlp))  # (B, T, D) -> (B, T, 4D) -> (B, T, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # the residual stream x itself is never normalised
        x = x + self.drop(self.attn(self.ln1(x)))  # (B, T, D)
        return x + self.mlp(self.ln2(x))  # (B, T, D)


# package: tinyformer.models.gpt.MiniGPT (positions="learned", tie_weights=False); init: layers.init.normal_init
class GPT(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.config = c
        self.tok_emb, self.pos_emb = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.drop, self.blocks = nn.Dropout(c.dropout), nn.Sequential(*(Block(c) for _ in range(c.n_layer)))
        self.ln_f, self.head = nn.LayerNorm(c.n_embd), nn.Linear(c.n_embd, c.vocab_size, bias=False)  # untied
        for name, p in self.named_parameters():  # GPT-2: N(0, 0.02) matrices, zero biases, LayerNorm gains at 1
            if p.dim() == 2:  # Linear and Embedding weights; the residual projections are scaled down by depth
                nn.init.normal_(p, std=0.02 / (2 * c.n_layer) ** 0.5 if name.endswith("proj.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):  # -> logits (B, T, V), loss or None
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(idx.size(1), device=idx.device)))  # (B, T, D)
        logits = self.head(self.ln_f(self.blocks(x)))  # (B, T, V)
        return logits, None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# package: tinyformer.train.trainer.Trainer (one step: clip, update), tasks.gpt.GPTTask (loss, evaluate)
def train_step(model: GPT, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, c: Config) -> float:
    _, loss = model(x, y)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


@torch.no_grad()
def estimate_loss(model: GPT, data: torch.Tensor, c: Config, seed: int) -> float:
    model.eval()  # dropout off; the same seeded batches at every call
    g = torch.Generator().manual_seed(seed + 1)
    loss = sum(model(*get_batch(data, c.block_size, c.batch_size, g))[1].item() for _ in range(c.eval_iters))
    model.train()
    return loss / c.eval_iters


# package: tinyformer.generate.sampling (filter_logits, next_token, stream; the package also keeps a KV cache)
@torch.no_grad()
def generate(model: GPT, idx: torch.Tensor, n: int, temperature: float = 0.8, top_k: int = 40, generator=None):
    model.eval()  # idx (B, T0) -> (B, T0 + n), each new token drawn after the last block_size tokens
    for _ in range(n):
        logits = model(idx[:, -model.config.block_size :])[0][:, -1].float() / temperature  # (B, V): last position
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (B, 1): the k-th largest
        probs = logits.masked_fill(logits < kth, float("-inf")).softmax(-1)  # (B, V), zero outside the top k
        idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)  # (B, T + 1)
    return idx


if __name__ == "__main__":  # package: tinyformer.cli (`tinyformer train gpt`, then `tinyformer sample`)
    p = argparse.ArgumentParser(description="Train a character-level GPT on a text file, then sample from it.")
    p.add_argument("--data", help="UTF-8 text file (default: $TINYFORMER_DATA)")
    p.add_argument("--steps", type=int, default=Config.max_iters, help="optimizer steps (default 3000)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    p.add_argument("--seed", type=int, default=1337, help="seeds init, batches and dropout (default 1337)")
    a = p.parse_args()
    chars, splits = load_data(a.data, a.device)
    torch.manual_seed(a.seed)  # the model's init and dropout
    c, g = Config(vocab_size=len(chars), max_iters=a.steps), torch.Generator().manual_seed(a.seed)  # g: batches
    model = GPT(c).to(a.device)
    print(f"vocabulary {len(chars)}, {sum(q.numel() for q in model.parameters()):,} parameters, {a.steps} steps")
    vectors = [q for q in model.parameters() if q.dim() < 2]  # biases and LayerNorms: AdamW does not decay them
    groups = [{"params": [q for q in model.parameters() if q.dim() >= 2]}, {"params": vectors, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=c.lr, weight_decay=c.weight_decay)  # package: train.optim.make_optimizer
    for step in range(1, c.max_iters + 1):
        train_step(model, opt, *get_batch(splits["train"], c.block_size, c.batch_size, g), c)
        if step % c.eval_interval == 0 or step == c.max_iters:
            train, val = (estimate_loss(model, splits[s], c, a.seed) for s in ("train", "val"))
            print(f"step {step}: train loss {train:.4f}, val loss {val:.4f}", flush=True)
    prompt = torch.zeros((1, 1), dtype=torch.long, device=a.device)  # (1, 1): id 0, the newline (sorted first)
    out = generate(model, prompt, 500, generator=torch.Generator(a.device).manual_seed(1))  # (1, 501)
    print("".join(chars[i] for i in out[0].tolist()))
