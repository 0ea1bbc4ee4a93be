"""What models return: small dataclasses, never tuples whose meaning depends on flags."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ModelOutput:
    logits: torch.Tensor  # (B, T, V)
    loss: torch.Tensor | None = None  # mean cross-entropy when targets were given
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, S) when asked for
    cache: list | None = None  # the per-layer KVCache objects the call wrote to, when it was given them


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor  # (B, T, D): the final layer's output, one vector per token
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, T) when asked for


@dataclass
class MaskedLMOutput:
    """What `BertForMaskedLM` returns given labels: the N chosen positions only (labels != IGNORE), row-major."""

    loss: torch.Tensor  # mean cross-entropy over the N chosen positions (0 when N = 0)
    chosen_logits: torch.Tensor  # (N, V)
    chosen_labels: torch.Tensor  # (N,)
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, T) when asked for


@dataclass
class EncodedSource:
    """What `Seq2SeqTransformer.encode` returns: computed once per input, reused by every `decode` call."""

    memory: torch.Tensor  # (B, S, D): the encoder stack's output (after its final LayerNorm in pre-norm)
    src_valid: torch.Tensor  # (B, S) bool: True = real source token, False = padding
    attentions: list[torch.Tensor] | None = None  # per encoder layer (B, H, S, S) when asked for


@dataclass
class Seq2SeqOutput:
    logits: torch.Tensor  # (B, T, V): next-token logits for every target position
    loss: torch.Tensor | None = None  # mean cross-entropy over non-PAD labels when labels were given
    encoder_attentions: list[torch.Tensor] | None = None  # per encoder layer (B, H, S, S) when asked for
    decoder_attentions: list[torch.Tensor] | None = None  # per decoder layer, self-attention (B, H, T, T)
    cross_attentions: list[torch.Tensor] | None = None  # per decoder layer, over the source (B, H, T, S)


@dataclass
class AttentionPart:
    """One attention stack of a model, as `model.attention_parts(...)` describes it to the views."""

    name: str  # "self", "causal", or for an encoder-decoder "encoder", "decoder", "cross"
    kind: str  # "self" (bidirectional), "causal" (no future keys) or "cross" (queries and keys differ)
    weights: list[torch.Tensor]  # per layer (B, H, T, S), post-softmax
    queries: torch.Tensor  # (B, T) the ids that label the rows
    keys: torch.Tensor  # (B, S) the ids that label the columns
