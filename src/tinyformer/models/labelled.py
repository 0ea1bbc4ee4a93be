"""The forward pass every labelled model shares, written once: features, then logits, then a loss.

A model of this kind maps token ids (B, T) and their padding mask to features through its encoder,
`features`, and the features to logits through its `head`; given labels, it also returns the mean
cross-entropy against them (`scored`), skipping positions labelled `IGNORE`. The text classifier (one label
per text), the token tagger (one per token) and the masked LM (one per chosen token) are such models; the
masked LM overrides `scored` to run its head on the chosen positions only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.data.tokenizers import IGNORE
from tinyformer.models.outputs import MaskedLMOutput, ModelOutput


class LabelledModel(nn.Module):
    """A subclass gives `features` and `head` (features (..., D) -> logits (..., C): a Linear layer or a method)."""

    def features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, need_weights: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """-> (features (B, D) per text or (B, T, D) per token, the attention weights if asked and any)."""
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> ModelOutput | MaskedLMOutput:
        """input_ids (B, T); attention_mask (B, T) 1 = real, 0 = padding; labels (B,) or (B, T), IGNORE = no loss.

        -> the logits of every text or token, and with labels `scored`'s output, the loss among it.
        """
        h, attentions = self.features(input_ids, attention_mask, need_weights)
        if labels is None:
            return ModelOutput(self.head(h), None, attentions)
        return self.scored(h, labels, attentions)

    def scored(
        self, h: torch.Tensor, labels: torch.Tensor, attentions: list[torch.Tensor] | None
    ) -> ModelOutput | MaskedLMOutput:
        """The logits of features `h` and their mean cross-entropy over the labelled positions."""
        logits = self.head(h)  # (B, C) or (B, T, C)
        loss = F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=IGNORE)
        return ModelOutput(logits, loss, attentions)
