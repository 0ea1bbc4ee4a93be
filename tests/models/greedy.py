"""What an imported checkpoint's greedy decoding must do, whatever its format (GPT-2, Llama, Qwen2): 50 tokens,
the same with and without our KV cache and the same as transformers' `generate`."""

from __future__ import annotations

import torch

from tinyformer.generate.sampling import generate


def assert_greedy_50_equal(ours, hf, ids: torch.Tensor) -> None:
    cached = generate(ours, ids, 50, temperature=0)
    naive = generate(ours, ids, 50, temperature=0, use_cache=False)
    theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=50, do_sample=False, pad_token_id=0)
    assert cached.shape == (1, ids.size(1) + 50)
    assert torch.equal(cached, naive) and torch.equal(cached, theirs)
    assert len(set(cached[0, ids.size(1) :].tolist())) > 10  # not one token repeated: positions matter here
