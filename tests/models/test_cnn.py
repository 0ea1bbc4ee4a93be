"""TextCNN: padding invariance (mask, not pad id), inputs shorter than kernels, row independence, errors, overfit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.models.text_batches import V, assert_padding_invariant, assert_rows_independent, make_rows, pad_batch
from tinyformer.models.cnn import TextCNN

LENGTHS = [5, 2, 7, 1, 4]  # some rows shorter than the widest kernels


def encoder(kernel_sizes: tuple[int, ...] = (3, 4, 5)) -> TextCNN:
    torch.manual_seed(0)
    return TextCNN(V, 8, kernel_sizes=kernel_sizes, n_filters=6, dropout=0.1).eval()


@pytest.mark.parametrize("kernel_sizes", [(3, 4, 5), (1, 2), (2,)])
def test_padding_invariance(kernel_sizes: tuple[int, ...]) -> None:
    model, rows = encoder(kernel_sizes), make_rows(LENGTHS)
    assert_padding_invariant(model, rows)


def reference(model: TextCNN, row: torch.Tensor) -> torch.Tensor:
    """Kim's max-over-time for ONE unpadded row, written plainly: a row shorter than k is zero-filled up to k."""
    feats = []
    for conv in model.convs:
        k = conv.kernel_size[0]
        x = model.embed(row)  # (L, D)
        x = torch.cat([x, x.new_zeros(max(k - len(row), 0), x.size(1))])  # (max(L, k), D)
        feats.append(torch.relu(conv(x.T[None]))[0].max(dim=1).values)  # (F,)
    return torch.cat(feats)  # (out_features,)


@pytest.mark.parametrize("kernel_sizes", [(3, 4, 5), (1, 2)])
def test_matches_plain_reference(kernel_sizes: tuple[int, ...]) -> None:
    model, rows = encoder(kernel_sizes), make_rows(LENGTHS)
    with torch.no_grad():
        feats = model(*pad_batch(rows, max(LENGTHS) + 3, random_pad=True))
        expected = torch.stack([reference(model, r) for r in rows])  # (B, out_features)
    torch.testing.assert_close(feats, expected, atol=1e-6, rtol=0)


def test_inputs_shorter_than_every_kernel() -> None:
    """Lengths 1 and 2 under kernels (3, 4, 5): finite, same as explicit pad_id padding to 5, not all zeros."""
    model, rows = encoder(), make_rows([1, 2], seed=3)
    with torch.no_grad():
        short = model(*pad_batch(rows, 2))  # T = 2 < every kernel
        explicit = model(*pad_batch(rows, 5))  # pad_id padding to the widest kernel, mask 0 there
        noisy = model(*pad_batch(rows, 5, random_pad=True))
    assert torch.isfinite(short).all() and (short >= 0).all()  # a max of ReLUs over at least one window
    torch.testing.assert_close(short, explicit, atol=1e-6, rtol=0)
    torch.testing.assert_close(noisy, explicit, atol=1e-6, rtol=0)
    assert short[0].abs().max() > 0  # the length-1 row's one window still sees its token


@pytest.mark.parametrize("row", [0, 2])
def test_last_real_token_changes_the_feature(row: int) -> None:
    model, rows = encoder(), make_rows(LENGTHS)
    ids, mask = pad_batch(rows, max(LENGTHS) + 2)
    changed = ids.clone()
    changed[row, LENGTHS[row] - 1] = ids[row, LENGTHS[row] - 1] % (V - 1) + 1
    with torch.no_grad():
        assert (model(changed, mask)[row] - model(ids, mask)[row]).abs().max() > 1e-4


def test_rows_are_independent() -> None:
    model, rows = encoder(), make_rows(LENGTHS)
    assert_rows_independent(model, rows)


def test_out_features() -> None:
    model = encoder((2, 3, 4, 5))
    assert model.out_features == 6 * 4
    assert model(*pad_batch(make_rows(LENGTHS), 7)).shape == (len(LENGTHS), 24)


@pytest.mark.parametrize("kernel_sizes", [(), [], (3, 0), (-1,)])
def test_bad_kernel_sizes(kernel_sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="kernel_sizes"):
        TextCNN(V, 8, kernel_sizes=kernel_sizes)


def test_empty_row_names_the_row() -> None:
    ids, mask = pad_batch(make_rows([3, 2, 4]), 4)
    mask[2] = 0
    with pytest.raises(ValueError, match="row 2"):
        encoder()(ids, mask)


def test_overfits_eight_sequences() -> None:
    """TextCNN + Linear head, Adam lr 1e-2, reaches 100% training accuracy on 8 tiny sequences within 300 steps."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 8, (8,), generator=g).tolist()
    ids, mask = pad_batch(make_rows(lengths, seed=1), 7)
    labels = torch.tensor([0, 1] * 4)
    torch.manual_seed(0)
    model = TextCNN(V, 16, n_filters=16)
    head = nn.Linear(model.out_features, 2)
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-2)
    for _ in range(300):
        logits = head(model(ids, mask))  # (8, 2)
        if (logits.argmax(1) == labels).all():
            break
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (head(model(ids, mask)).argmax(1) == labels).all()
