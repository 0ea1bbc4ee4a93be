"""A baseline: the same encoder-decoder built on `torch.nn.Transformer` (the only place
tinyformer uses it), with the same embeddings, head, initialisation and encode/decode
API as `Seq2SeqTransformer`, so tasks, decoding and experiments run it unchanged.

nn.Transformer's masks use the opposite polarity (True = "ignore"); they are
converted here, at this boundary, from tinyformer's True = "may attend" masks.
It returns no attention weights, and has no `new_cache`: decoding re-runs the prefix every step.
`model.ffn` picks nn.Transformer's activation ("gelu" or "relu"); `model.init="default"` keeps
nn.Transformer's own initialisation (it draws Xavier-uniform for every weight matrix itself, fused
in-projections whole) and the head's PyTorch default.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from tinyformer.attention import masks
from tinyformer.models.outputs import EncodedSource, Seq2SeqOutput
from tinyformer.models.seq2seq import Embedder, Seq2SeqConfig, _check_ids, seq2seq_loss
from tinyformer.models.seq2seq_parts import init_weights


class TorchSeq2Seq(nn.Module):
    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        c = self.config = config
        self.embed = Embedder(c)
        self.tgt_embed = None if c.share_embeddings else Embedder(c)  # the chapter: one per stack
        with warnings.catch_warnings():  # torch notes that Pre-Norm layers skip its nested-tensor fast path: known
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
            self.core = nn.Transformer(
                c.n_embd,
                c.n_head,
                c.n_encoder_layers,
                c.n_decoder_layers,
                c.d_ff,
                c.dropout,
                activation=c.ffn,  # "gelu" or "relu" (Seq2SeqConfig allows no other with impl=torch)
                batch_first=True,
                norm_first=c.norm_first,
            )
        self.head = nn.Linear(c.n_embd, c.vocab_size)
        init_weights(self, c.embedding_init, c.init)

    def encode(self, src: torch.Tensor, *, need_weights: bool = False) -> EncodedSource:
        _check_ids("source", src, self.config.block_size)
        src_valid = src != self.config.pad_id  # (B, S)
        memory = self.core.encoder(self.embed(src), src_key_padding_mask=~src_valid)  # True = ignore, here only
        return EncodedSource(memory, src_valid, None)

    def new_cache(self, enc: EncodedSource, capacity: int | None = None) -> None:
        """nn.Transformer's decoder cannot extend a cache: decoding runs the whole prefix at each step."""
        return None

    def decode(
        self, tgt_in, memory, src_valid, *, need_weights: bool = False, cache: None = None, start: int = 0
    ) -> Seq2SeqOutput:
        if cache is not None or start:
            raise ValueError("model.impl=torch decodes whole prefixes: it takes no cache and no start")
        _check_ids("target", tgt_in, self.config.block_size)
        T = tgt_in.size(1)
        future = ~masks.causal(T, device=tgt_in.device)  # (T, T), True = may NOT attend (nn.Transformer's polarity)
        x = self.core.decoder(
            (self.tgt_embed or self.embed)(tgt_in),
            memory,
            tgt_mask=future,
            tgt_key_padding_mask=tgt_in == self.config.pad_id,
            memory_key_padding_mask=~src_valid,
        )
        return Seq2SeqOutput(self.head(x))  # (B, T, V)

    def forward(self, src, tgt_in, labels=None, *, need_weights: bool = False) -> Seq2SeqOutput:
        enc = self.encode(src)
        out = self.decode(tgt_in, enc.memory, enc.src_valid)
        if labels is not None:
            out.loss = seq2seq_loss(out.logits, labels, self.config.pad_id)
        return out
