"""Generation: autoregressive sampling from a language model."""
