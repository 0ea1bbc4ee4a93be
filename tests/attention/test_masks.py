import torch

from tinyformer.attention import masks


def test_causal_is_lower_triangular_with_true_meaning_attend():
    assert torch.equal(masks.causal(4), torch.tril(torch.ones(4, 4, dtype=torch.bool)))


def test_causal_with_cache_offsets_queries_to_the_last_positions():
    m = masks.causal(2, 5)  # 2 new queries after 3 cached keys
    assert m.shape == (2, 5)
    assert m[0].tolist() == [True, True, True, True, False]
    assert m[1].tolist() == [True] * 5


def test_hf_and_key_padding_conventions_convert_to_the_same_mask():
    hf = torch.tensor([[1, 1, 0], [1, 0, 0]])
    kpm = torch.tensor([[False, False, True], [False, True, True]])
    a, b = masks.from_hf_attention_mask(hf), masks.from_key_padding_mask(kpm)
    assert a.shape == (2, 1, 1, 3) and a.dtype == torch.bool
    assert torch.equal(a, b)
    assert a[0, 0, 0].tolist() == [True, True, False]


def test_combine_ands_and_skips_none():
    c = masks.causal(3)
    pad = masks.from_key_valid(torch.tensor([[True, True, False]]))
    both = masks.combine(None, c, pad)
    assert both.shape == (1, 1, 3, 3)
    assert both[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert masks.combine(None, None) is None


def test_fill_value_is_the_dtype_minimum_not_a_magic_number():
    assert masks.fill_value(torch.float16) == torch.finfo(torch.float16).min
    assert masks.fill_value(torch.float32) == torch.finfo(torch.float32).min
