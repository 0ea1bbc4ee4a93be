"""RNNEncoder, both impls (torch's packed layer, the scratch loop): padding invariance (mask, not pad id), row
independence, sensitivity to real tokens, errors, overfit; checkpoints move between impls; model.rnn_impl."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.models.text_batches import V, assert_padding_invariant, assert_rows_independent, make_rows, pad_batch
from tinyformer.errors import UserError
from tinyformer.models.classifier import ClassifierConfig, TextClassifier
from tinyformer.models.rnn import CELLS, IMPLS, RNNEncoder
from tinyformer.models.rnn_cells import ScratchRNN

LENGTHS = [5, 2, 7, 1]  # different lengths, longest in the middle, one shorter than everything


def encoder(cell: str, bidirectional: bool, n_layer: int = 2, impl: str = "torch") -> RNNEncoder:
    torch.manual_seed(0)
    model = RNNEncoder(V, 8, 12, n_layer=n_layer, cell=cell, bidirectional=bidirectional, dropout=0.1, impl=impl)
    return model.eval()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_padding_invariance(cell: str, bidirectional: bool, impl: str) -> None:
    model, rows = encoder(cell, bidirectional, impl=impl), make_rows(LENGTHS)
    assert_padding_invariant(model, rows)


@pytest.mark.parametrize("impl", IMPLS)
def test_bool_mask_equals_int_mask(impl: str) -> None:
    model = encoder("gru", True, impl=impl)
    ids, mask = pad_batch(make_rows(LENGTHS), 9, random_pad=True)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask.bool()), model(ids, mask), atol=0, rtol=0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", CELLS)
def test_rows_are_independent(cell: str, impl: str) -> None:
    model, rows = encoder(cell, True, impl=impl), make_rows(LENGTHS)
    assert_rows_independent(model, rows)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n_layer", [1, 2])  # with 1 layer, a backward half read at the LAST token never sees the first
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell", CELLS)
def test_feature_depends_on_first_and_last_real_token(cell: str, bidirectional: bool, n_layer: int, impl: str) -> None:
    """Changing the last real token moves the forward half; changing the first moves the backward half (h at t=0)."""
    model, rows = encoder(cell, bidirectional, n_layer=n_layer, impl=impl), make_rows(LENGTHS)
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


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("bidirectional", "n_layer", "expected"), [(False, 1, 12), (True, 1, 24), (True, 3, 24)])
def test_out_features(bidirectional: bool, n_layer: int, expected: int, impl: str) -> None:
    model = encoder("lstm", bidirectional, n_layer=n_layer, impl=impl)
    ids, mask = pad_batch(make_rows(LENGTHS), 7)
    assert model.out_features == expected
    assert model(ids, mask).shape == (len(LENGTHS), expected)


def test_unknown_cell_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="rnn, lstm, gru"):
        RNNEncoder(V, 8, 12, cell="transformer")


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_row_names_the_row(impl: str) -> None:
    ids, mask = pad_batch(make_rows([3, 2, 4]), 4)
    mask[1] = 0
    with pytest.raises(ValueError, match="row 1"):
        encoder("lstm", False, impl=impl)(ids, mask)


@pytest.mark.parametrize("impl", IMPLS)
def test_padding_before_a_real_token_is_rejected(impl: str) -> None:
    ids, mask = pad_batch(make_rows([3, 4]), 4)
    mask[0] = torch.tensor([0, 1, 1, 1])
    with pytest.raises(ValueError, match="row 0"):
        encoder("gru", False, impl=impl)(ids, mask)


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


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", CELLS)
def test_overfits_eight_sequences(cell: str, impl: str) -> None:
    torch.manual_seed(0)
    model = RNNEncoder(V, 16, 32, cell=cell, bidirectional=True, impl=impl)
    assert overfit(model) == 1.0


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("cell", CELLS)
def test_feature_is_top_layer_h_at_the_ends(cell: str, impl: str) -> None:
    """Feature = TOP layer's h (not c): forward half = output at the last token, backward half = output at t=0."""
    model, rows = encoder(cell, True, impl=impl), make_rows(LENGTHS)
    with torch.no_grad():
        feats = model(*pad_batch(rows, max(LENGTHS) + 2))  # (B, 2H)
        for i, r in enumerate(rows):
            out, _ = model.rnn(model.embed(r[None]))  # (1, L, 2H), top layer, row alone
            torch.testing.assert_close(feats[i, : model.hidden], out[0, -1, : model.hidden], atol=1e-6, rtol=0)
            torch.testing.assert_close(feats[i, model.hidden :], out[0, 0, model.hidden :], atol=1e-6, rtol=0)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize(("source", "target"), [("torch", "scratch"), ("scratch", "torch")])
def test_a_checkpoint_trained_with_one_impl_loads_into_the_other(cell: str, source: str, target: str) -> None:
    """Same state-dict names and shapes; after a few training steps with `source`, `target` gives the same features
    (dropout between 2 layers too, so the weights moved away from their init)."""
    trained = encoder(cell, True, impl=source).train()
    ids, mask = pad_batch(make_rows(LENGTHS), max(LENGTHS) + 2)
    opt = torch.optim.Adam(trained.parameters(), lr=1e-2)
    for _ in range(3):
        loss = trained(ids, mask).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    other = RNNEncoder(V, 8, 12, n_layer=2, cell=cell, bidirectional=True, dropout=0.1, impl=target).eval()
    assert list(other.state_dict()) == list(trained.state_dict())
    other.load_state_dict(trained.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(other(ids, mask), trained.eval()(ids, mask), atol=1e-5, rtol=0)


def test_unknown_impl_names_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="impl='cudnn' is not one of torch, scratch"):
        RNNEncoder(V, 8, 12, impl="cudnn")


def test_bad_model_rnn_impl_is_one_line_naming_it() -> None:
    with pytest.raises(UserError) as e:
        ClassifierConfig(encoder="gru", rnn_impl="fast")
    assert str(e.value) == "model.rnn_impl='fast' is not one of torch, scratch"


@pytest.mark.parametrize("cell", CELLS)
def test_model_rnn_impl_picks_the_scratch_loop_with_the_same_logits(cell: str) -> None:
    small = dict(encoder=cell, vocab_size=V, labels=["a", "b"], n_embd=8, n_layer=2, hidden=12, bidirectional=True)
    fused, loop = (TextClassifier(ClassifierConfig(**small, rnn_impl=impl)).eval() for impl in IMPLS)
    assert isinstance(loop.encoder.rnn, ScratchRNN) and not isinstance(fused.encoder.rnn, ScratchRNN)
    loop.load_state_dict(fused.state_dict(), strict=True)
    ids, mask = pad_batch(make_rows(LENGTHS), max(LENGTHS))
    with torch.no_grad():
        torch.testing.assert_close(loop(ids, mask).logits, fused(ids, mask).logits, atol=1e-5, rtol=0)
