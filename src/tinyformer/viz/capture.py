"""One attention-capture API for every model: `capture_attention(model, inputs) -> AttentionMaps`.

Everything that draws or scores attention takes `AttentionMaps`, so every view
works for every model: a Hugging Face encoder, MiniGPT, our BERT-style encoder.
Weights are post-softmax probabilities (rows sum to 1 over the allowed keys),
float32 on the CPU, one (B, H, T, S) tensor per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

KINDS = ("self", "causal", "cross")


@dataclass
class AttentionMaps:
    layers: list[torch.Tensor]  # per layer (B, H, T, S)
    query_tokens: list[list[str]]  # per batch row: T labels for the rows (queries)
    key_tokens: list[list[str]]  # per batch row: S labels for the columns (keys)
    kind: str  # "self" (bidirectional), "causal" (decoder self-attention) or "cross"
    model_name: str = ""  # shown in titles
    special: dict[str, str] = field(default_factory=dict)  # {"cls": "[CLS]", "end": "[SEP]"} when the model has them

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {KINDS}")
        if not self.layers:
            raise ValueError("AttentionMaps needs at least one layer")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].size(1)

    def head(self, layer: int, head: int, row: int = 0) -> torch.Tensor:
        """(T, S) weights of one head for batch row `row`."""
        return self.layers[layer][row, head]

    def stacked(self, row: int = 0) -> torch.Tensor:
        """(L, H, T, S) for one batch row (all layers must share T and S)."""
        return torch.stack([w[row] for w in self.layers])
