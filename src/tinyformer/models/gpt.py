"""MiniGPT: a decoder-only Transformer language model (Radford et al., 2018/2019).

Token + learned position embeddings, `n_layer` Pre-LayerNorm causal blocks, a
final LayerNorm and a linear head to vocabulary logits. Small enough to read in
one sitting; the default config is the seed lab's character model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention.multihead import BACKENDS
from tinyformer.config import check_fields
from tinyformer.errors import UserError
from tinyformer.layers.blocks import TransformerBlock
from tinyformer.models.outputs import ModelOutput


@dataclass
class GPTConfig:
    vocab_size: int = 0  # tokens in the vocabulary; 0 = take it from the tokenizer
    block_size: int = 128  # longest context the model sees (learned positions)
    n_layer: int = 4  # Transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # model width D
    mlp_ratio: int = 4  # feed-forward width = mlp_ratio * n_embd
    dropout: float = 0.1  # on embeddings and on each residual branch
    attn_dropout: float = 0.0  # on attention weights; > 0 rules out the fused causal kernel
    qkv_bias: bool = False  # bias on the query/key/value projection
    backend: str = "sdpa"  # attention backend: "sdpa" or "manual"

    def __post_init__(self) -> None:
        if self.vocab_size < 0:
            raise UserError(f"model.vocab_size={self.vocab_size} must be >= 0")
        check_fields(
            self,
            "model",
            positive=("block_size", "n_layer", "n_head", "n_embd", "mlp_ratio"),
            fractions=("dropout", "attn_dropout"),
            choices={"backend": BACKENDS},
            divisible=("n_embd", "n_head"),
        )


class MiniGPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.vocab_size <= 0:
            raise ValueError("GPTConfig.vocab_size must be set (> 0) before building the model")
        c = self.config = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.pos_emb = nn.Embedding(c.block_size, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(
                c.n_embd,
                c.n_head,
                c.mlp_ratio * c.n_embd,
                dropout=c.dropout,
                attn_dropout=c.attn_dropout,
                qkv_bias=c.qkv_bias,
                backend=c.backend,
            )
            for _ in range(c.n_layer)
        )
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, need_weights: bool = False
    ) -> ModelOutput:
        """idx (B, T) token ids, T <= block_size; targets (B, T) -> logits (B, T, V) and loss."""
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.config.block_size}")
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # (B, T, D)
        attentions = []
        for block in self.blocks:
            x, w = block(x, causal=True, need_weights=need_weights)
            attentions.append(w)
        logits = self.head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return ModelOutput(logits, loss, attentions if need_weights else None)


def param_breakdown(c: GPTConfig) -> list[tuple[str, str, int, int]]:
    """(part, formula, parameters per copy, copies) for every part of MiniGPT.

    V vocab, T block size, D width, F = mlp_ratio * D; matches `MiniGPT` exactly
    (a test checks it against `sum(p.numel())`).
    """
    V, T, D, F_ = c.vocab_size, c.block_size, c.n_embd, c.mlp_ratio * c.n_embd
    qkv_bias = "+3D " if c.qkv_bias else ""
    return [
        ("token embedding", "V·D", V * D, 1),
        ("position embedding", "T·D", T * D, 1),
        ("block attention", f"3D² {qkv_bias}+ D² + D", 4 * D * D + D + (3 * D if c.qkv_bias else 0), c.n_layer),
        ("block MLP", "2·D·F + F + D", 2 * D * F_ + F_ + D, c.n_layer),
        ("block layer norms", "2·2D", 4 * D, c.n_layer),
        ("final layer norm", "2D", 2 * D, 1),
        ("head (untied, no bias)", "D·V", D * V, 1),
    ]


def param_count(c: GPTConfig) -> int:
    return sum(per * copies for _, _, per, copies in param_breakdown(c))
