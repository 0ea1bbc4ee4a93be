"""A BERT-style bidirectional encoder (Devlin et al., 2019) from tinyformer's own layers.

Token + learned position + segment embeddings, summed and LayerNorm-ed, then
`n_layer` Post-LayerNorm self-attention blocks with no causal mask. With
`positions="rope"` (RoFormer, Su et al., 2021) there is no position table:
queries and keys are rotated by their position instead, so attention scores see
relative offsets from the first step. Trained from scratch on a small corpus, the
learned table stays unused for thousands of steps (the model predicts from a bag
of words); with RoPE the masked-LM loss falls from the start. There is no
pooler: `BertEncoder` returns one vector per token (`EncoderOutput`), and heads
wrap it. `BertForMaskedLM` is the pretraining model: the encoder plus BERT's
masked-LM head (dense, GELU, LayerNorm, then a decoder to the vocabulary whose
weight is the input embedding itself, tied, with its own bias). Given labels, it
runs the head on the chosen positions only, as the original BERT code does
(`gather_indexes`): the loss needs ~15% of the rows, and the V-wide decoder and
its softmax are the costliest part of a small model's step.

Loading Hugging Face BERT checkpoints into these classes is `tinyformer.models.hf_bert`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention import masks
from tinyformer.attention.dropout import Dropout
from tinyformer.attention.multihead import BACKENDS, KINDS
from tinyformer.attention.spec import BlockSpec
from tinyformer.config import check_fields
from tinyformer.data.tokenizers import IGNORE
from tinyformer.errors import UserError
from tinyformer.layers.blocks import TransformerBlock
from tinyformer.layers.embeddings import add_token_and_position_tables, tokens_and_learned_positions
from tinyformer.layers.init import normal_init
from tinyformer.models.labelled import LabelledModel
from tinyformer.models.outputs import AttentionPart, EncoderOutput, MaskedLMOutput

BERT_POSITIONS = ("learned", "rope")


@dataclass
class BertConfig:
    vocab_size: int = 30522  # tokens in the WordPiece vocabulary; 0 = take it from the tokenizer
    block_size: int = 512  # longest input (rows of the learned position table)
    type_vocab_size: int = 2  # segments (sentence A / sentence B)
    n_layer: int = 12  # Transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # model width D
    d_ff: int = 3072  # feed-forward width
    dropout: float = 0.1  # on embeddings and on each residual branch
    attn_dropout: float = 0.1  # on attention weights
    layer_norm_eps: float = 1e-12  # epsilon of every LayerNorm (BERT uses 1e-12)
    backend: str = "auto"  # attention backend: "auto" (the faster here, measured per run), "sdpa" or "manual"
    positions: str = "learned"  # "learned" (BERT's table) or "rope" (rotary, RoFormer)
    attention: str = "softmax"  # "softmax" or "linear" (elu+1 feature map; no weights, attn_dropout unused)
    norm_first = False  # BERT is Post-LayerNorm (a constant of the family, not a field: what BlockSpec reads)

    @property
    def norm_eps(self) -> float:  # BlockSpec's name for it
        return self.layer_norm_eps

    def __post_init__(self) -> None:
        check_fields(
            self,
            "model",
            positive=(
                "block_size",
                "type_vocab_size",
                "n_layer",
                "n_head",
                "n_embd",
                "d_ff",
                "layer_norm_eps",
            ),
            fractions=("dropout", "attn_dropout"),
            choices={"backend": BACKENDS, "positions": BERT_POSITIONS, "attention": KINDS},
            divisible=("n_embd", "n_head"),
        )
        if self.attention == "linear" and self.positions == "rope":
            raise UserError("model.attention=linear does not take rotary positions; use model.positions=learned")
        if self.positions == "rope" and (self.n_embd // self.n_head) % 2:
            raise UserError(
                f"model.positions=rope needs an even head width; n_embd/n_head = {self.n_embd // self.n_head}"
            )


class BertEncoder(nn.Module):
    attention_names = ("self",)  # what `attention_parts` returns, for the views

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = self.config = config
        add_token_and_position_tables(self, c)
        self.seg_emb = nn.Embedding(c.type_vocab_size, c.n_embd)
        self.ln_emb = nn.LayerNorm(c.n_embd, eps=c.layer_norm_eps)
        self.drop = Dropout(c.dropout)
        self.blocks = nn.ModuleList(TransformerBlock(BlockSpec.of(c)) for _ in range(c.n_layer))
        self.apply(normal_init)  # GPT-2 / BERT: N(0, 0.02) weights, zero biases

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, T), token_type_ids (B, T) or None (= all segment 0) -> (B, T, D)."""
        B, T = input_ids.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.config.block_size}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # (B, T)
        x = tokens_and_learned_positions(self, input_ids) + self.seg_emb(token_type_ids)  # (B, T, D)
        return self.drop(self.ln_emb(x))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> EncoderOutput:
        """input_ids (B, T); attention_mask (B, T) Hugging Face style, 1 = real token, 0 = padding.

        Padding keys get attention weight 0, so a sentence's outputs do not depend
        on how much padding follows it. Outputs at padding positions are meaningless.
        """
        mask = None if attention_mask is None else masks.from_hf_attention_mask(attention_mask)  # (B, 1, 1, T)
        x = self.embed(input_ids, token_type_ids)  # (B, T, D)
        attentions = []
        for block in self.blocks:
            x, w = block(x, mask=mask, need_weights=need_weights, rope=self.rope)
            attentions.append(w)
        return EncoderOutput(x, attentions if need_weights else None)

    def attention_parts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[AttentionPart]:
        """input_ids, attention_mask (B, T) -> the bidirectional self-attention of every block, for the views."""
        if input_ids.size(1) > self.config.block_size:
            raise UserError(
                f"the text has {input_ids.size(1)} tokens, more than the model's maximum {self.config.block_size}"
            )
        out = self(input_ids, attention_mask, need_weights=True)
        return [AttentionPart("self", "self", out.attentions, input_ids, input_ids)]


class BertForMaskedLM(LabelledModel):
    """`BertEncoder` + the masked-LM head; the loss counts only positions whose label is not `IGNORE`.

    Without labels: logits (B, T, V) at every position. With labels (B, T), IGNORE where unchosen: a
    `MaskedLMOutput`, the loss and the logits of the chosen positions only.
    """

    attention_names = ("self",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertEncoder(config)
        self.dense = nn.Linear(config.n_embd, config.n_embd)
        self.ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # the decoder's bias; its weight is tok_emb's
        normal_init(self.dense)

    def features(self, input_ids, attention_mask, need_weights):
        enc = self.bert(input_ids, attention_mask, need_weights=need_weights)
        return enc.last_hidden_state, enc.attentions  # (B, T, D)

    def scored(self, h: torch.Tensor, labels: torch.Tensor, attentions) -> MaskedLMOutput:
        chosen = labels != IGNORE  # (B, T)
        logits = self.head(h[chosen])  # (N, D) -> (N, V)
        target = labels[chosen]  # (N,)
        loss = F.cross_entropy(logits, target, reduction="sum") / chosen.sum().clamp(min=1)  # nothing chosen: 0
        return MaskedLMOutput(loss, logits, target, attentions)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., D) -> logits (..., V): dense, GELU, LayerNorm, decoder tied to the input embedding."""
        h = self.ln(F.gelu(self.dense(hidden)))  # (..., D)
        return F.linear(h, self.bert.tok_emb.weight, self.bias)  # (..., V)

    def attention_parts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[AttentionPart]:
        return self.bert.attention_parts(input_ids, attention_mask)
