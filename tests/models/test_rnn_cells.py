"""ScratchRNN == nn.RNN / nn.LSTM / nn.GRU given the same weights: outputs, h_n, c_n and gradients, on padded
batches of varied lengths; state dicts load both ways; dropout sits between layers only; bad inputs are named."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tinyformer.models.rnn import CELLS
from tinyformer.models.rnn_cells import ScratchRNN, reverse_within_length

TORCH = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}
D, H, T = 6, 5, 9
LENGTHS = [9, 3, 6, 1, 8]  # the longest first and a row of one token; no two alike


def pair(cell: str, bidirectional: bool, n_layer: int) -> tuple[nn.Module, ScratchRNN]:
    """torch's layer and a ScratchRNN holding its weights (loaded strictly: same names, same shapes)."""
    torch.manual_seed(0)
    ref = TORCH[cell](D, H, num_layers=n_layer, batch_first=True, bidirectional=bidirectional)
    scratch = ScratchRNN(cell, D, H, n_layer, bidirectional)
    scratch.load_state_dict(ref.state_dict(), strict=True)
    return ref, scratch


def run_torch(ref: nn.Module, x: torch.Tensor, lengths: torch.Tensor):
    """torch on the packed batch -> (output (B, T, dirs * H) with 0 at padding, h_n or (h_n, c_n))."""
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, state = ref(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
    return out, state


def states(state) -> tuple[torch.Tensor, ...]:
    return state if isinstance(state, tuple) else (state,)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(len(LENGTHS), T, D, generator=g), torch.tensor(LENGTHS)


@pytest.mark.parametrize("n_layer", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_scratch_equals_torch_outputs_states_and_gradients(cell: str, bidirectional: bool, n_layer: int) -> None:
    ref, scratch = pair(cell, bidirectional, n_layer)
    x, lengths = batch()
    x_ref, x_scratch = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ref, state_ref = run_torch(ref, x_ref, lengths)
    out_scratch, state_scratch = scratch(x_scratch, lengths)
    torch.testing.assert_close(out_scratch, out_ref, atol=1e-5, rtol=0)
    assert len(states(state_scratch)) == len(states(state_ref)) == (2 if cell == "lstm" else 1)
    for mine, theirs in zip(states(state_scratch), states(state_ref), strict=True):  # h_n, then c_n
        assert mine.shape == theirs.shape == (n_layer * (2 if bidirectional else 1), len(LENGTHS), H)
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
    g = torch.Generator().manual_seed(2)  # a random linear readout of everything, so no gradient is symmetric
    probes = [torch.randn(t.shape, generator=g) for t in (out_ref, *states(state_ref))]
    loss_ref = sum((p * t).sum() for p, t in zip(probes, (out_ref, *states(state_ref)), strict=True))
    loss_scratch = sum((p * t).sum() for p, t in zip(probes, (out_scratch, *states(state_scratch)), strict=True))
    loss_ref.backward()
    loss_scratch.backward()
    grads = dict(scratch.named_parameters())
    for name, p in ref.named_parameters():
        assert p.grad.abs().max() > 0, name
        torch.testing.assert_close(grads[name].grad, p.grad, atol=1e-4, rtol=0, msg=name)
    torch.testing.assert_close(x_scratch.grad, x_ref.grad, atol=1e-4, rtol=0)


@pytest.mark.parametrize("cell", CELLS)
def test_state_dict_has_torchs_names_and_shapes_and_loads_both_ways(cell: str) -> None:
    ref, scratch = pair(cell, True, 2)
    assert [(k, v.shape) for k, v in scratch.state_dict().items()] == [
        (k, v.shape) for k, v in ref.state_dict().items()
    ]
    torch.manual_seed(5)
    fresh = ScratchRNN(cell, D, H, 2, True)  # different random weights ...
    ref.load_state_dict(fresh.state_dict(), strict=True)  # ... into torch's layer
    x, lengths = batch()
    with torch.no_grad():
        torch.testing.assert_close(fresh(x, lengths)[0], run_torch(ref, x, lengths)[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("cell", CELLS)
def test_no_lengths_means_every_row_is_full_length(cell: str) -> None:
    _, scratch = pair(cell, True, 2)
    x, _ = batch()
    with torch.no_grad():
        a, b = scratch(x), scratch(x, torch.full((len(LENGTHS),), T))
    torch.testing.assert_close(a[0], b[0], atol=0, rtol=0)


def test_padded_steps_output_zero_and_change_nothing() -> None:
    """Whatever sits in the padding, outputs there are 0 and every real output and state stays the same."""
    _, scratch = pair("lstm", True, 2)
    x, lengths = batch()
    noisy = x.clone()
    pad = torch.arange(T)[None, :] >= lengths[:, None]  # (B, T)
    noisy[pad] = 100.0
    with torch.no_grad():
        (out, (h, c)), (out2, (h2, c2)) = scratch(x, lengths), scratch(noisy, lengths)
    assert out[pad].abs().max() == 0
    for a, b in ((out, out2), (h, h2), (c, c2)):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_reverse_within_length_reverses_only_the_real_steps() -> None:
    x = torch.arange(2 * 5).view(2, 5, 1)  # (B=2, T=5, 1)
    got = reverse_within_length(x, torch.tensor([5, 3]))[..., 0]
    assert got.tolist() == [[4, 3, 2, 1, 0], [7, 6, 5, 8, 9]]


@pytest.mark.parametrize("cell", CELLS)
def test_dropout_only_between_layers(cell: str) -> None:
    """In training, layer 0's final state is untouched by dropout; the top layer's is not; eval is exact."""
    ref, scratch = pair(cell, False, 2)
    scratch.dropout = 0.5
    x, lengths = batch()
    with torch.no_grad():
        exact = states(run_torch(ref, x, lengths)[1])[0]  # (2, B, H)
        torch.manual_seed(3)
        noisy = states(scratch.train()(x, lengths)[1])[0]
        clean = states(scratch.eval()(x, lengths)[1])[0]
    torch.testing.assert_close(noisy[0], exact[0], atol=1e-5, rtol=0)
    assert (noisy[1] - exact[1]).abs().max() > 1e-3
    torch.testing.assert_close(clean, exact, atol=1e-5, rtol=0)


def test_bad_inputs_and_cells_are_named() -> None:
    scratch = ScratchRNN("gru", D, H)
    x, _ = batch()
    with pytest.raises(ValueError, match=r"lengths must be \(B,\) = \(5,\) with values in 1\.\.9"):
        scratch(x, torch.tensor([9, 3, 6, 0, 8]))
    with pytest.raises(ValueError, match=r"expects x \(B, T, 6\), got \(5, 9\)"):
        scratch(x[..., 0])
    with pytest.raises(ValueError, match="cell='elman' is not one of rnn, lstm, gru"):
        ScratchRNN("elman", D, H)
