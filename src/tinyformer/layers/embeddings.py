"""Token embeddings and positions, the same for MiniGPT and the BERT encoder: a token table, a learned
position table where `positions="learned"`, and a `Rotary` for the attention layers where it is "rope"
(the other kinds add nothing here). The tables keep the names `tok_emb` and `pos_emb` on the model itself,
which checkpoints and the Hugging Face weight maps name."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinyformer.attention.positions import Rotary


def add_token_and_position_tables(model: nn.Module, c: Any) -> None:
    """Set `model.tok_emb`, `model.pos_emb` (learned positions only) and `model.rope` (rotary only, else None)
    from the model config `c`: vocab_size, n_embd, block_size, positions, n_head and rope_base where it has one.
    A ValueError unless c.vocab_size is set (> 0): the tokenizer fixes it before the model is built."""
    if c.vocab_size <= 0:
        raise ValueError(f"{type(c).__name__}.vocab_size must be set (> 0) before building the model")
    model.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
    if c.positions == "learned":
        model.pos_emb = nn.Embedding(c.block_size, c.n_embd)
    model.rope = Rotary(c.n_embd // c.n_head, getattr(c, "rope_base", 10000.0)) if c.positions == "rope" else None


def tokens_and_learned_positions(model: nn.Module, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
    """ids (B, T) at positions [start, start+T) -> token embeddings (B, T, D), plus the learned position
    table's rows where the model has one (ValueError past its last row)."""
    x = model.tok_emb(ids)  # (B, T, D)
    table = getattr(model, "pos_emb", None)
    if table is not None:
        end = start + ids.size(1)
        if end > table.num_embeddings:
            raise ValueError(
                f"positions up to {end} exceed block_size={table.num_embeddings}: learned positions stop there"
            )
        x = x + table(torch.arange(start, end, device=ids.device))  # (T, D) broadcast over B
    return x
