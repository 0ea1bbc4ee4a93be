"""Masked-language-model data (Devlin et al., 2019): windows of a token stream, and BERT's masking.

`mask_tokens` chooses each non-special token with probability `mask_prob`
(15%); of the chosen, 80% become [MASK], 10% a random non-special token and 10%
stay as they are. Labels hold the original token at chosen positions and
`IGNORE` everywhere else, so the loss is computed on the chosen positions only.

Training windows are random spans of the training token stream wrapped as
[CLS] ... [SEP] (whole-text packing, as RoBERTa's FULL-SENTENCES: a window may
cross a speech boundary). The held-out split is cut into consecutive windows
that cover every token once, masked with a fixed seed, so every evaluation
scores the same positions.
"""

from __future__ import annotations

import torch

from tinyformer.data.subword import CLS_ID, MASK_ID, SEP_ID
from tinyformer.data.tokenizers import IGNORE


def mask_tokens(
    ids: torch.Tensor, vocab_size: int, n_special: int, generator: torch.Generator, mask_prob: float = 0.15
) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, T) -> (inputs (B, T), labels (B, T)); ids below `n_special` are special and never chosen."""
    shape = ids.shape
    chosen = (torch.rand(shape, generator=generator) < mask_prob) & (ids >= n_special)  # (B, T)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))  # (B, T)
    what = torch.rand(shape, generator=generator)  # < 0.8: [MASK]; < 0.9: random token; else: unchanged
    random_ids = torch.randint(n_special, vocab_size, shape, generator=generator)  # (B, T)
    inputs = torch.where(chosen & (what < 0.8), torch.full_like(ids, MASK_ID), ids)  # (B, T)
    inputs = torch.where(chosen & (what >= 0.8) & (what < 0.9), random_ids, inputs)  # (B, T)
    return inputs, labels


def wrap(windows: torch.Tensor) -> torch.Tensor:
    """(B, L) word pieces -> (B, L + 2) with [CLS] first and [SEP] last."""
    B = windows.size(0)
    cls = torch.full((B, 1), CLS_ID, dtype=windows.dtype)
    sep = torch.full((B, 1), SEP_ID, dtype=windows.dtype)
    return torch.cat([cls, windows, sep], dim=1)


def random_windows(stream: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """`batch_size` random spans of `stream` (N,), each seq_len - 2 pieces, wrapped -> (B, seq_len)."""
    L = seq_len - 2
    starts = torch.randint(len(stream) - L + 1, (batch_size,), generator=generator)  # (B,)
    return wrap(stream[starts[:, None] + torch.arange(L)])  # (B, seq_len)


def tiled_windows(stream: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Consecutive non-overlapping spans covering `stream` (the tail that does not fill one is dropped)."""
    L = seq_len - 2
    n = len(stream) // L
    return wrap(stream[: n * L].view(n, L))  # (n, seq_len)
