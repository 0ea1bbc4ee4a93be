"""MiniGPT: a decoder-only Transformer language model (Radford et al., 2018/2019).

Token embeddings plus positions (learned by default, as in GPT-2; sinusoidal,
rotary or none as options, see `tinyformer.attention.positions`), `n_layer`
Pre-LayerNorm causal blocks, a final LayerNorm and a linear head to vocabulary
logits. Small enough to read in one sitting. The config's default sizes are the seed
lab's character model; its default init (N(0, 0.02), GPT-2's) and dropout on the
embeddings are tinyformer's, and the lab's recipe (`tinyformer.course.LAB`, what
`tinyformer train gpt` trains) sets `init="default"` (PyTorch's own) and none there.

Generation passes one `KVCache` per layer (`new_cache`) and the position
`start` of the first new token, so each step runs only the new token.

Variants: `attention="linear"` (linear attention; its generation state is a fixed-size
`LinearState` per layer instead of a growing `KVCache`) and `n_kv_head` (grouped- or
multi-query attention: the cache stores only the KV heads). See `tinyformer.attention`.

Switches that the public GPT-2 speedrun trains with, all off by default: `qk_norm` (queries and keys
RMS-normalised per head), `ffn="relu2"`, `zero_init` (each block's output projections start at zero, so a fresh
block is the identity) and `logit_softcap` (logits squashed by cap * tanh(logits / cap)). The training side
(Muon, the wsd schedule, sequence-length warmup) is in `TrainConfig`, `DataConfig` and `tinyformer.train`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from tinyformer.attention.dropout import Dropout
from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.linear import LinearState
from tinyformer.attention.multihead import BACKENDS, KINDS
from tinyformer.attention.positions import POSITIONS, sinusoidal_table
from tinyformer.attention.spec import NORMS, BlockSpec
from tinyformer.config import check_fields
from tinyformer.errors import UserError
from tinyformer.layers.blocks import TransformerBlock, make_norm
from tinyformer.layers.embeddings import add_token_and_position_tables, tokens_and_learned_positions
from tinyformer.layers.feedforward import FFN_KINDS
from tinyformer.layers.init import normal_init
from tinyformer.models.outputs import AttentionPart, ModelOutput


@dataclass
class GPTConfig:
    vocab_size: int = 0  # tokens in the vocabulary; 0 = take it from the tokenizer
    block_size: int = 128  # context length it trains on; learned positions cannot go past it
    n_layer: int = 4  # Transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # model width D
    mlp_ratio: float = 4  # feed-forward width = mlp_ratio * n_embd (a whole number)
    dropout: float = 0.1  # on each residual branch (and the embeddings, with embedding_dropout)
    embedding_dropout: bool = True  # dropout on the embeddings too (GPT-2); the lab has none there
    attn_dropout: float = 0.0  # on attention weights; > 0 rules out the fused causal kernel
    qkv_bias: bool = False  # bias on the query/key/value projection
    backend: str = "auto"  # attention backend: "auto" (the faster here, measured per run), "sdpa" or "manual"
    attention: str = "softmax"  # "softmax" or "linear" (elu+1 feature map; no weights, no attn_dropout)
    n_kv_head: int = 0  # key/value heads: 0 = n_head (multi-head), 1 = multi-query, between = grouped-query
    positions: str = "learned"  # "learned" | "sinusoidal" | "rope" | "none"
    rope_base: float = 10000.0  # RoPE: angle of pair i is position * rope_base^(-2i/Dh)
    causal: bool = True  # False removes the causal mask: an ablation that lets training peek at the answer
    grad_checkpoint: bool = False  # recompute each block's activations in backward: less memory, ~1/3 more compute
    ffn: str = "gelu"  # feed-forward: "gelu" (exact), "gelu_tanh" (GPT-2's), "relu" (Vaswani's) or "swiglu"
    tie_weights: bool = False  # the head reuses the token embedding matrix (GPT-2 does; saves V·D parameters)
    init: str = "gpt2"  # "gpt2": N(0, 0.02), zero biases, residual projections / sqrt(2 n_layer); "default": PyTorch's
    init_from: str = ""  # start from GPT-2 (hub id or folder) or a gpt run folder; its architecture and tokenizer
    qk_norm: bool = False  # RMS-normalise each head's queries and keys (no gain): attention scores stay bounded
    zero_init: bool = False  # each block's attention and MLP output projections start at 0: a fresh block is x -> x
    logit_softcap: float = 0.0  # > 0: logits = cap * tanh(logits / cap), never beyond +-cap; 0 = off
    norm: str = "layernorm"  # "layernorm" (GPT-2's) or "rmsnorm" (Llama's: a gain, no mean, no bias)
    bias: bool = True  # biases on the attention's output, a GELU/ReLU MLP, LayerNorms (SwiGLU has none); False: Llama
    norm_eps: float = 1e-5  # every norm's epsilon (nn.LayerNorm's default; Llama checkpoints say theirs)

    def __post_init__(self) -> None:
        if not (self.logit_softcap >= 0 and math.isfinite(self.logit_softcap)):
            raise UserError(f"model.logit_softcap={self.logit_softcap} must be a number >= 0 (0 = off)")
        check_fields(
            self,
            "model",
            positive=("block_size", "n_layer", "n_head", "n_embd", "mlp_ratio", "rope_base", "norm_eps"),
            fractions=("dropout", "attn_dropout"),
            choices={
                "backend": BACKENDS,
                "positions": POSITIONS,
                "ffn": FFN_KINDS,
                "attention": KINDS,
                "init": INITS,
                "norm": NORMS,
            },
            divisible=("n_embd", "n_head"),
        )
        if self.n_kv_head < 0 or self.n_head % self.kv_heads:
            raise UserError(f"model.n_kv_head={self.n_kv_head} must divide model.n_head={self.n_head} (0 = n_head)")
        if abs(self.mlp_ratio * self.n_embd - self.d_ff) > 1e-6:
            raise UserError(f"model.mlp_ratio={self.mlp_ratio} x n_embd={self.n_embd} must be a whole width")
        if self.attention == "linear" and (self.positions == "rope" or self.kv_heads != self.n_head):
            raise UserError(
                "model.attention=linear works with learned, sinusoidal or no positions and n_kv_head = n_head; "
                f"got positions={self.positions!r}, n_kv_head={self.n_kv_head}"
            )
        dh = self.n_embd // self.n_head
        if self.positions == "rope" and (dh % 2 or dh < 4):
            raise UserError(f"model.positions=rope needs an even head width of at least 4; n_embd/n_head = {dh}")
        if self.positions == "sinusoidal" and self.n_embd % 2:
            raise UserError(f"model.positions=sinusoidal needs an even model.n_embd, got {self.n_embd}")

    @property
    def kv_heads(self) -> int:
        """Key/value heads per block (n_kv_head, or n_head when it is 0)."""
        return self.n_kv_head or self.n_head

    @property
    def d_ff(self) -> int:
        """Feed-forward width, mlp_ratio * n_embd."""
        return round(self.mlp_ratio * self.n_embd)


INITS = ("gpt2", "default")  # model.init
SINUSOID_SCALE = 0.02  # GPT-2's init std of the token embeddings: the fixed table does not drown them at init


class MiniGPT(nn.Module):
    attention_names = ("causal",)  # what `attention_parts` returns, for the views

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = self.config = config
        add_token_and_position_tables(self, c)
        self.drop = Dropout(c.dropout if c.embedding_dropout else 0.0)
        spec = BlockSpec.of(c)
        self.blocks = nn.ModuleList(TransformerBlock(spec) for _ in range(c.n_layer))
        self.ln_f = make_norm(spec)
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        if c.init == "gpt2":
            self.apply(normal_init)  # GPT-2 / BERT: N(0, 0.02) weights, zero biases
        if c.tie_weights:  # one (V, D) matrix embeds tokens and scores them (Press & Wolf, 2017)
            self.head.weight = self.tok_emb.weight
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if c.init == "gpt2" and (name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.n_layer))
        if c.zero_init:  # the residual stream passes each fresh block unchanged; gradients still reach them
            for block in self.blocks:
                for layer in (block.attn.proj, block.mlp.proj):
                    nn.init.zeros_(layer.weight)
                    if layer.bias is not None:
                        nn.init.zeros_(layer.bias)
        self.pe_scale = SINUSOID_SCALE if c.init == "gpt2" else 1.0  # sinusoids at the token embeddings' scale

    def new_cache(self, batch_size: int, capacity: int | None = None) -> list[KVCache] | list[LinearState]:
        """One empty `KVCache` per block for up to `capacity` positions (default: block_size), holding only the
        n_kv_head key/value heads; with linear attention, one fixed-size `LinearState` per block instead."""
        c, p = self.config, next(self.parameters())
        S, Dh = capacity or c.block_size, c.n_embd // c.n_head
        if c.attention == "linear":
            return [LinearState(batch_size, c.n_head, Dh, device=p.device) for _ in self.blocks]
        return [KVCache(batch_size, c.kv_heads, S, Dh, device=p.device, dtype=p.dtype) for _ in self.blocks]

    def cache_bytes(self, batch_size: int, capacity: int | None = None) -> int:
        """The memory `new_cache(batch_size, capacity)` allocates: keys and values of the n_kv_head heads for
        `capacity` positions in every block (linear attention: its fixed-size state), known before allocating."""
        c, p = self.config, next(self.parameters())
        S, Dh = capacity or c.block_size, c.n_embd // c.n_head
        if c.attention == "linear":
            return c.n_layer * batch_size * c.n_head * (Dh * Dh + Dh) * 4  # s (Dh x Dh) and z (Dh), float32
        return c.n_layer * 2 * batch_size * c.kv_heads * S * Dh * p.element_size()

    @property
    def max_context(self) -> int | None:
        """The most positions one forward pass can hold: block_size with learned positions, else no limit."""
        return self.config.block_size if self.config.positions == "learned" else None

    def check_context(self, T: int) -> int:
        """The context-length rule, stated once: T > 0 positions, at most `max_context`. -> T, or UserError."""
        if T <= 0:
            raise UserError(f"context {T} must be > 0")
        if self.max_context is not None and T > self.max_context:
            raise UserError(f"context {T}: learned positions stop at block_size={self.max_context}")
        return T

    def set_ntk(self, context: int) -> None:
        """RoPE models: NTK-aware scaling for running at `context` tokens (alpha = context / block_size; at or
        below the block size, the trained model). No retraining; UserError for other position kinds."""
        if self.rope is None:
            raise UserError(
                f"NTK scaling stretches rotary positions; this model has model.positions={self.config.positions!r}"
            )
        self.rope.alpha = max(1.0, context / self.config.block_size)

    def embed(self, idx: torch.Tensor, start: int) -> torch.Tensor:
        """idx (B, T) at positions [start, start+T) -> token (+ position) embeddings (B, T, D)."""
        c, T = self.config, idx.size(1)
        x = tokens_and_learned_positions(self, idx, start)  # (B, T, D)
        if c.positions == "sinusoidal":  # scaled to the token embeddings' init std, as Vaswani's sqrt(D) does
            x = x + self.pe_scale * sinusoidal_table(T, c.n_embd, start).to(x.device, x.dtype)
        return self.drop(x)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: list[KVCache] | list[LinearState] | None = None,
        start: int = 0,
    ) -> ModelOutput:
        """idx (B, T) tokens at positions [start, start+T); targets (B, T) -> logits (B, T, V) and loss.

        With `cache` (from `new_cache`), the blocks store this call's keys/values and attend to all
        earlier cached positions too; without it, `start` must be 0.
        """
        B, T = idx.shape
        if cache is None and start:
            raise ValueError(f"start={start} without a cache: there is nothing before position {start} to attend to")
        x = self.embed(idx, start)  # (B, T, D)
        attentions = []
        recompute = self.config.grad_checkpoint and self.training and torch.is_grad_enabled() and cache is None
        for i, block in enumerate(self.blocks):
            kw = dict(causal=self.config.causal, need_weights=need_weights, rope=self.rope, start=start)
            if recompute:  # keep only the block's input; its activations are recomputed during backward
                x, w = checkpoint(block, x, use_reentrant=False, **kw)
            else:
                x, w = block(x, cache=cache[i] if cache is not None else None, **kw)
            attentions.append(w)
        logits = self.head(self.ln_f(x))  # (B, T, V)
        if self.config.logit_softcap:
            cap = self.config.logit_softcap
            logits = cap * torch.tanh(logits / cap)  # about the identity for |logits| << cap
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return ModelOutput(logits, loss, attentions if need_weights else None, cache)

    def attention_parts(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[AttentionPart]:
        """idx (B, T) -> the causal self-attention of every block, for the views (the mask is not needed)."""
        self.check_context(idx.size(1))
        return [AttentionPart("causal", "causal", self(idx, need_weights=True).attentions, idx, idx)]


def param_breakdown(c: GPTConfig) -> list[tuple[str, str, int, int]]:
    """(part, formula, parameters per copy, copies) for every part of MiniGPT.

    V vocab, T block size, D width, F = mlp_ratio * D; matches `MiniGPT` exactly
    (a test checks it against `sum(p.numel())`).
    """
    V, T, D, F_ = c.vocab_size, c.block_size, c.n_embd, c.d_ff
    learned, b = c.positions == "learned", int(c.bias)
    Dkv = c.kv_heads * (D // c.n_head)  # key/value width: D unless grouped- or multi-query
    qkv = (D + 2 * Dkv) * D + D * D + b * D + ((D + 2 * Dkv) if c.qkv_bias else 0)
    qkv_text = ("3D² " if Dkv == D else "D·(D+2·Dkv) ") + (("+3D " if Dkv == D else "+D+2·Dkv ") if c.qkv_bias else "")
    mlp = ("3·D·F (no biases)", 3 * D * F_) if c.ffn == "swiglu" else ("2·D·F + F + D", 2 * D * F_ + b * (F_ + D))
    if c.ffn != "swiglu" and not c.bias:
        mlp = ("2·D·F (no biases)", mlp[1])
    norm = ("D", D) if c.norm == "rmsnorm" or not c.bias else ("2D", 2 * D)  # a gain, and a bias if it has one
    kind = "RMS norms" if c.norm == "rmsnorm" else "layer norms"
    head = ("head (tied: the token embedding)", "0", 0) if c.tie_weights else ("head (untied, no bias)", "D·V", D * V)
    return [
        ("token embedding", "V·D", V * D, 1),
        ("position embedding", "T·D" if c.positions == "learned" else f"none ({c.positions})", learned * T * D, 1),
        ("block attention", f"{qkv_text}+ D²" + (" + D" if c.bias else ""), qkv, c.n_layer),
        ("block MLP", *mlp, c.n_layer),
        (f"block {kind}", f"2·{norm[0]}", 2 * norm[1], c.n_layer),
        (f"final {kind[:-1]}", norm[0], norm[1], 1),
        (*head, 1),
    ]


def param_count(c: GPTConfig) -> int:
    return sum(per * copies for _, _, per, copies in param_breakdown(c))
