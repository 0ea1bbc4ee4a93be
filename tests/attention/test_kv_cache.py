import pytest
import torch

from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.multihead import MultiHeadAttention
from tinyformer.attention.positions import Rotary
from tinyformer.attention.spec import BlockSpec


def test_update_returns_everything_written_so_far():
    cache = KVCache(2, 3, 10, 4)
    k1, v1 = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    k, v = cache.update(k1, v1, 0)
    assert k.shape == (2, 3, 4, 4) and torch.equal(k, k1) and torch.equal(v, v1)
    k2, v2 = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    k, v = cache.update(k2, v2, 4)
    assert cache.length == 5 and torch.equal(k, torch.cat([k1, k2], 2)) and torch.equal(v, torch.cat([v1, v2], 2))
    k, _ = cache.update(k2, v2, 0)  # rewinding overwrites and shortens
    assert cache.length == 1 and torch.equal(k, k2)
    assert not any(name in cache.state_dict() for name in ("k", "v"))  # non-persistent


def test_bad_shapes_and_positions_name_what_is_wrong():
    cache = KVCache(2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"\(B, H, S, Dh\) = \(2, 3, 4, 8\).*\(2, 3, 1, 4\)"):
        cache.update(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4), 0)
    with pytest.raises(ValueError, match="start=2 must be in \\[0, length=0\\]"):
        cache.update(torch.randn(2, 3, 1, 8), torch.randn(2, 3, 1, 8), 2)
    with pytest.raises(ValueError, match="overflows the cache capacity S=4"):
        cache.update(torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8), 0)


@pytest.mark.parametrize("rope", [None, Rotary(4)])
@pytest.mark.parametrize("backend", ["sdpa", "manual"])
def test_attention_one_token_at_a_time_equals_the_full_causal_pass(backend, rope):
    torch.manual_seed(0)
    attn = MultiHeadAttention(BlockSpec(16, 4, backend=backend)).eval()
    x = torch.randn(2, 9, 16)
    full, _ = attn(x, causal=True, rope=rope)
    cache = KVCache(2, 4, 9, 4)
    first, _ = attn(x[:, :3], causal=True, rope=rope, cache=cache, start=0)  # a 3-token prefill
    steps = [attn(x[:, t : t + 1], causal=True, rope=rope, cache=cache, start=t)[0] for t in range(3, 9)]
    torch.testing.assert_close(torch.cat([first, *steps], 1), full, atol=1e-6, rtol=0)
