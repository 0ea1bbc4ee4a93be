"""What models return: small dataclasses, never tuples whose meaning depends on flags."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, T, V)
    loss: torch.Tensor | None = None  # mean cross-entropy when targets were given
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, S) when asked for


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor  # (B, T, D): the final layer's output, one vector per token
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, T) when asked for
