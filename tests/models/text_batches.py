"""Right-padded batches of token ids for the encoder tests (test_rnn.py, test_cnn.py)."""

from __future__ import annotations

import torch

V = 20  # vocabulary; 0 is pad_id


def make_rows(lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    """One 1-D tensor of real (non-pad) token ids per length."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, V, (n,), generator=g) for n in lengths]


def pad_batch(rows: list[torch.Tensor], width: int, random_pad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """rows -> input_ids, attention_mask (B, width); padding ids are 0, or random NON-pad ids if random_pad."""
    g = torch.Generator().manual_seed(123)
    ids = torch.randint(1, V, (len(rows), width), generator=g) if random_pad else torch.zeros(len(rows), width).long()
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return ids, mask


def assert_padding_invariant(model, rows: list[torch.Tensor]) -> None:
    """Each row alone == the batch padded with pad_id == the batch padded wider with random ids the mask hides."""
    longest = max(len(r) for r in rows)
    with torch.no_grad():
        alone = torch.cat([model(r[None], torch.ones(1, len(r))) for r in rows])  # (B, out_features)
        padded = model(*pad_batch(rows, longest))
        noisy = model(*pad_batch(rows, longest + 5, random_pad=True))  # only the mask marks the padding
    assert alone.shape == (len(rows), model.out_features)
    torch.testing.assert_close(padded, alone, atol=1e-6, rtol=0)
    torch.testing.assert_close(noisy, alone, atol=1e-6, rtol=0)


def assert_rows_independent(model, rows: list[torch.Tensor]) -> None:
    """Changing every real token of row 1 leaves row 0's features exactly as they were, and changes row 1's."""
    ids, mask = pad_batch(rows, max(len(r) for r in rows))
    other = ids.clone()
    n = len(rows[1])
    other[1, :n] = (other[1, :n] % (V - 1)) + 1  # every real token of row 1 changes
    with torch.no_grad():
        a, b = model(ids, mask), model(other, mask)
    torch.testing.assert_close(b[0], a[0], atol=0, rtol=0)
    assert not torch.allclose(b[1], a[1])
