"""Recurrent sequence encoders for text classification: Elman (1990) RNN, LSTM, GRU.

`RNNEncoder` embeds token ids and runs torch's own recurrent layer over them:
the Elman RNN with tanh (Elman, 1990, "Finding Structure in Time"), the LSTM
(Hochreiter & Schmidhuber, 1997, "Long Short-Term Memory") or the GRU (Cho et
al., 2014, "Learning Phrase Representations using RNN Encoder-Decoder"). It
returns ONE feature per sequence: the top layer's final hidden state h_n (for
the LSTM the h, not the cell c), with [forward, backward] concatenated when
bidirectional. A classifier head (a Linear, plus any dropout on the feature)
sits on top and is not part of this module.

Two implementations compute the same function with the same parameter names
(`impl`): "torch" runs torch's fused layer over a `pack_padded_sequence`;
"scratch" runs `ScratchRNN` (`rnn_cells.py`), the gate equations in a Python
loop over time steps. A checkpoint trained with one loads into the other.

Padding never changes a result: the lengths read from `attention_mask` make the
recurrence stop at each row's last real token (and the backward direction start
there), by packing (torch) or by freezing finished rows (scratch). Padding must
sit at the end of a row; `sequence_lengths` checks that and rejects empty rows.
"""

from __future__ import annotations

import torch
from torch import nn

from tinyformer.attention.dropout import Dropout
from tinyformer.errors import UserError
from tinyformer.models.rnn_cells import ScratchRNN

CELLS = ("rnn", "lstm", "gru")
IMPLS = ("torch", "scratch")  # torch's fused nn.RNN/LSTM/GRU, or the loop of rnn_cells.ScratchRNN
_RECURRENT = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}


def sequence_lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Right-padded `attention_mask` (B, T) of `input_ids` (B, T), 1/True = real token -> lengths (B,) long.

    Raises a ValueError (`UserError`) if the shapes differ, naming the row if a row
    has no real tokens or if its padding is not all at the end.
    """
    if input_ids.shape != attention_mask.shape:
        raise UserError(f"input_ids {tuple(input_ids.shape)} and attention_mask {tuple(attention_mask.shape)} differ")
    if attention_mask.dim() != 2:
        raise UserError(f"attention_mask must be (B, T), got shape {tuple(attention_mask.shape)}")
    valid = attention_mask != 0  # (B, T)
    lengths = valid.sum(dim=1)  # (B,)
    empty = (lengths == 0).nonzero().flatten().tolist()
    if empty:
        raise UserError(f"row {empty[0]} of the batch has no real tokens (length 0); every row needs at least one")
    positions = torch.arange(valid.size(1), device=valid.device)  # (T,)
    prefix = positions[None, :] < lengths[:, None]  # (B, T)
    bad = (prefix != valid).any(dim=1).nonzero().flatten().tolist()
    if bad:
        raise UserError(f"row {bad[0]} of attention_mask has padding before a real token; pad only at the end")
    return lengths


class RNNEncoder(nn.Module):
    """Token ids (B, T) + attention_mask (B, T) -> final hidden state (B, out_features)."""

    def __init__(
        self,
        vocab_size: int,
        n_embd: int,
        hidden: int,
        n_layer: int = 1,
        cell: str = "lstm",
        bidirectional: bool = False,
        dropout: float = 0.0,
        pad_id: int = 0,
        impl: str = "torch",
    ) -> None:
        super().__init__()
        if cell not in CELLS:
            raise UserError(f"cell={cell!r} is not one of {', '.join(CELLS)}")
        if impl not in IMPLS:
            raise UserError(f"impl={impl!r} is not one of {', '.join(IMPLS)}")
        self.cell, self.impl = cell, impl
        self.n_layer = n_layer
        self.n_dir = 2 if bidirectional else 1
        self.hidden = hidden
        self.out_features = hidden * self.n_dir
        self.embed = nn.Embedding(vocab_size, n_embd, padding_idx=pad_id)
        self.drop = Dropout(dropout)
        between = dropout if n_layer > 1 else 0.0  # applied between layers only
        if impl == "scratch":
            self.rnn = ScratchRNN(cell, n_embd, hidden, n_layer, bidirectional, between)
        else:
            self.rnn = _RECURRENT[cell](
                n_embd, hidden, num_layers=n_layer, batch_first=True, dropout=between, bidirectional=bidirectional
            )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids (B, T) long; attention_mask (B, T), 1/True = real token, 0 = padding at the end
        of a row -> (B, out_features)."""
        lengths = sequence_lengths(input_ids, attention_mask)  # (B,)
        x = self.drop(self.embed(input_ids))  # (B, T, D)
        if self.impl == "scratch":
            _, h_n = self.rnn(x, lengths)
        else:
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            _, h_n = self.rnn(packed)  # h_n back in the batch's own row order
        if self.cell == "lstm":
            h_n = h_n[0]  # (h_n, c_n) -> h_n
        B = input_ids.size(0)
        h_n = h_n.view(self.n_layer, self.n_dir, B, self.hidden)  # (layers, dirs, B, hidden)
        top = h_n[-1]  # (dirs, B, hidden), forward first
        return top.transpose(0, 1).reshape(B, self.out_features)  # (B, dirs * hidden)
