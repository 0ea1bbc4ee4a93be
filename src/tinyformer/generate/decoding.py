"""Greedy decoding and beam search for an encoder-decoder (Sutskever et al., 2014; Wu et al., 2016, "GNMT").

Both run the encoder once per input, then extend the target one token at a time. They use only what the
`EncoderDecoder` protocol declares (`tinyformer.models.protocols`: `encode`, `decode`, `new_cache` and
`config.block_size`), so any model with that API works (`Seq2SeqTransformer`, an `nn.Transformer` baseline). Where
`new_cache` gives a cache (`Seq2SeqTransformer`), both run only the new token each step (`_Steps`), from a
`DecoderCache` of the earlier steps' keys/values and of the memory's cross-attention projection: the step costs
O(1) projections instead of O(t), and the memory is projected once instead of at every step. Beam search reorders
the cache's rows after every step, so that each surviving beam continues from its parent's keys/values.
`cache=False` (and a model whose `new_cache` gives None) re-runs the whole prefix every step instead; both ways
give the same tokens.

Output format, shared by both: (B, L) generated ids WITHOUT the leading BOS, each row's EOS included and `pad_id`
after it; L is the longest row. A row that never produces EOS is cut at `max_new` tokens (default block_size - 1).

Beam search keeps K = `beam` alive hypotheses per row, batched over rows and beams as (B*K, t). Each step it
ranks a row's K*V one-token extensions by summed log-probability and takes the best 2K: an EOS ranked among the
first K finishes a hypothesis; the best K non-EOS extensions stay alive. Finished hypotheses are compared by the
GNMT length-normalised score logp / lp(n), lp(n) = ((5 + n) / 6) ** alpha, n = generated tokens including EOS
(alpha = 0: raw summed log-probability). A row stops once it holds K finished hypotheses and its best one beats every
alive beam at the alive beams' length (so early, unlikely EOS hypotheses that happened to rank among the first K
do not end the search while a far likelier beam is alive), or once no alive beam can beat its best one even at
max_new (exact for alpha >= 0: a log-probability only falls, and lp is largest at max_new); rows still running
at max_new also offer their alive beams. With beam = 1 this is greedy decoding, token for token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tinyformer.device import inference
from tinyformer.models.outputs import EncodedSource

NEG_INF = float("-inf")


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha (Wu et al., 2016, eq. 14); 1 when alpha = 0."""
    return ((5 + length) / 6) ** alpha


def _budget(model: nn.Module, max_new: int | None) -> int:
    """How many tokens to generate at most: `max_new`, or block_size - 1 (BOS + output fit in block_size)."""
    block = model.config.block_size
    steps = block - 1 if max_new is None else max_new
    if not 0 <= steps <= block:
        raise ValueError(f"max_new={max_new} must be in [0, block_size={block}]")
    return steps


class _Steps:
    """Next-token logits for N prefixes (N, t) that grow by one token per call, decoded against `enc` (N rows):
    the newest token only, from a `DecoderCache` of the earlier ones (`cache`, and a model that caches),
    or the whole prefix again. `reorder(index)` makes row i continue from old row index[i] (beam search)."""

    def __init__(self, model: nn.Module, enc: EncodedSource, capacity: int, cache: bool) -> None:
        self.model, self.enc = model, enc
        self.cache = model.new_cache(enc, capacity) if cache else None  # None too for a model that cannot cache

    def logits(self, seq: torch.Tensor) -> torch.Tensor:
        """seq (N, t), BOS first -> logits (N, V) of the token after it."""
        memory, src_valid = self.enc.memory, self.enc.src_valid
        if self.cache is None:  # the whole prefix again
            return self.model.decode(seq, memory, src_valid).logits[:, -1]  # (N, t, V) -> (N, V)
        new = seq[:, -1:]  # (N, 1): the newest token, at position t - 1
        out = self.model.decode(new, memory, src_valid, cache=self.cache, start=seq.size(1) - 1)
        return out.logits[:, -1]  # (N, 1, V) -> (N, V)

    def reorder(self, index: torch.Tensor) -> None:
        """index (N,): the row each row continues from. Uncached decoding re-runs the prefixes: nothing to do."""
        if self.cache is not None:
            self.cache.reorder(index, cross=False)  # beams move within their row: same source, same cross K/V


def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_new: int | None = None,
    cache: bool = True,
) -> torch.Tensor:
    """src (B, S) -> (B, L): the argmax token at every step, all rows together, until every row has emitted EOS.
    `cache=False` re-runs the whole prefix every step (the same tokens, slower)."""
    steps = _budget(model, max_new)
    with inference(model):
        step = _Steps(model, model.encode(src), steps + 1, cache)  # capacity: BOS + `steps` tokens
        seq = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1): BOS
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (B,): EOS already emitted
        while seq.size(1) <= steps and not bool(done.all()):
            nxt = step.logits(seq).argmax(-1).masked_fill(done, pad_id)  # (B,): finished rows get padding
            seq = torch.cat([seq, nxt[:, None]], dim=1)  # (B, t + 1)
            done |= nxt == eos_id
    return seq[:, 1:]  # (B, L): without BOS


@dataclass
class _Finished:
    """Per row: the best hypothesis offered so far and how many hypotheses have finished with EOS."""

    score: torch.Tensor  # (B,) length-normalised log-probability of the best hypothesis; -inf = none yet
    tokens: torch.Tensor  # (B, N) its tokens (no BOS), `pad_id` after its end
    length: torch.Tensor  # (B,) its length
    count: torch.Tensor  # (B,) hypotheses that ended in EOS so far (the best or not)

    @classmethod
    def empty(cls, batch: int, width: int, pad_id: int, device: torch.device) -> _Finished:
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        tokens = torch.full((batch, width), pad_id, dtype=torch.long, device=device)
        return cls(torch.full((batch,), NEG_INF, device=device), tokens, zeros, zeros.clone())

    def offer(self, tokens: torch.Tensor, score: torch.Tensor) -> None:
        """tokens (B, C, n), normalised score (B, C) (-inf = not a candidate): keep each row's best if better."""
        best, j = score.max(dim=1)  # (B,), (B,)
        better = best > self.score  # (B,)
        n = tokens.size(2)
        pick = tokens[torch.arange(tokens.size(0), device=tokens.device), j]  # (B, n)
        self.tokens[better, :n] = pick[better]  # a later hypothesis is never shorter: overwrites the whole old one
        self.length[better] = n
        self.score = torch.where(better, best, self.score)

    def result(self) -> torch.Tensor:
        """(B, L): the best hypotheses, cut to the longest."""
        return self.tokens[:, : int(self.length.max()) if self.length.numel() else 0]


def _expand(step: _Steps, seqs: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """seqs (B, K, t), scores (B, K) -> the 2K best one-token extensions per row: scores (B, 2K), best first,
    sequences (B, 2K, t + 1), and the beam (B, 2K) in [0, K) each one extends."""
    B, K, t = seqs.shape
    logits = step.logits(seqs.flatten(0, 1))  # (B*K, t) -> (B*K, V)
    V = logits.size(-1)
    logp = logits.float().log_softmax(-1).view(B, K, V)  # (B*K, V) -> (B, K, V)
    top, flat = (scores[..., None] + logp).view(B, K * V).topk(2 * K, dim=1)  # (B, K*V) -> (B, 2K)
    beam = flat // V  # (B, 2K)
    parent = seqs.gather(1, beam[..., None].expand(-1, -1, t))  # (B, 2K, t): the beams they extend
    return top, torch.cat([parent, (flat % V)[..., None]], dim=2), beam  # ..., (B, 2K, t + 1), (B, 2K)


def _beam_step(
    step: _Steps,
    beams: tuple[torch.Tensor, torch.Tensor],
    pool: _Finished,
    done: torch.Tensor,
    *,
    eos_id: int,
    alpha: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """beams = (seqs (B, K, t) with BOS, scores (B, K)): move top-K-ranked EOS extensions into `pool`,
    return the best K non-EOS extensions as the new beams (B, K, t + 1), (B, K), and move `step`'s cache
    rows to match: each new beam continues from its parent's."""
    seqs, scores = beams
    B, K, n = seqs.shape  # n = generated tokens after this step (BOS is the +1)
    top, cands, beam = _expand(step, seqs, scores)  # (B, 2K), (B, 2K, n + 1), (B, 2K)
    rank = torch.arange(2 * K, device=top.device)  # (2K,)
    is_eos = cands[:, :, -1] == eos_id  # (B, 2K)
    ends = is_eos & (rank < K) & top.isfinite() & ~done[:, None]  # (B, 2K): hypotheses finishing now
    pool.offer(cands[:, :, 1:], (top / length_penalty(n, alpha)).masked_fill(~ends, NEG_INF))
    pool.count += ends.sum(dim=1)
    keep = (rank + 2 * K * is_eos).argsort(dim=1)[:, :K]  # (B, K): non-EOS first, each group in rank order
    row = K * torch.arange(B, device=top.device)[:, None]  # (B, 1): each row's first beam in the (B*K) batch
    step.reorder((row + beam.gather(1, keep)).flatten())  # (B, K) -> (B*K,): each survivor's parent row
    return cands.gather(1, keep[..., None].expand(-1, -1, n + 1)), top.gather(1, keep)


def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    *,
    beam: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_new: int | None = None,
    alpha: float = 0.6,
    cache: bool = True,
) -> torch.Tensor:
    """src (B, S) -> (B, L): per row, the best hypothesis by GNMT length-normalised log-probability.
    `cache=False` re-runs every beam's whole prefix every step (the same tokens, slower)."""
    if beam < 1 or alpha < 0:
        raise ValueError(f"beam={beam} must be >= 1 and alpha={alpha} must be >= 0")
    steps, (B, K), dev = _budget(model, max_new), (src.size(0), beam), src.device
    with inference(model):
        e = model.encode(src)
        enc = EncodedSource(e.memory.repeat_interleave(K, dim=0), e.src_valid.repeat_interleave(K, dim=0))
        step = _Steps(model, enc, steps + 1, cache)  # rows (B*K, S, D), (B*K, S): row b's K beams side by side
        seqs = torch.full((B, K, 1), bos_id, dtype=torch.long, device=dev)  # (B, K, 1): BOS
        scores = torch.full((B, K), NEG_INF, device=dev)  # (B, K): summed log-probabilities
        scores[:, 0] = 0.0  # one live beam at first, so the K beams do not start as K copies
        pool, done = _Finished.empty(B, steps, pad_id, dev), torch.zeros(B, dtype=torch.bool, device=dev)
        while seqs.size(2) <= steps and not bool(done.all()):
            seqs, scores = _beam_step(step, (seqs, scores), pool, done, eos_id=eos_id, alpha=alpha)
            n = seqs.size(2) - 1  # tokens the alive beams have generated
            enough = (pool.count >= K) & (pool.score >= scores[:, 0] / length_penalty(n, alpha))  # none wins now
            done |= enough | (pool.score >= scores[:, 0] / length_penalty(steps, alpha))  # none can ever win
        alive = (scores / length_penalty(seqs.size(2) - 1, alpha)).masked_fill(done[:, None], NEG_INF)  # (B, K)
        pool.offer(seqs[:, :, 1:], alive)  # rows cut at max_new: their alive beams compete too
    return pool.result()
