"""Weight initialisation shared by GPT-2 and BERT: N(0, 0.02) weights, zero biases, LayerNorms left at 1 and 0."""

from __future__ import annotations

from torch import nn


def normal_init(m: nn.Module, std: float = 0.02) -> None:
    """For `model.apply(normal_init)`: Linear and Embedding weights ~ N(0, std), Linear biases 0."""
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=std)
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.zeros_(m.bias)
