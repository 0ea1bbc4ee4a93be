"""An encoder-decoder Transformer (Vaswani et al., 2017, "Attention Is All You Need").

A token embedding per stack (the chapter's; or one shared by source and target,
`share_embeddings`), scaled by sqrt(D), plus fixed sinusoidal positions; an encoder
stack (self-attention blocks) and a decoder stack (`DecoderBlock`: masked
self-attention, cross-attention, feed-forward), each Pre-LayerNorm with a final
LayerNorm by default (Xiong et al., 2020), or the original Post-LayerNorm; an
output projection to vocabulary logits.

`encode()` and `decode()` are separate so that inference runs the encoder once
per input and decodes from its memory. For token-by-token generation,
`new_cache(encoded)` holds what earlier steps computed (`DecoderCache`): each
decoder layer's self-attention keys/values and its cross-attention projection of
the memory, so that `decode(new_tokens, ..., cache=, start=)` runs only the new
tokens and gives the logits a full decode of the whole prefix gives. The three
masks, all built with `tinyformer.attention.masks` (True = may attend):

- encoder self-attention: source padding                        (B, 1, 1, S)
- decoder self-attention: causal AND target padding             (B, 1, T, T)
- cross-attention:        source padding                        (B, 1, 1, S)

`build_seq2seq(config)` assembles the model from its parts and initialises it
(`seq2seq_parts.init_weights`): Xavier-uniform Linears with zero biases, token embeddings N(0, D^-1/2) with
the padding row zero (it gets no gradient either).
The chapter's switches each change one of these choices: `scale_embeddings`, `positions`, `norm_first`,
`ffn` (`"relu"` is the paper's), `init` (Xavier or PyTorch's default Linears), `embedding_init`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.attention import masks
from tinyformer.attention.dropout import Dropout
from tinyformer.attention.kv_cache import KVCache
from tinyformer.attention.multihead import BACKENDS
from tinyformer.attention.positions import sinusoidal_table
from tinyformer.attention.spec import BlockSpec
from tinyformer.config import check_fields
from tinyformer.errors import UserError
from tinyformer.layers.blocks import DecoderBlock, TransformerBlock, make_norm
from tinyformer.layers.feedforward import FFN_KINDS
from tinyformer.models.outputs import AttentionPart, EncodedSource, Seq2SeqOutput
from tinyformer.models.seq2seq_parts import EMBEDDING_INITS, INITS, DecoderCache, init_weights

POSITIONS = ("sinusoidal", "none")
IMPLS = ("tinyformer", "torch")
TORCH_FFNS = ("gelu", "relu")  # the activations nn.Transformer's feed-forward takes by name


@dataclass
class Seq2SeqConfig:
    vocab_size: int = 13  # tokens of source and target, one vocabulary (reversal: PAD 0, BOS 1, EOS 2, digits 3-12)
    pad_id: int = 0  # padding id: hidden from attention as a key and ignored by the loss
    block_size: int = 64  # longest source or target sequence (rows of the position table)
    n_embd: int = 128  # model width D
    n_head: int = 4  # attention heads per attention layer
    d_ff: int = 512  # feed-forward width
    n_encoder_layers: int = 2  # encoder blocks
    n_decoder_layers: int = 2  # decoder blocks
    dropout: float = 0.1  # on the embeddings and on each residual branch
    attn_dropout: float = 0.1  # on the attention weights, as in the Annotated Transformer and nn.Transformer
    norm_first: bool = True  # Pre-LayerNorm blocks + a final LayerNorm per stack; False = original Post-LayerNorm
    ffn: str = "gelu"  # feed-forward: "gelu", "gelu_tanh", "relu" (the paper's) or "swiglu"
    positions: str = "sinusoidal"  # "sinusoidal" (fixed) or "none" (an ablation: no order information)
    embedding_init: str = "normal"  # "normal" = N(0, D^-1/2); "default" = PyTorch's N(0, 1) (an ablation)
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(D) (the paper); False = add them unscaled
    share_embeddings: bool = True  # one token embedding for source and target; False = one per stack (the chapter)
    init: str = "xavier"  # every Linear: "xavier" (uniform, zero bias) or "default" (PyTorch's kaiming-uniform)
    backend: str = "auto"  # attention backend: "auto" (the faster here, measured per run), "sdpa" or "manual"
    impl: str = "tinyformer"  # "tinyformer" (this file) or "torch" (torch.nn.Transformer, a baseline)

    def __post_init__(self) -> None:
        check_fields(
            self,
            "model",
            positive=("vocab_size", "block_size", "n_embd", "n_head", "d_ff", "n_encoder_layers", "n_decoder_layers"),
            fractions=("dropout", "attn_dropout"),
            choices={
                "ffn": FFN_KINDS,
                "positions": POSITIONS,
                "embedding_init": EMBEDDING_INITS,
                "init": INITS,
                "backend": BACKENDS,
                "impl": IMPLS,
            },
            divisible=("n_embd", "n_head"),
        )
        if not 0 <= self.pad_id < self.vocab_size:
            raise UserError(f"model.pad_id={self.pad_id} must be in [0, model.vocab_size={self.vocab_size})")
        if self.positions == "sinusoidal" and self.n_embd % 2:
            raise UserError(f"model.n_embd={self.n_embd} must be even for sinusoidal positions")
        if self.impl == "torch" and self.ffn not in TORCH_FFNS:
            raise UserError(f"model.ffn={self.ffn!r} is not available with model.impl=torch: {', '.join(TORCH_FFNS)}")


class Embedder(nn.Module):
    """ids (B, L) at positions [start, start + L) -> Dropout(Embedding(ids) * sqrt(D) + PE[start : start + L])
    (B, L, D); one per stack, or one for both (`share_embeddings`). Without `scale_embeddings` the factor is 1."""

    def __init__(self, c: Seq2SeqConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(c.vocab_size, c.n_embd, padding_idx=c.pad_id)
        self.scale = math.sqrt(c.n_embd) if c.scale_embeddings else 1.0
        pe = sinusoidal_table(c.block_size, c.n_embd) if c.positions == "sinusoidal" else None
        self.register_buffer("pe", pe, persistent=False)  # fixed, rebuilt from the config: not in the state_dict
        self.drop = Dropout(c.dropout)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        x = self.tok(ids) * self.scale  # (B, L, D)
        if self.pe is not None:
            x = x + self.pe[start : start + ids.size(1)]  # (L, D) broadcast over B
        return self.drop(x)


class Encoder(nn.Module):
    """Self-attention blocks, then `norm` (a LayerNorm for pre-norm blocks, Identity for post-norm ones)."""

    def __init__(self, blocks: list[nn.Module], norm: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """x (B, S, D), mask (B, 1, 1, S) -> (memory (B, S, D), per layer weights (B, H, S, S) or None)."""
        attentions = []
        for block in self.blocks:
            x, w = block(x, mask=mask, need_weights=need_weights)
            attentions.append(w)
        return self.norm(x), attentions


class Decoder(nn.Module):
    """`DecoderBlock`s over the encoder memory, then `norm` (LayerNorm for pre-norm, Identity for post-norm)."""

    def __init__(self, blocks: list[DecoderBlock], norm: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor,
        cross_mask: torch.Tensor,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
        start: int = 0,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None], list[torch.Tensor | None]]:
        """x (B, T, D), memory (B, S, D) -> (x (B, T, D), self weights (B, H, T, T), cross weights (B, H, T, S)).

        With `cache`, x holds positions [start, start + T) and the self weights are (B, H, T, start + T).
        """
        self_weights, cross_weights = [], []
        for i, block in enumerate(self.blocks):
            kw = dict(cache=cache.self_kv[i], cross_kv=cache.cross_kv[i], start=start) if cache is not None else {}
            x, sw, cw = block(x, memory, self_mask=self_mask, cross_mask=cross_mask, need_weights=need_weights, **kw)
            self_weights.append(sw)
            cross_weights.append(cw)
        return self.norm(x), self_weights, cross_weights


def seq2seq_loss(logits: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mean cross-entropy of logits (B, T, V) against labels (B, T) over the positions whose label is not `pad_id`."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=pad_id)  # (B*T, V) vs (B*T,)


def _check_ids(what: str, ids: torch.Tensor, block_size: int) -> None:
    if ids.dim() != 2:
        raise ValueError(f"{what} ids must have shape (B, L), got {tuple(ids.shape)}")
    if ids.size(1) > block_size:
        raise ValueError(f"{what} length {ids.size(1)} exceeds block_size={block_size}")


class Seq2SeqTransformer(nn.Module):
    """embed -> encoder -> memory; tgt_embed -> decoder(memory) -> head. Build it with `build_seq2seq(config)`.

    `tgt_embed` is None when source and target share `embed` (`share_embeddings`)."""

    attention_names = ("encoder", "decoder", "cross")  # what `attention_parts` returns, for the views

    def __init__(
        self,
        config: Seq2SeqConfig,
        embed: Embedder,
        encoder: Encoder,
        decoder: Decoder,
        head: nn.Linear,
        tgt_embed: Embedder | None = None,
    ):
        super().__init__()
        self.config = config
        self.embed, self.encoder, self.decoder, self.head = embed, encoder, decoder, head
        self.tgt_embed = tgt_embed

    def encode(self, src: torch.Tensor, *, need_weights: bool = False) -> EncodedSource:
        """src (B, S) token ids padded with `pad_id` -> memory (B, S, D) and src_valid (B, S), computed once."""
        _check_ids("source", src, self.config.block_size)
        src_valid = src != self.config.pad_id  # (B, S)
        mask = masks.from_key_valid(src_valid)  # (B, 1, 1, S): no query attends to source padding
        memory, attentions = self.encoder(self.embed(src), mask, need_weights)
        return EncodedSource(memory, src_valid, attentions if need_weights else None)

    def new_cache(self, enc: EncodedSource, capacity: int | None = None) -> DecoderCache:
        """An empty `DecoderCache` for decoding from `enc` up to `capacity` target positions (default block_size)."""
        c, B = self.config, enc.memory.size(0)
        C, Dh, p = capacity or c.block_size, c.n_embd // c.n_head, enc.memory
        return DecoderCache(
            [KVCache(B, c.n_head, C, Dh, device=p.device, dtype=p.dtype) for _ in self.decoder.blocks],
            [block.cross_attn.project_context(enc.memory) for block in self.decoder.blocks],  # (B, H, S, Dh) x 2
            torch.zeros(B, C, dtype=torch.bool, device=p.device),
        )

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_valid: torch.Tensor,
        *,
        need_weights: bool = False,
        cache: DecoderCache | None = None,
        start: int = 0,
    ) -> Seq2SeqOutput:
        """tgt_in (B, T) (BOS first, padded with `pad_id`), memory (B, S, D), src_valid (B, S) -> logits (B, T, V).

        With `cache` (from `new_cache`), tgt_in holds the target positions [start, start + T) only: earlier
        positions come from the cache, which this call extends.
        """
        _check_ids("target", tgt_in, self.config.block_size)
        if start < 0 or start + tgt_in.size(1) > self.config.block_size:
            raise ValueError(
                f"target positions [{start}, {start + tgt_in.size(1)}) exceed block_size={self.config.block_size}"
            )
        if memory.shape[:2] != src_valid.shape or memory.size(0) != tgt_in.size(0):
            raise ValueError(
                f"shapes disagree: tgt_in {tuple(tgt_in.shape)}, memory {tuple(memory.shape)}, "
                f"src_valid {tuple(src_valid.shape)}; expected (B, T), (B, S, D), (B, S)"
            )
        self_mask = self._target_mask(tgt_in, cache, start)  # (B, 1, T, start + T): not future, not padding
        cross_mask = masks.from_key_valid(src_valid)  # (B, 1, 1, S): not source padding
        x = (self.tgt_embed or self.embed)(tgt_in, start)  # (B, T, D)
        x, self_w, cross_w = self.decoder(x, memory, self_mask, cross_mask, need_weights, cache, start)
        logits = self.head(x)  # (B, T, V)
        if not need_weights:
            return Seq2SeqOutput(logits)
        return Seq2SeqOutput(logits, decoder_attentions=self_w, cross_attentions=cross_w)

    def _target_mask(self, tgt_in: torch.Tensor, cache: DecoderCache | None, start: int) -> torch.Tensor:
        """Decoder self-attention mask (B, 1, T, start + T): causal AND real target tokens (cached ones too)."""
        T = tgt_in.size(1)
        tgt_valid = tgt_in != self.config.pad_id  # (B, T)
        if cache is None:
            if start:
                raise ValueError(f"start={start} without a cache: there is nothing before position {start}")
        else:
            cache.tgt_valid[:, start : start + T] = tgt_valid
            tgt_valid = cache.tgt_valid[:, : start + T]  # (B, start + T)
        causal = masks.causal(T, start + T, device=tgt_in.device)  # (T, start + T)
        return masks.combine(causal, masks.from_key_valid(tgt_valid))

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        labels: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> Seq2SeqOutput:
        """src (B, S), tgt_in (B, T), labels (B, T) (tgt_in shifted left; `pad_id` = ignored) -> logits and loss."""
        enc = self.encode(src, need_weights=need_weights)
        out = self.decode(tgt_in, enc.memory, enc.src_valid, need_weights=need_weights)
        out.encoder_attentions = enc.attentions
        if labels is not None:
            if labels.shape != tgt_in.shape:
                raise ValueError(f"labels {tuple(labels.shape)} must have the shape of tgt_in {tuple(tgt_in.shape)}")
            out.loss = seq2seq_loss(out.logits, labels, self.config.pad_id)
        return out

    def attention_parts(self, src: torch.Tensor, tgt_in: torch.Tensor) -> list[AttentionPart]:
        """src (B, S), tgt_in (B, T) -> encoder self-, decoder self- and cross-attention of every layer."""
        out = self(src, tgt_in, need_weights=True)
        return [
            AttentionPart("encoder", "self", out.encoder_attentions, src, src),
            AttentionPart("decoder", "causal", out.decoder_attentions, tgt_in, tgt_in),
            AttentionPart("cross", "cross", out.cross_attentions, tgt_in, src),
        ]


def build_seq2seq(config: Seq2SeqConfig) -> Seq2SeqTransformer:
    """Assemble embedder, encoder, decoder and output projection from `config`, then initialise them."""
    c, spec = config, BlockSpec.of(config)

    def final_norm() -> nn.Module:  # post-norm blocks already end in a LayerNorm
        return make_norm(spec) if c.norm_first else nn.Identity()

    embed = Embedder(c)
    blocks = [TransformerBlock(spec) for _ in range(c.n_encoder_layers)]
    encoder = Encoder(blocks, final_norm())
    tgt_embed = None if c.share_embeddings else Embedder(c)
    decoder = Decoder(
        [DecoderBlock(spec) for _ in range(c.n_decoder_layers)],
        final_norm(),
    )
    head = nn.Linear(c.n_embd, c.vocab_size)
    model = Seq2SeqTransformer(c, embed, encoder, decoder, head, tgt_embed)
    init_weights(model, c.embedding_init, c.init)
    return model
