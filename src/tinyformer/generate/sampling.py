"""Autoregressive sampling: temperature, top-k (Fan et al., 2018) and top-p / nucleus
(Holtzman et al., 2020), with a seeded generator and the context cropped to the
model's block size.
"""

from __future__ import annotations

import torch
from torch import nn

from tinyformer.config import SampleConfig
from tinyformer.errors import UserError


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits (B, V) with everything outside the top-k / top-p set at -inf."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # probability of strictly more likely tokens
        drop_sorted = mass_before >= top_p  # the most likely token always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits (B, V) -> next ids (B, 1). temperature 0 means greedy (argmax)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """idx (B, T0) -> (B, T0 + max_new_tokens); each step sees at most block_size tokens."""
    block = model.config.block_size
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        logits = model(idx[:, -block:]).logits[:, -1, :]  # (B, V)
        idx = torch.cat([idx, next_token(logits, temperature, top_k, top_p, generator)], dim=1)
    model.train(was_training)
    return idx


def generate_text(model: nn.Module, tokenizer, s: SampleConfig) -> str:
    """`s.prompt` followed by `s.tokens` sampled tokens, seeded by `s.seed`."""
    if not s.prompt:
        raise UserError("the prompt is empty; give at least one character (e.g. --prompt $'\\n')")
    device = next(model.parameters()).device
    idx = torch.tensor([tokenizer.encode(s.prompt)], dtype=torch.long, device=device)  # (1, T0)
    g = torch.Generator(device=device).manual_seed(s.seed)
    out = generate(model, idx, s.tokens, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, generator=g)
    return tokenizer.decode(out[0])
