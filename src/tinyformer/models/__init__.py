"""Models built from tinyformer's attention and layers."""
