import torch

from tinyformer.data.mlm import IGNORE, mask_tokens, random_windows, tiled_windows
from tinyformer.data.subword import CLS_ID, MASK_ID, SEP_ID

V, N_SPECIAL = 2000, 5


def draws(n_rows: int = 2000, T: int = 64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(N_SPECIAL, V, (n_rows, T), generator=g)
    ids[:, 0], ids[:, -1] = CLS_ID, SEP_ID
    ids[::7, 10:20] = 0  # [PAD] runs
    ids[::5, 30] = 1  # [UNK]
    inputs, labels = mask_tokens(ids, g, vocab_size=V, special_ids=range(N_SPECIAL), mask_id=MASK_ID)
    return ids, inputs, labels


def test_fifteen_percent_of_non_special_tokens_are_chosen_then_80_10_10():
    ids, inputs, labels = draws()
    chosen = labels != IGNORE
    normal = ids >= N_SPECIAL
    assert abs(chosen[normal].float().mean().item() - 0.15) < 0.003  # ~19,000 chosen of ~124,000
    n = chosen.sum().item()
    to_mask = (inputs[chosen] == MASK_ID).sum().item() / n
    kept = (inputs[chosen] == ids[chosen]).sum().item() / n
    replaced = 1 - to_mask - kept
    assert abs(to_mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.008 and abs(replaced - 0.1) < 0.008
    assert (labels[chosen] == ids[chosen]).all()  # the label is the original token


def test_special_tokens_are_never_chosen_nor_drawn_as_replacements():
    ids, inputs, labels = draws()
    special = ids < N_SPECIAL
    assert (labels[special] == IGNORE).all() and (inputs[special] == ids[special]).all()
    assert (inputs[~special] >= N_SPECIAL).logical_or(inputs[~special] == MASK_ID).all()


def test_unchosen_positions_are_untouched():
    ids, inputs, labels = draws()
    assert (inputs[labels == IGNORE] == ids[labels == IGNORE]).all()


def test_windows_are_wrapped_and_tiled_cover_the_stream():
    stream = torch.arange(10, 110)
    w = random_windows(stream, 4, 12, torch.Generator().manual_seed(0), cls_id=CLS_ID, sep_id=SEP_ID)
    assert w.shape == (4, 12) and (w[:, 0] == CLS_ID).all() and (w[:, -1] == SEP_ID).all()
    assert ((w[:, 2:-1] - w[:, 1:-2]) == 1).all()  # consecutive spans of the stream
    t = tiled_windows(stream, 12, cls_id=CLS_ID, sep_id=SEP_ID)
    assert t.shape == (10, 12) and t[:, 1:-1].flatten().tolist() == list(range(10, 110))
