"""RNNEncoder: padding invariance (mask, not pad id), row independence, sensitivity to real tokens, errors, overfit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.models.text_batches import V, assert_padding_invariant, assert_rows_independent, make_rows, pad_batch
from tinyformer.models.rnn import CELLS, RNNEncoder

LENGTHS = [5, 2, 7, 1]  # different lengths, longest in the middle, one shorter than everything


def encoder(cell: str, bidirectional: bool, n_layer: int = 2) -> RNNEncoder:
    torch.manual_seed(0)
    return RNNEncoder(V, 8, 12, n_layer=n_layer, cell=cell, bidirectional=bidirectional, dropout=0.1).eval()


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_padding_invariance(cell: str, bidirectional: bool) -> None:
    model, rows = encoder(cell, bidirectional), make_rows(LENGTHS)
    assert_padding_invariant(model, rows)


def test_bool_mask_equals_int_mask() -> None:
    model = encoder("gru", True)
    ids, mask = pad_batch(make_rows(LENGTHS), 9, random_pad=True)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask.bool()), model(ids, mask), atol=0, rtol=0)


@pytest.mark.parametrize("cell", CELLS)
def test_rows_are_independent(cell: str) -> None:
    model, rows = encoder(cell, True), make_rows(LENGTHS)
    assert_rows_independent(model, rows)


@pytest.mark.parametrize("n_layer", [1, 2])  # with 1 layer, a backward half read at the LAST token never sees the first
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_feature_depends_on_first_and_last_real_token(cell: str, bidirectional: bool, n_layer: int) -> None:
    """Changing the last real token moves the forward half; changing the first moves the backward half (h at t=0)."""
    model, rows = encoder(cell, bidirectional, n_layer=n_layer), make_rows(LENGTHS)
    ids, mask = pad_batch(rows, max(LENGTHS) + 3)
    H = model.out_features // (2 if bidirectional else 1)
    last, first = ids.clone(), ids.clone()
    last[0, LENGTHS[0] - 1] = ids[0, LENGTHS[0] - 1] % (V - 1) + 1
    first[0, 0] = ids[0, 0] % (V - 1) + 1
    with torch.no_grad():
        base, f_last, f_first = model(ids, mask)[0], model(last, mask)[0], model(first, mask)[0]
    assert (f_last[:H] - base[:H]).abs().max() > 1e-4  # forward direction ends at the last real token
    if bidirectional:
        assert (f_first[H:] - base[H:]).abs().max() > 1e-4  # backward direction ends at the first token


@pytest.mark.parametrize(("bidirectional", "n_layer", "expected"), [(False, 1, 12), (True, 1, 24), (True, 3, 24)])
def test_out_features(bidirectional: bool, n_layer: int, expected: int) -> None:
    model = encoder("lstm", bidirectional, n_layer=n_layer)
    ids, mask = pad_batch(make_rows(LENGTHS), 7)
    assert model.out_features == expected
    assert model(ids, mask).shape == (len(LENGTHS), expected)


def test_unknown_cell_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="rnn, lstm, gru"):
        RNNEncoder(V, 8, 12, cell="transformer")


def test_empty_row_names_the_row() -> None:
    ids, mask = pad_batch(make_rows([3, 2, 4]), 4)
    mask[1] = 0
    with pytest.raises(ValueError, match="row 1"):
        encoder("lstm", False)(ids, mask)


def test_padding_before_a_real_token_is_rejected() -> None:
    ids, mask = pad_batch(make_rows([3, 4]), 4)
    mask[0] = torch.tensor([0, 1, 1, 1])
    with pytest.raises(ValueError, match="row 0"):
        encoder("gru", False)(ids, mask)


def overfit(model: nn.Module, steps: int = 300) -> float:
    """Train model + Linear head with Adam lr 1e-2 on 8 tiny labelled sequences; return the best training accuracy."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 8, (8,), generator=g).tolist()
    ids, mask = pad_batch(make_rows(lengths, seed=1), 7)
    labels = torch.tensor([0, 1] * 4)
    head = nn.Linear(model.out_features, 2)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)
    model.train()
    for _ in range(steps):
        logits = head(model(ids, mask))  # (8, 2)
        if (logits.argmax(1) == labels).all():
            return 1.0
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (head(model(ids, mask)).argmax(1) == labels).float().mean().item()


@pytest.mark.parametrize("cell", CELLS)
def test_overfits_eight_sequences(cell: str) -> None:
    torch.manual_seed(0)
    model = RNNEncoder(V, 16, 32, cell=cell, bidirectional=True)
    assert overfit(model) == 1.0


@pytest.mark.parametrize("cell", CELLS)
def test_feature_is_top_layer_h_at_the_ends(cell: str) -> None:
    """Feature = TOP layer's h (not c): forward half = output at the last token, backward half = output at t=0."""
    model, rows = encoder(cell, True), make_rows(LENGTHS)
    with torch.no_grad():
        feats = model(*pad_batch(rows, max(LENGTHS) + 2))  # (B, 2H)
        for i, r in enumerate(rows):
            out, _ = model.rnn(model.embed(r[None]))  # (1, L, 2H), top layer, row alone
            torch.testing.assert_close(feats[i, : model.hidden], out[0, -1, : model.hidden], atol=1e-6, rtol=0)
            torch.testing.assert_close(feats[i, model.hidden :], out[0, 0, model.hidden :], atol=1e-6, rtol=0)
