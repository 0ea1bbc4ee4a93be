"""One text classifier over interchangeable encoders: Transformer, TextCNN, RNN, LSTM, GRU.

Every encoder maps (input_ids, attention_mask) to one feature vector per text;
the classifier adds dropout and a Linear layer to class logits. So a bake-off
changes one field, `model.encoder`, and nothing else: same tokenizer, same head,
same loop.

- "transformer": tinyformer's BERT-style encoder (`BertEncoder`), pooled by the
  mean over real tokens ("mean") or by the [CLS] position ("cls"). Its weights
  can start from a masked-LM run (`load_encoder_from`), which is how the value
  of pretraining is measured, or from a Hugging Face BERT such as MiniLM: then
  the architecture is the checkpoint's (`with_architecture`), as
  `from_pretrained` does, and `load_hf_encoder` copies its weights.
- "cnn": TextCNN (Kim, 2014), max over time per kernel width.
- "rnn" / "lstm" / "gru": the final hidden state of a packed recurrent network,
  optionally bidirectional.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from tinyformer.attention.dropout import Dropout
from tinyformer.attention.multihead import BACKENDS, KINDS
from tinyformer.attention.spec import picked
from tinyformer.config import check_fields
from tinyformer.errors import UserError
from tinyformer.hub import hf_config
from tinyformer.models.bert import BertConfig, BertEncoder
from tinyformer.models.cnn import TextCNN
from tinyformer.models.hf_bert import config_from_hf, load_hf_weights
from tinyformer.models.labelled import LabelledModel
from tinyformer.models.outputs import AttentionPart
from tinyformer.models.rnn import IMPLS as RNN_IMPLS
from tinyformer.models.rnn import RNNEncoder

ENCODERS = ("transformer", "cnn", "rnn", "lstm", "gru")
POOLINGS = ("mean", "cls")


@dataclass
class ClassifierConfig:
    encoder: str = "transformer"  # "transformer", "cnn", "rnn", "lstm" or "gru"
    vocab_size: int = 0  # tokens in the vocabulary; 0 = take it from the tokenizer
    labels: list[str] = field(default_factory=list)  # class names, index = class id; [] = take them from the data
    n_embd: int = 128  # token embedding width (the Transformer's model width)
    n_layer: int = 4  # Transformer blocks or stacked recurrent layers
    n_head: int = 4  # transformer: attention heads
    d_ff: int = 512  # transformer: feed-forward width
    block_size: int = 128  # transformer: longest input
    positions: str = "rope"  # transformer: "rope" (rotary) or "learned" (BERT's table)
    layer_norm_eps: float = 1e-12  # transformer: epsilon of every LayerNorm (BERT's)
    type_vocab_size: int = 2  # transformer: rows of the segment table (only segment 0 is used)
    pooling: str = "mean"  # transformer: "mean" over real tokens or the "cls" position
    backend: str = "auto"  # transformer: attention backend, "auto" (measured per run), "sdpa" or "manual"
    attention: str = "softmax"  # transformer: "softmax" or "linear" attention (no weights to view)
    hidden: int = 128  # rnn/lstm/gru: hidden state width (per direction)
    bidirectional: bool = False  # rnn/lstm/gru: also read the text right to left
    rnn_impl: str = "torch"  # rnn/lstm/gru: torch's fused layer or the "scratch" loop (same weights, same names)
    kernel_sizes: list[int] = field(default_factory=lambda: [3, 4, 5])  # cnn: convolution widths
    n_filters: int = 100  # cnn: filters per width
    dropout: float = 0.1  # on embeddings, inside the encoder and on the pooled feature

    def __post_init__(self) -> None:
        check_fields(
            self,
            "model",
            positive=("n_embd", "n_layer", "n_head", "d_ff", "block_size", "hidden", "n_filters", "layer_norm_eps"),
            fractions=("dropout",),
            choices={
                "encoder": ENCODERS,
                "pooling": POOLINGS,
                "backend": BACKENDS,
                "rnn_impl": RNN_IMPLS,
                "attention": KINDS,
            },
            divisible=("n_embd", "n_head") if self.encoder == "transformer" else None,
        )
        if not self.kernel_sizes or min(self.kernel_sizes) < 1:
            raise UserError(f"model.kernel_sizes={self.kernel_sizes} must be a non-empty list of widths >= 1")
        if self.encoder == "transformer":
            self.bert()  # the encoder's own checks, now rather than when the model is built

    def bert(self) -> BertConfig:
        """The encoder's config when `encoder` is "transformer" (also what a masked-LM run must match)."""
        return BertConfig(**picked(BertConfig, self), attn_dropout=self.dropout)  # each field of the same name


class TextClassifier(LabelledModel):
    """(input_ids, attention_mask) -> logits (B, C); labels (B,) class ids give the cross-entropy."""

    attention_names = ("self",)  # the Transformer encoder's; TextCNN and the RNN family have none

    def __init__(self, config: ClassifierConfig) -> None:
        super().__init__()
        if config.vocab_size <= 0 or len(config.labels) < 2:
            raise ValueError("ClassifierConfig needs vocab_size > 0 and at least 2 labels before building the model")
        c = self.config = config
        if c.encoder == "transformer":
            self.encoder = BertEncoder(c.bert())
            width = c.n_embd
        elif c.encoder == "cnn":
            self.encoder = TextCNN(c.vocab_size, c.n_embd, c.kernel_sizes, c.n_filters, c.dropout)
            width = self.encoder.out_features
        else:
            self.encoder = RNNEncoder(
                c.vocab_size, c.n_embd, c.hidden, c.n_layer, c.encoder, c.bidirectional, c.dropout, impl=c.rnn_impl
            )
            width = self.encoder.out_features
        self.drop = Dropout(c.dropout)
        self.head = nn.Linear(width, len(c.labels))

    def features(self, input_ids, attention_mask, need_weights):
        """The pooled feature (B, F) of each text, dropped out; `need_weights` gives the Transformer's attention
        maps (other encoders have none). attention_mask None = no padding."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attentions = None
        if self.config.encoder == "transformer":
            out = self.encoder(input_ids, attention_mask, need_weights=need_weights)
            feature, attentions = self.pool(out.last_hidden_state, attention_mask), out.attentions
        else:
            feature = self.encoder(input_ids, attention_mask)  # (B, F)
        return self.drop(feature), attentions

    def attention_parts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[AttentionPart]:
        """The Transformer encoder's self-attention, for the views; TextCNN and the RNN family have none."""
        if self.config.encoder != "transformer":
            raise UserError(
                f"a {self.config.encoder!r} classifier has no attention; viz needs model.encoder=transformer"
            )
        return self.encoder.attention_parts(input_ids, attention_mask)

    def pool(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """h (B, T, D) -> (B, D): the [CLS] vector, or the mean over real tokens (padding excluded)."""
        if self.config.pooling == "cls":
            return h[:, 0]  # (B, D)
        real = attention_mask.to(h.dtype)[:, :, None]  # (B, T, 1)
        return (h * real).sum(1) / real.sum(1).clamp(min=1.0)  # (B, D)


ARCHITECTURE = (
    *("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "d_ff", "positions", "type_vocab_size"),
    "attention",
)


def _check_architecture(mine: BertConfig, theirs: BertConfig, source: str) -> None:
    for name in ARCHITECTURE:
        if getattr(mine, name) != getattr(theirs, name):
            raise UserError(
                f"{source} has {name}={getattr(theirs, name)}, this classifier {getattr(mine, name)}; "
                f"set model.{name}={getattr(theirs, name)}"
            )


def check_transformer(c: ClassifierConfig) -> None:
    """Only the Transformer encoder can start from a pretrained one (`model.init_from`)."""
    if c.encoder != "transformer":
        raise UserError(f"model.init_from needs model.encoder='transformer', not {c.encoder!r}")


def load_encoder_from(model: TextClassifier, mlm_state: dict[str, torch.Tensor], mlm_config: BertConfig) -> None:
    """Copy a masked-LM run's encoder (its "bert." weights) into a Transformer classifier; UserError on mismatch."""
    check_transformer(model.config)
    _check_architecture(model.config.bert(), mlm_config, "the masked-LM run")
    encoder = {k.removeprefix("bert."): v for k, v in mlm_state.items() if k.startswith("bert.")}
    model.encoder.load_state_dict(encoder, strict=True)


def with_architecture(c: ClassifierConfig, bert: BertConfig) -> ClassifierConfig:
    """A copy of `c` whose Transformer is `bert`, a pretrained checkpoint's architecture (its dropout too)."""
    check_transformer(c)
    same = {name: getattr(bert, name) for name in (*ARCHITECTURE, "layer_norm_eps", "dropout")}
    return dataclasses.replace(c, **same)


def load_hf_encoder(model: TextClassifier, folder: Path) -> str:
    """Copy the Hugging Face BERT in `folder` into the classifier's encoder, built with its architecture."""
    check_transformer(model.config)
    _check_architecture(model.config.bert(), config_from_hf(hf_config(folder)), str(folder))
    return load_hf_weights(model.encoder, folder)
