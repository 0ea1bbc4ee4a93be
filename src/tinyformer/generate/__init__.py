"""Generation: autoregressive sampling from a language model; greedy and beam decoding for the encoder-decoder."""
