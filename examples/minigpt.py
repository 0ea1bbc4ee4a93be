"""One-file MiniGPT (GPT: Radford et al., 2018), the course's lab model written out.

Shapes: B batch, T positions, D width, H heads, Dh = D / H, V vocabulary.
It computes the same function as the package's MiniGPT (a test loads the package's weights
into it and gets the same logits) and trains the lab's recipe, as `tinyformer train gpt` does.
Where it differs from the course's lab code, a comment that starts with "course:" says how.
"""

# %% imports
import argparse
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


# %% config
# package: models.gpt.GPTConfig + config.TrainConfig (the lab's recipe: tinyformer/course.py)
@dataclass
class Config:
    vocab_size: int = 65  # characters in the text (65 in Tiny Shakespeare)
    block_size: int = 128  # context length T; the learned position table stops there
    n_layer: int = 4  # Transformer blocks
    n_head: int = 4  # attention heads per block (n_embd must divide by it)
    n_embd: int = 128  # model width D; the feed-forward is 4 * D wide
    dropout: float = 0.1  # after each residual branch; none on the embeddings, as in the lab
    batch_size: int = 32  # sequences per optimizer step
    lr: float = 3e-4  # AdamW's rate, constant (no warmup, no decay), no clipping, as in the lab
    weight_decay: float = 0.01  # AdamW's default, on every parameter, as in the lab
    max_iters: int = 3000  # optimizer steps
    eval_interval: int = 300  # print train/val loss every this many steps (0 too) and at the end
    eval_iters: int = 1  # batches per loss estimate, one as in the lab


# %% data
# package: tinyformer.data.tinyshakespeare (read_text, TokenSplits) + data.tokenizers.CharTokenizer
# course: downloads input.txt from GitHub into the working folder; here a local file
# (no network at run time)
CACHE = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
DATA = os.path.join(CACHE, "tinyformer", "tinyshakespeare.txt")  # the package's copy (make demo)


def load_data(path: str | None, device: str = "cpu") -> tuple[list[str], dict[str, torch.Tensor]]:
    """--data, else $TINYFORMER_DATA, else the copy `make demo` downloaded (the package's order)."""
    path = path or os.environ.get("TINYFORMER_DATA", "") or DATA
    if not (os.path.isfile(path) and os.access(path, os.R_OK)):  # a mistake: one line, no traceback
        raise SystemExit(
            f"minigpt.py: error: no readable data file {path!r}; pass --data PATH, set "
            "TINYFORMER_DATA, or run `make demo` once (it downloads Tiny Shakespeare there)"
        )
    text = open(path, encoding="utf-8").read()
    chars = sorted(set(text))  # the vocabulary: every distinct character, in sorted order
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = torch.tensor([stoi[ch] for ch in text], device=device)  # (N,)
    n = int(len(text) * 0.9)  # the last 10% is held out (data.val_fraction)
    return chars, {"train": ids[:n], "val": ids[n:]}


def get_batch(data: torch.Tensor, block_size: int, batch_size: int, generator=None):
    # course: starts in [0, len - T - 1), so the last window is never drawn; here [0, len - T),
    # every window, and from a seeded generator (the course's batches are unseeded)
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)  # (B,)
    windows = data[starts[:, None] + torch.arange(block_size + 1)]  # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]  # inputs x, targets y (B, T): y is x shifted by one


# %% attention
# package: tinyformer.attention.multihead.MultiHeadAttention, backend "manual" (the default
# "auto" picks the faster of this and F.scaled_dot_product_attention, which computes the same)
class CausalSelfAttention(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.qkv = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)  # Q, K, V in one matmul
        self.proj = nn.Linear(c.n_embd, c.n_embd)  # the output projection keeps its bias
        tril = torch.tril(torch.ones(c.block_size, c.block_size, dtype=torch.bool))  # (T, T)
        # course: a float buffer "mask" of ones, saved with the weights, compared `== 0`; here bool
        # and not saved (the package's checkpoints carry no mask), used as ~tril: the same positions
        self.register_buffer("tril", tril.view(1, 1, c.block_size, c.block_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=2)  # (B, T, D) each
        q, k, v = (t.view(B, T, self.n_head, D // self.n_head).transpose(1, 2) for t in (q, k, v))
        # course: divides by math.sqrt(d_k); here multiplies by Dh ** -0.5: the same scale
        att = (q @ k.transpose(-2, -1)) * (D // self.n_head) ** -0.5  # (B, H, T, T): QK^T/sqrt(Dh)
        att = att.masked_fill(~self.tril[:, :, :T, :T], float("-inf"))  # no-mask exercise: delete
        att = att.softmax(dim=-1)  # (B, H, T, T): each row sums to 1 over positions <= t
        y = (att @ v).transpose(1, 2).reshape(B, T, D)  # (B, H, T, Dh) -> (B, T, D): heads merged
        return self.proj(y)  # (B, T, D); course: self.drop(self.proj(out)) here: see Block


# %% block
# package: tinyformer.layers.blocks.TransformerBlock (Pre-LayerNorm) + layers.feedforward (GELU)
class Block(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        D, p = c.n_embd, c.dropout
        self.ln1, self.attn, self.drop = nn.LayerNorm(D), CausalSelfAttention(c), nn.Dropout(p)
        fc, proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        mlp = dict(fc=fc, act=nn.GELU(), proj=proj, drop=nn.Dropout(p))
        self.ln2, self.mlp = nn.LayerNorm(D), nn.Sequential(OrderedDict(mlp))  # D -> 4D -> D

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # the residual stream is never normalised
        # course: the dropout inside the attention module, after its proj; here in the block, at
        # the same place (the attention branch's output, before the residual sum)
        x = x + self.drop(self.attn(self.ln1(x)))  # (B, T, D)
        return x + self.mlp(self.ln2(x))  # (B, T, D)


# %% model
# package: tinyformer.models.gpt.MiniGPT (positions="learned", tie_weights=False)
class GPT(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.config = c
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)  # (V, D)
        self.pos_emb = nn.Embedding(c.block_size, c.n_embd)  # (T, D)
        self.blocks = nn.Sequential(*(Block(c) for _ in range(c.n_layer)))
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)  # untied from tok_emb
        # no init code, as in the lab: PyTorch's own (N(0, 1) embeddings, kaiming-uniform Linears)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) -> (logits (B, T, V), mean cross-entropy against targets, or None)."""
        pos = torch.arange(idx.size(1), device=idx.device)  # (T,)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, D): no dropout here, as in the lab
        logits = self.head(self.ln_f(self.blocks(x)))  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def param_formula(c: Config) -> int:
    """2VD (token table and head) + TD (positions) + L(12D^2 + 10D) (the blocks) + 2D (last norm):
    each block has 4D^2 + D in attention, 8D^2 + 5D in the MLP and 4D in its two norms."""
    V, T, D, L = c.vocab_size, c.block_size, c.n_embd, c.n_layer
    return 2 * V * D + T * D + L * (12 * D * D + 10 * D) + 2 * D


# %% training
# package: tinyformer.train.trainer.Trainer (one step), tasks.gpt.GPTTask (loss, evaluate)
def train_step(model: GPT, opt: torch.optim.Optimizer, x, y, c: Config) -> float:
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def optimizer(model: GPT, c: Config) -> torch.optim.Optimizer:
    """package: train.optim.make_optimizer (train.decay_all=true). The lab's line: every parameter
    decayed, biases and LayerNorm gains too."""
    return torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)


@torch.no_grad()
def estimate_loss(model: GPT, data: torch.Tensor, c: Config, seed: int) -> float:
    model.eval()  # dropout off; course: a new random batch at every call, here the same one
    g = torch.Generator().manual_seed(seed + 1)
    batches = (get_batch(data, c.block_size, c.batch_size, g) for _ in range(c.eval_iters))
    loss = sum(model(x, y)[1].item() for x, y in batches)
    model.train()
    return loss / c.eval_iters


# %% loop
def train(model: GPT, splits: dict[str, torch.Tensor], c: Config, seed: int) -> list[tuple]:
    """The lab's loop: c.max_iters AdamW steps on random windows, train and val loss every
    c.eval_interval steps and after the last one -> [(step, train loss, val loss), ...]."""
    opt = optimizer(model, c)
    g = torch.Generator().manual_seed(seed)  # the training batches
    history, shown = [], time.monotonic()
    for step in range(c.max_iters + 1):  # step = updates done so far
        # course: the last evaluation at step MAX_ITERS - 1, before the last update; here after
        # it, of the model that is sampled (the course's log shows 2999 updates, this one 3000)
        if step % c.eval_interval == 0 or step == c.max_iters:
            train, val = (estimate_loss(model, splits[s], c, seed) for s in ("train", "val"))
            history.append((step, train, val))
            print(f"step {step}: train loss {train:.4f}, val loss {val:.4f}", flush=True)
            shown = time.monotonic()
        if step == c.max_iters:
            return history
        x, y = get_batch(splits["train"], c.block_size, c.batch_size, g)
        loss = train_step(model, opt, x, y, c)
        if time.monotonic() - shown >= 10:  # a sign of life at least every 10 s, even in a log
            print(f"step {step + 1}: batch loss {loss:.4f}", flush=True)
            shown = time.monotonic()


# %% generation
# package: tinyformer.generate.sampling (the package also keeps a KV cache)
@torch.no_grad()
def generate(model: GPT, idx, n: int, temperature: float = 1.0, top_k: int = 0, generator=None):
    """idx (B, T0) -> (B, T0 + n): from the whole softmax at temperature 1, as in the lab; top_k > 0
    keeps the k likeliest tokens (`tinyformer sample --top-k`)."""
    model.eval()
    for _ in range(n):
        window = idx[:, -model.config.block_size :]  # the last block_size tokens
        logits = model(window)[0][:, -1].float() / temperature  # (B, V): the last position
        if top_k:
            kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]  # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        idx = torch.cat([idx, torch.multinomial(logits.softmax(-1), 1, generator=generator)], dim=1)
    return idx


# %% plot
def plot_losses(history: list[tuple], path: str = "minigpt_loss.png") -> None:
    """The deliverable's loss curve: train and val loss at each evaluation, saved to `path`."""
    import matplotlib.pyplot as plt

    steps, train, val = zip(*history)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, train, "o-", label="train")
    ax.plot(steps, val, "o-", label="val")
    ax.set(xlabel="step", ylabel="loss (nats per character)", title="MiniGPT on Tiny Shakespeare")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=150)  # left open: a notebook shows it inline


# %% report
def report(c: Config, n_params: int, history: list[tuple], sample: str, seconds: float) -> str:
    """The skeleton of the deliverable's one-page report, its measured numbers filled in."""
    step, train, val = history[-1]
    best = min(v for _, _, v in history)
    return f"""# MiniGPT: report

## Setup
{c.n_layer} layers, {c.n_head} heads, width {c.n_embd}, context {c.block_size}: {n_params:,}
parameters. {c.max_iters} AdamW steps at lr {c.lr}, batch {c.batch_size}: {seconds:.0f} s.

## Results
Final train loss {train:.4f}, val loss {val:.4f} (best val {best:.4f}) after step {step}.
Loss curve: minigpt_loss.png.

## Sample (500 characters from a newline, temperature 1.0)
```text
{sample}
```

## N_LAYER or N_HEAD: what changes
(Change n_layer or n_head in Config, train again, and fill in: the two val losses, the two
parameter counts, the two samples, and why depth or heads matter at this size.)
"""


# %% main
def main(argv: list[str] | None = None) -> None:
    # %% arguments
    p = argparse.ArgumentParser(description="Train a character GPT on a text file, then sample.")
    p.add_argument("--data", help="text file (default: $TINYFORMER_DATA, then make demo's copy)")
    p.add_argument("--steps", type=int, default=Config.max_iters, help="optimizer steps (3000)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    p.add_argument("--seed", type=int, default=1337, help="seeds init, batches, dropout (1337)")
    a = p.parse_args(argv)
    # %% load
    chars, splits = load_data(a.data, a.device)
    n_train, n_val = len(splits["train"]), len(splits["val"])
    print(f"vocabulary {len(chars)}, train {n_train:,} / val {n_val:,} characters, {a.steps} steps")
    print(f"the vocabulary: {''.join(chars)!r}")
    # %% build
    torch.manual_seed(a.seed)  # init and dropout; course: nothing is seeded, each run differs
    c = Config(vocab_size=len(chars), max_iters=a.steps)
    model = GPT(c).to(a.device)
    n_params = sum(q.numel() for q in model.parameters())
    print(f"{n_params:,} parameters counted by sum(p.numel())")
    print(f"{param_formula(c):,} by the formula 2VD + TD + L(12D^2 + 10D) + 2D")
    # %% train
    start = time.monotonic()
    history = train(model, splits, c, a.seed)
    seconds = time.monotonic() - start
    # %% curve
    plot_losses(history, "minigpt_loss.png")
    # %% sample
    # course: [[stoi['\n']]], the same id; a text without a newline starts from its first character
    prompt = torch.tensor([[chars.index("\n") if "\n" in chars else 0]], device=a.device)  # (1, 1)
    g = torch.Generator(a.device).manual_seed(1)  # course: the sample is unseeded
    out = generate(model, prompt, 500, generator=g)
    sample = "".join(chars[i] for i in out[0].tolist())
    print(sample)
    # %% save
    with open("minigpt_report.md", "w", encoding="utf-8") as f:
        f.write(report(c, n_params, history, sample[1:], seconds))
    print("wrote minigpt_loss.png and minigpt_report.md")


if __name__ == "__main__":  # package: `tinyformer train gpt`, then `tinyformer sample`
    main()
