"""Two parts of the encoder-decoder that `models/seq2seq.py` assembles: its decoding cache and its initialisation.

- `DecoderCache`: what token-by-token decoding keeps between steps, and `reorder` for beam search, whose
  surviving beams continue from other beams' prefixes every step.
- `init_weights`: Xavier-uniform Linears with zero biases (Glorot & Bengio, 2010), as in the Annotated
  Transformer, or PyTorch's own defaults (an ablation); token embeddings N(0, D^-1/2) or PyTorch's N(0, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.multihead import MultiHeadAttention

INITS = ("xavier", "default")  # model.init: how every Linear starts
EMBEDDING_INITS = ("normal", "default")  # model.embedding_init: how the token embedding starts


@dataclass
class DecoderCache:
    """What token-by-token decoding keeps between steps (`Seq2SeqTransformer.new_cache`); C = capacity.

    Per decoder layer, the self-attention's keys/values so far (`KVCache`, (B, H, C, Dh)) and the
    cross-attention's keys/values of the encoder memory (B, H, S, Dh) each, projected once per source
    instead of once per generated token. `tgt_valid` (B, C) marks which cached target positions are
    real tokens, so padding fed to finished rows stays hidden as a key, as in a full decode.
    """

    self_kv: list[KVCache]
    cross_kv: list[tuple[torch.Tensor, torch.Tensor]]
    tgt_valid: torch.Tensor

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        """Row i of the cache becomes old row index[i], index (B,) (beam search: each survivor's parent beam).

        `cross=False` leaves the cross-attention keys/values alone: right, and cheaper, when every row moves
        to a row of the same source, as beams of one sentence do.
        """
        if index.shape != self.tgt_valid.shape[:1]:
            raise ValueError(
                f"index {tuple(index.shape)} must have one entry per cache row, ({self.tgt_valid.size(0)},)"
            )
        for kv in self.self_kv:
            n = kv.length  # only the filled positions [0, n) hold anything to move
            kv.k[:, :, :n] = kv.k[:, :, :n].index_select(0, index)  # (B, H, n, Dh), rows gathered (a copy)
            kv.v[:, :, :n] = kv.v[:, :, :n].index_select(0, index)  # (B, H, n, Dh)
        self.tgt_valid.copy_(self.tgt_valid.index_select(0, index))  # (B, C)
        if cross:
            self.cross_kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.cross_kv]


def _xavier(linear: nn.Linear, parts: int = 1) -> None:
    """Xavier-uniform on each of `parts` equal row blocks of the weight (one per fused projection), zero bias."""
    for w in linear.weight.chunk(parts, dim=0):  # views: (out / parts, in) each
        nn.init.xavier_uniform_(w)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


def init_weights(model: nn.Module, embedding_init: str = "normal", init: str = "xavier") -> None:
    """`init="xavier"`: Xavier-uniform Linears with zero biases; "default": every Linear keeps what its constructor
    drew (PyTorch's kaiming-uniform, |w| <= 1/sqrt(fan_in), and a uniform bias in the same bound). Token
    embeddings N(0, D^-1/2) unless `embedding_init="default"` (PyTorch's N(0, 1)).

    Under Xavier the fused q/k/v Linear (3D, D) (and the cross-attention's k/v, (2D, D)) gets one draw per
    projection, as if they were separate D x D Linears; one draw over the whole (3D, D) matrix would be sqrt(2)
    narrower. LayerNorms keep their weight 1 and bias 0.
    """
    for m in model.modules():
        if isinstance(m, nn.Linear) and init == "xavier":
            _xavier(m)
    for m in model.modules():
        if isinstance(m, MultiHeadAttention) and init == "xavier":
            fused = m.kv if m.cross else m.qkv
            _xavier(fused, parts=fused.out_features // fused.in_features)
        if isinstance(m, nn.Embedding) and embedding_init == "normal":
            nn.init.normal_(m.weight, std=m.embedding_dim**-0.5)
            if m.padding_idx is not None:  # the padding row stays zero, as nn.Embedding(padding_idx=...) makes it
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
