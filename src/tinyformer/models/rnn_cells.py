"""Recurrent cells written out: the Elman RNN, the LSTM and the GRU as a loop over time steps.

The same three networks as `nn.RNN`, `nn.LSTM` and `nn.GRU` (Elman, 1990, "Finding Structure in
Time"; Hochreiter & Schmidhuber, 1997, "Long Short-Term Memory"; Cho et al., 2014, "Learning Phrase
Representations using RNN Encoder-Decoder"), with every gate equation as a line of code and the time
step as a Python `for` loop, so a learner can read what the fused kernels compute. With x the input
and h the hidden state at one step (each W a learned matrix, each b a learned bias):

    Elman:  h' = tanh(W_ih x + b_ih + W_hh h + b_hh)
    LSTM:   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (W_i* x + b_i* + W_h* h + b_h*)
            c' = f * c + i * g;  h' = o * tanh(c')
    GRU:    r, z = sigmoid(W_ir x + b_ir + W_hr h + b_hr), sigmoid(W_iz x + b_iz + W_hz h + b_hz)
            n = tanh(W_in x + b_in + r * (W_hn h + b_hn));  h' = (1 - z) * n + z * h

`ScratchRNN` has torch's parameter names, shapes and gate order (weight_ih_l{k}{_reverse},
weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}; rows i|f|g|o for the LSTM, r|z|n for the GRU), so one
state dict loads into either. It is batch-first, starts from zero states, and always has biases.

Padding: given each row's length, a row's state stops changing after its last real token (the step
runs, but `torch.where` keeps the old h and c for t >= length), and the backward direction reads each
row reversed WITHIN its length, so it starts at that row's last real token, not at T - 1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention.dropout import dropout
from tinyformer.errors import UserError

State = torch.Tensor | None  # the LSTM's cell state c; None for the Elman RNN and the GRU


def rnn_step(gx: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, c: State) -> tuple[torch.Tensor, State]:
    """Elman: gx = W_ih x + b_ih, gh = W_hh h + b_hh, both (B, H) -> h' = tanh(gx + gh)."""
    return torch.tanh(gx + gh), c


def lstm_step(gx: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, c: State) -> tuple[torch.Tensor, State]:
    """LSTM: gx, gh (B, 4H) in torch's gate order i, f, g, o -> (h', c')."""
    i, f, g, o = (gx + gh).chunk(4, dim=-1)  # each (B, H)
    i = torch.sigmoid(i)  # input gate: how much of the candidate to write
    f = torch.sigmoid(f)  # forget gate: how much of the old cell to keep
    g = torch.tanh(g)  # candidate cell values
    o = torch.sigmoid(o)  # output gate: how much of the cell to show as h
    c = f * c + i * g
    return o * torch.tanh(c), c


def gru_step(gx: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, c: State) -> tuple[torch.Tensor, State]:
    """GRU: gx, gh (B, 3H) in torch's gate order r, z, n -> h'. The reset gate r scales the hidden
    part of n INCLUDING its bias b_hn (torch's and cuDNN's form; Cho et al. put r inside W_hn)."""
    x_r, x_z, x_n = gx.chunk(3, dim=-1)  # each (B, H): W_i* x + b_i*
    h_r, h_z, h_n = gh.chunk(3, dim=-1)  # each (B, H): W_h* h + b_h*
    r = torch.sigmoid(x_r + h_r)  # reset gate
    z = torch.sigmoid(x_z + h_z)  # update gate: 1 keeps the old h
    n = torch.tanh(x_n + r * h_n)  # candidate state
    return (1 - z) * n + z * h, c


STEPS = {"rnn": rnn_step, "lstm": lstm_step, "gru": gru_step}
GATES = {"rnn": 1, "lstm": 4, "gru": 3}  # rows of W_ih and W_hh per hidden unit


def reverse_within_length(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x (B, T, F), lengths (B,) -> each row's first lengths[b] steps in reverse order, padding steps
    left where they are. Its own inverse."""
    t = torch.arange(x.size(1), device=x.device)[None, :]  # (1, T)
    last = lengths[:, None] - 1  # (B, 1)
    index = torch.where(t <= last, last - t, t)  # (B, T): row b reads step index[b, t]
    return x.gather(1, index[:, :, None].expand_as(x))  # (B, T, F)


def run_direction(
    step, x: torch.Tensor, lengths: torch.Tensor, weights: tuple[torch.Tensor, ...], reverse: bool
) -> tuple[torch.Tensor, torch.Tensor, State]:
    """One layer, one direction: x (B, T, D) -> (outputs (B, T, H) with 0 at padding, h_n (B, H), c_n).

    `weights` = (W_ih, W_hh, b_ih, b_hh). The input half of every gate, W_ih x + b_ih, does not depend
    on h, so it is computed for all T steps in one matmul; only W_hh h + b_hh is inside the loop.
    """
    w_ih, w_hh, b_ih, b_hh = weights
    if reverse:
        x = reverse_within_length(x, lengths)  # step 0 is now each row's last real token
    gx = F.linear(x, w_ih, b_ih)  # (B, T, G*H): W_ih x + b_ih at every step
    B, H = x.size(0), w_hh.size(1)
    h = x.new_zeros(B, H)  # (B, H)
    c = x.new_zeros(B, H) if step is lstm_step else None  # (B, H)
    outputs = []
    for t, gx_t in enumerate(gx.unbind(dim=1)):  # gx_t (B, G*H); unbind's backward is one stack, not T copies of gx
        gh = F.linear(h, w_hh, b_hh)  # (B, G*H): W_hh h + b_hh
        h_next, c_next = step(gx_t, gh, h, c)
        running = (t < lengths)[:, None]  # (B, 1): False once a row is past its last real token
        h = torch.where(running, h_next, h)  # finished rows keep their final h ...
        c = torch.where(running, c_next, c) if c is not None else None  # ... and their final c
        outputs.append(torch.where(running, h_next, 0.0))  # (B, H); padding gives 0, as pad_packed does
    out = torch.stack(outputs, dim=1)  # (B, T, H)
    if reverse:
        out = reverse_within_length(out, lengths)  # back to the input's order: out[:, t] read x[:, t] last
    return out, h, c


class ScratchRNN(nn.Module):
    """`nn.RNN` (tanh) / `nn.LSTM` / `nn.GRU` with batch_first=True, as a Python loop over time steps.

    forward(x (B, T, D), lengths (B,) or None = all T) -> (output (B, T, dirs * H), h_n) for "rnn"
    and "gru", (output, (h_n, c_n)) for "lstm"; h_n and c_n are (layers * dirs, B, H) in torch's
    order (layer 0 forward, layer 0 backward, layer 1 forward, ...). `output` is the top layer's, 0 at
    padding steps, [forward, backward] concatenated. In training, dropout hits every layer's output
    but the last one's, as in torch.
    """

    batch_first = True

    def __init__(
        self,
        cell: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if cell not in STEPS:
            raise UserError(f"cell={cell!r} is not one of {', '.join(STEPS)}")
        self.cell, self.step = cell, STEPS[cell]
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bidirectional, self.dropout = bidirectional, dropout
        self.num_directions = 2 if bidirectional else 1
        rows = GATES[cell] * hidden_size
        for layer in range(num_layers):
            width = input_size if layer == 0 else hidden_size * self.num_directions
            for direction in range(self.num_directions):
                suffix = f"l{layer}{'_reverse' if direction else ''}"  # torch's names, in torch's order
                self.register_parameter(f"weight_ih_{suffix}", nn.Parameter(torch.empty(rows, width)))
                self.register_parameter(f"weight_hh_{suffix}", nn.Parameter(torch.empty(rows, hidden_size)))
                self.register_parameter(f"bias_ih_{suffix}", nn.Parameter(torch.empty(rows)))
                self.register_parameter(f"bias_hh_{suffix}", nn.Parameter(torch.empty(rows)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's initialisation: every weight and bias uniform in +-1 / sqrt(hidden_size)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def weights(self, layer: int, direction: int) -> tuple[torch.Tensor, ...]:
        """(W_ih, W_hh, b_ih, b_hh) of one layer and direction (1 = backward)."""
        suffix = f"l{layer}{'_reverse' if direction else ''}"
        return tuple(getattr(self, f"{kind}_{suffix}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None):
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise ValueError(f"ScratchRNN expects x (B, T, {self.input_size}), got {tuple(x.shape)}")
        B, T = x.shape[:2]
        lengths = torch.full((B,), T, device=x.device) if lengths is None else lengths.to(x.device)
        if lengths.shape != (B,) or lengths.min() < 1 or lengths.max() > T:
            raise ValueError(f"lengths must be (B,) = ({B},) with values in 1..{T}, got {lengths.tolist()}")
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            if layer > 0:
                x = dropout(x, self.dropout, self.training)  # on the layer below's output, as torch does
            outputs = []
            for direction in range(self.num_directions):
                out, h, c = run_direction(self.step, x, lengths, self.weights(layer, direction), direction == 1)
                outputs.append(out)
                h_n.append(h)
                c_n.append(c)
            x = torch.cat(outputs, dim=-1)  # (B, T, dirs * H): the next layer's input
        h_n = torch.stack(h_n)  # (layers * dirs, B, H)
        if self.cell == "lstm":
            return x, (h_n, torch.stack(c_n))  # c_n (layers * dirs, B, H)
        return x, h_n

    def extra_repr(self) -> str:
        extra = f", num_layers={self.num_layers}" if self.num_layers > 1 else ""
        extra += ", bidirectional=True" if self.bidirectional else ""
        extra += f", dropout={self.dropout}" if self.dropout else ""
        return f"{self.cell!r}, {self.input_size}, {self.hidden_size}{extra}"
