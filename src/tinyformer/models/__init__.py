"""Models built from tinyformer's attention and layers."""

from torch import nn


def count_parameters(model: nn.Module) -> int:
    """Every number the model learns or stores as a parameter (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())
