"""A convolutional sentence encoder: Kim (2014), "Convolutional Neural Networks for Sentence Classification".

`TextCNN` embeds token ids, runs one `Conv1d` per kernel width k over time (no
padding inside the convolution), applies ReLU and takes the max over time of
each filter, then concatenates the widths: ONE feature per sequence of
n_filters * len(kernel_sizes). A classifier head (a Linear, plus any dropout on
the feature) sits on top and is not part of this module.

Padding never changes a result. The max runs over VALID windows only: a window
starting at t is valid when it lies fully inside the row's real tokens
(t <= length - k); the others are filled with `masks.fill_value` first. The
embeddings of padding positions are zeroed by the mask, whatever their ids.

Design decision for rows shorter than a kernel: a row shorter than k has exactly
one valid window, t = 0, which sees zero vectors for the missing tokens (as if
padded with pad_id, whose embedding is the zero vector). A whole batch shorter
than the widest kernel is padded on the right with pad_id up to max(kernel_sizes)
columns so that every convolution has at least that one window.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention import masks
from tinyformer.attention.dropout import Dropout
from tinyformer.errors import UserError
from tinyformer.models.rnn import sequence_lengths


class TextCNN(nn.Module):
    """Token ids (B, T) + attention_mask (B, T) -> max-pooled convolution features (B, out_features)."""

    def __init__(
        self,
        vocab_size: int,
        n_embd: int,
        kernel_sizes: list[int] | tuple[int, ...] = (3, 4, 5),
        n_filters: int = 100,
        dropout: float = 0.0,
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        kernel_sizes = tuple(kernel_sizes)
        if not kernel_sizes:
            raise UserError("kernel_sizes is empty; give at least one kernel width >= 1")
        if any(k < 1 for k in kernel_sizes):
            raise UserError(f"kernel_sizes={list(kernel_sizes)} must all be >= 1")
        self.kernel_sizes = kernel_sizes
        self.pad_id = pad_id
        self.out_features = n_filters * len(kernel_sizes)
        self.embed = nn.Embedding(vocab_size, n_embd, padding_idx=pad_id)
        self.drop = Dropout(dropout)
        self.convs = nn.ModuleList(nn.Conv1d(n_embd, n_filters, k) for k in kernel_sizes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids (B, T) long; attention_mask (B, T), 1/True = real token, 0 = padding at the end
        of a row -> (B, out_features)."""
        lengths = sequence_lengths(input_ids, attention_mask)  # (B,)
        short = max(self.kernel_sizes) - input_ids.size(1)
        if short > 0:  # the design decision above: right-pad to the widest kernel
            input_ids = F.pad(input_ids, (0, short), value=self.pad_id)  # (B, T)
            attention_mask = F.pad(attention_mask, (0, short), value=0)  # (B, T)
        valid = (attention_mask != 0).unsqueeze(-1)  # (B, T, 1)
        x = self.drop(self.embed(input_ids)) * valid  # (B, T, D), padding is zero whatever its id
        x = x.transpose(1, 2)  # (B, D, T)
        return torch.cat([self._pool(conv, x, lengths) for conv in self.convs], dim=1)  # (B, F * n_kernels)

    @staticmethod
    def _pool(conv: nn.Conv1d, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ReLU(conv(x)) (B, F, W) max-pooled over its valid windows -> (B, F)."""
        k = conv.kernel_size[0]
        h = F.relu(conv(x))  # (B, F, W) with W = T - k + 1
        starts = torch.arange(h.size(2), device=h.device)  # (W,)
        last = (lengths - k).clamp(min=0)  # (B,) a row shorter than k keeps window t = 0
        ok = starts[None, :] <= last[:, None]  # (B, W)
        h = h.masked_fill(~ok[:, None, :], masks.fill_value(h.dtype))  # (B, F, W)
        return h.max(dim=2).values  # (B, F)
