"""Masked-language-model data (Devlin et al., 2019): windows of a token stream, and BERT's masking.

`mask_tokens` chooses each non-special token with probability `mask_prob`
(15%); of the chosen, 80% become [MASK], 10% a random non-special token and 10%
stay as they are. Labels hold the original token at chosen positions and
`IGNORE` everywhere else, so the loss is computed on the chosen positions only.
Which ids are special, and which are [MASK], [CLS] and [SEP], is the tokenizer's
to say (`SubwordTokenizer.special_ids`, `mask_id`, ...): a tokenizer trained here
has them at 0-4, a pretrained BERT vocabulary elsewhere.

Training windows are random spans of the training token stream wrapped as
[CLS] ... [SEP] (whole-text packing, as RoBERTa's FULL-SENTENCES: a window may
cross a speech boundary). The held-out split is cut into consecutive windows
that cover every token once, masked with a fixed seed, so every evaluation
scores the same positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tinyformer.data.tokenizers import IGNORE


def mask_tokens(
    ids: torch.Tensor,
    generator: torch.Generator,
    *,
    vocab_size: int,
    special_ids: Sequence[int],
    mask_id: int,
    mask_prob: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, T) -> (inputs (B, T), labels (B, T)); `special_ids` are never chosen nor drawn as replacements."""
    shape = ids.shape
    special = torch.zeros(vocab_size, dtype=torch.bool)  # (V,)
    special[list(special_ids)] = True
    ordinary = (~special).nonzero().squeeze(1)  # (V - specials,) the ids a replacement is drawn from
    chosen = (torch.rand(shape, generator=generator) < mask_prob) & ~special[ids]  # (B, T)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))  # (B, T)
    what = torch.rand(shape, generator=generator)  # < 0.8: [MASK]; < 0.9: random token; else: unchanged
    random_ids = ordinary[torch.randint(len(ordinary), shape, generator=generator)]  # (B, T)
    inputs = torch.where(chosen & (what < 0.8), torch.full_like(ids, mask_id), ids)  # (B, T)
    inputs = torch.where(chosen & (what >= 0.8) & (what < 0.9), random_ids, inputs)  # (B, T)
    return inputs, labels


def wrap(windows: torch.Tensor, cls_id: int, sep_id: int) -> torch.Tensor:
    """(B, L) word pieces -> (B, L + 2) with [CLS] first and [SEP] last."""
    B = windows.size(0)
    cls = torch.full((B, 1), cls_id, dtype=windows.dtype)
    sep = torch.full((B, 1), sep_id, dtype=windows.dtype)
    return torch.cat([cls, windows, sep], dim=1)


def random_windows(
    stream: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator, *, cls_id: int, sep_id: int
) -> torch.Tensor:
    """`batch_size` random spans of `stream` (N,), each seq_len - 2 pieces, wrapped -> (B, seq_len)."""
    L = seq_len - 2
    starts = torch.randint(len(stream) - L + 1, (batch_size,), generator=generator)  # (B,)
    return wrap(stream[starts[:, None] + torch.arange(L)], cls_id, sep_id)  # (B, seq_len)


def tiled_windows(stream: torch.Tensor, seq_len: int, *, cls_id: int, sep_id: int) -> torch.Tensor:
    """Consecutive non-overlapping spans covering `stream` (the tail that does not fill one is dropped)."""
    L = seq_len - 2
    n = len(stream) // L
    return wrap(stream[: n * L].view(n, L), cls_id, sep_id)  # (n, seq_len)
