"""Data: tokenizers and datasets."""
