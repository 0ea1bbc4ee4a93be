"""Greedy decoding and beam search, on rigged models whose answers are known and on a real Seq2SeqTransformer;
cached decoding (a reordered DecoderCache in beam search) gives the very tokens uncached decoding gives."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.generate.decoding import beam_search, greedy_decode, length_penalty
from tinyformer.models.outputs import EncodedSource, Seq2SeqOutput
from tinyformer.models.seq2seq import Seq2SeqConfig, build_seq2seq

PAD, BOS, EOS = 0, 1, 2
V = 13  # PAD, BOS, EOS, digits 3-12
IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


class Rigged(nn.Module):
    """The encode/decode API of Seq2SeqTransformer; memory is the one-hot source. Counts calls, records eval mode."""

    def __init__(self, block_size: int = 20) -> None:
        super().__init__()
        self.config = Seq2SeqConfig(block_size=block_size)
        self.encode_calls, self.decode_calls, self.modes = 0, 0, set()

    def encode(self, src: torch.Tensor, *, need_weights: bool = False) -> EncodedSource:
        self.encode_calls += 1
        return EncodedSource(F.one_hot(src, V).float(), src != PAD)  # (B, S, V), (B, S)

    def new_cache(self, enc: EncodedSource, capacity: int | None = None) -> None:
        return None  # a model that cannot cache: every step decodes the whole prefix

    def decode(
        self, tgt_in, memory, src_valid, *, need_weights: bool = False, cache=None, start: int = 0
    ) -> Seq2SeqOutput:
        assert cache is None and start == 0
        self.decode_calls += 1
        self.modes.add((self.training, torch.is_grad_enabled()))
        return Seq2SeqOutput(self.logits(tgt_in, memory.argmax(-1), src_valid))


class Reverser(Rigged):
    """Next token after a prefix of length t (BOS included) is the source's t-th token from the end, then EOS."""

    def logits(self, tgt_in: torch.Tensor, src: torch.Tensor, src_valid: torch.Tensor) -> torch.Tensor:
        at = src_valid.sum(1, keepdim=True) - 1 - torch.arange(tgt_in.size(1))  # (B, T): source index to copy
        tok = torch.where(at >= 0, src.gather(1, at.clamp(min=0)), EOS)  # (B, T)
        return F.one_hot(tok, V).float() * 10  # (B, T, V)


class Table(Rigged):
    """Next-token probabilities looked up by (first source token, *generated prefix); `default` otherwise."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], default: dict[int, float]) -> None:
        super().__init__()
        self.table, self.default = table, default

    def logits(self, tgt_in: torch.Tensor, src: torch.Tensor, src_valid: torch.Tensor) -> torch.Tensor:
        out = torch.full((*tgt_in.shape, V), -30.0)  # (B, T, V): unlisted tokens are all but impossible
        for b in range(tgt_in.size(0)):
            for t in range(tgt_in.size(1)):
                key = (int(src[b, 0]), *tgt_in[b, 1 : t + 1].tolist())
                for tok, p in self.table.get(key, self.default).items():
                    out[b, t, tok] = math.log(p)
        return out


SOURCES = torch.tensor([[3, 4, 5, 0, 0], [7, 0, 0, 0, 0], [8, 9, 10, 11, 12]])
REVERSED = [[5, 4, 3, EOS, PAD, PAD], [7, EOS, PAD, PAD, PAD, PAD], [12, 11, 10, 9, 8, EOS]]


def test_greedy_reverses_pads_after_eos_and_stops_when_every_row_is_done():
    model = Reverser(block_size=20)
    out = greedy_decode(model, SOURCES, **IDS)
    assert out.tolist() == REVERSED
    assert model.decode_calls == 6  # the longest row needs 6 tokens; the budget was 19
    assert model.encode_calls == 1


def test_max_new_cuts_rows_that_have_not_finished():
    model = Reverser()
    assert greedy_decode(model, SOURCES, **IDS, max_new=2).tolist() == [[5, 4], [7, EOS], [12, 11]]
    assert model.decode_calls == 2
    assert beam_search(model, SOURCES, beam=3, **IDS, max_new=2).tolist() == [[5, 4], [7, EOS], [12, 11]]
    with pytest.raises(ValueError, match="max_new=21"):
        greedy_decode(model, SOURCES, **IDS, max_new=21)


def test_decoding_runs_in_eval_mode_without_grad_and_restores_the_training_flag():
    model = Reverser().train()
    greedy_decode(model, SOURCES, **IDS)
    beam_search(model, SOURCES, beam=2, **IDS)
    assert model.modes == {(False, False)}
    assert model.training


def test_beam_search_on_a_confident_model_returns_its_one_answer():
    model = Reverser()
    assert beam_search(model, SOURCES, beam=3, **IDS).tolist() == REVERSED
    assert model.encode_calls == 1
    assert model.decode_calls == 6  # rows stop when no alive beam can still win


A, B, W = 3, 4, 12


def trap(good: int, bad: int) -> dict[tuple[int, ...], dict[int, float]]:
    """`bad` is likelier first (0.6) but then spreads its mass; `good` (0.4) is then followed by EOS (0.99)."""
    return {
        (good,): {bad: 0.6, good: 0.4},
        (good, bad): {EOS: 0.2} | {d: 0.1 for d in range(5, 13)},
        (good, good): {EOS: 0.99, W: 0.01},
    }


def test_beam_search_finds_the_likelier_sequence_that_greedy_misses():
    model = Table(trap(A, B) | trap(B, A), default={W: 1.0})
    src = torch.tensor([[A, 0], [B, 5]])  # row 0: A is the good first token; row 1: B is
    assert greedy_decode(model, src, **IDS).tolist() == [[B, EOS], [A, EOS]]  # p = 0.6 * 0.2 = 0.12
    assert beam_search(model, src, beam=2, **IDS).tolist() == [[A, EOS], [B, EOS]]  # p = 0.4 * 0.99 = 0.396
    assert beam_search(model, src, beam=1, **IDS).tolist() == [[B, EOS], [A, EOS]]


def test_beam_search_stops_once_no_alive_beam_can_win():
    model = Table(trap(A, B) | trap(B, A), default={W: 1.0})  # 3 beams: 2 finish at step 2, the third never does
    assert beam_search(model, torch.tensor([[A], [B]]), beam=3, **IDS).tolist() == [[A, EOS], [B, EOS]]
    assert model.decode_calls == 2  # the alive beams (p <= 0.06) cannot beat 0.396 even at max_new; budget was 19


def test_early_unlikely_endings_do_not_stop_the_search_while_a_likelier_beam_is_alive():
    X, Y = 5, 6  # two unlikely EOS hypotheses finish at steps 1 and 2 (K = 2 of them); [X, Y, EOS] has p = 0.95
    table = {(A,): {X: 0.98, EOS: 0.015, W: 0.005}, (A, X): {Y: 0.97, EOS: 0.025, W: 0.005}, (A, X, Y): {EOS: 1.0}}
    model = Table(table, default={W: 1.0})
    assert beam_search(model, torch.tensor([[A]]), beam=2, **IDS).tolist() == [[X, Y, EOS]]


def test_length_penalty_lets_a_longer_hypothesis_win():
    X, Y, Z = 5, 6, 7  # [X, EOS]: p = 0.36; [Y, Z, Z, EOS]: p = 0.342, but twice as long
    table = {
        (A,): {X: 0.45, Y: 0.40, W: 0.15},
        (A, X): {EOS: 0.8, W: 0.2},
        (A, Y): {Z: 0.95, W: 0.05},
        (A, Y, Z): {Z: 0.9, W: 0.1},
        (A, Y, Z, Z): {EOS: 1.0},
    }
    model, src = Table(table, default={W: 1.0}), torch.tensor([[A]])
    assert math.log(0.342) / length_penalty(4, 0.6) > math.log(0.36) / length_penalty(2, 0.6)
    assert beam_search(model, src, beam=2, **IDS, alpha=0.6).tolist() == [[Y, Z, Z, EOS]]
    assert beam_search(model, src, beam=2, **IDS, alpha=0.0).tolist() == [[X, EOS]]
    assert greedy_decode(model, src, **IDS).tolist() == [[X, EOS]]


def real_model_and_sources() -> tuple[nn.Module, torch.Tensor]:
    """A random Seq2SeqTransformer that, like a trained one, never predicts PAD or BOS, with EOS raised a little
    so that some rows finish (at different steps) and others run to max_new."""
    torch.manual_seed(0)
    model = build_seq2seq(Seq2SeqConfig(n_embd=32, n_head=4, d_ff=64, dropout=0.0))
    with torch.no_grad():
        model.head.bias[[PAD, BOS]] = -10.0
        model.head.bias[EOS] += 0.5
    lengths = torch.tensor([1, 3, 5, 7, 9, 12, 12, 2])
    src = torch.randint(3, 13, (len(lengths), 12))  # (B, S) digits
    return model, src.masked_fill(torch.arange(12) >= lengths[:, None], PAD)  # padded after each length


def test_beam_one_is_greedy_on_a_real_model():
    model, src = real_model_and_sources()
    greedy = greedy_decode(model, src, **IDS)
    ends = {row.index(EOS) + 1 if EOS in row else None for row in greedy.tolist()}
    assert len(ends) > 3 and None in ends  # rows end at varied steps, and some never (cut at max_new)
    assert greedy.shape[1] == model.config.block_size - 1
    assert torch.equal(beam_search(model, src, beam=1, **IDS), greedy)


def trim(out: torch.Tensor) -> list[list[int]]:
    """Each row up to and including its EOS (the whole row if it has none)."""
    return [row[: row.index(EOS) + 1] if EOS in row else row for row in out.tolist()]


def test_beam_search_on_a_real_model_is_well_formed_and_decodes_each_row_as_if_alone():
    model, src = real_model_and_sources()
    padded = beam_search(model, src, beam=4, **IDS)
    out = trim(padded)
    for row, full in zip(out, padded.tolist(), strict=True):
        assert PAD not in row and set(full[len(row) :]) <= {PAD}
    alone = [trim(beam_search(model, src[i : i + 1], beam=4, **IDS))[0] for i in range(len(src))]
    assert out == alone  # no mixing of rows or beams across the batch
    assert out != trim(greedy_decode(model, src, **IDS))  # and a wider beam does change something here


@pytest.mark.parametrize("decode", [greedy_decode, lambda m, s, **k: beam_search(m, s, beam=3, **k)])
def test_the_encoder_runs_once_per_call(decode):
    model, src = real_model_and_sources()
    calls = []
    model.encoder.register_forward_hook(lambda *_: calls.append(src.size(0)))
    decode(model, src, **IDS)
    assert calls == [src.size(0)]


class Uncached(nn.Module):
    """A Seq2SeqTransformer whose new_cache gives None: greedy decoding re-runs the whole prefix."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.config = model, model.config

    def encode(self, src, **kw):
        return self.model.encode(src, **kw)

    def decode(self, tgt_in, memory, src_valid, **kw):
        assert kw.get("cache") is None
        return self.model.decode(tgt_in, memory, src_valid, **kw)

    def new_cache(self, enc, capacity=None):
        return None


@pytest.mark.parametrize("norm_first", [True, False])
def test_cached_greedy_decoding_equals_uncached(norm_first):
    """A random model writes long, varied outputs; a trained-ish one (a few overfitting steps) stops at EOS."""
    torch.manual_seed(0)
    model = build_seq2seq(Seq2SeqConfig(n_embd=32, n_head=4, d_ff=64, dropout=0.0, norm_first=norm_first))
    src = torch.randint(3, V, (16, 7))
    src[::2, 5:] = PAD  # half the rows shorter: padded sources
    for trained in (False, True):
        cached = greedy_decode(model, src, **IDS, max_new=12)
        assert cached.tolist() == greedy_decode(Uncached(model), src, **IDS, max_new=12).tolist()
        assert len({tuple(row) for row in cached.tolist()}) > 4  # outputs differ by row: the check has teeth
        if not trained:
            train_to_reverse(model, src)
    assert (cached == EOS).any(1).all()  # the trained-ish model ends every row


def train_to_reverse(model: nn.Module, src: torch.Tensor, steps: int = 60) -> None:
    """A few Adam steps on these sources' reversals, enough that the model emits EOS."""
    lengths = (src != PAD).sum(1)
    tgt = torch.full((len(src), src.size(1) + 2), PAD)
    tgt[:, 0] = BOS
    for i, n in enumerate(lengths.tolist()):
        tgt[i, 1 : n + 1] = src[i, :n].flip(0)
        tgt[i, n + 1] = EOS
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        model(src, tgt[:, :-1], tgt[:, 1:]).loss.backward()
        opt.step()
    model.eval()


# ---- cached beam search --------------------------------------------------------------------------------------------
def sources(n: int, seed: int) -> list[torch.Tensor]:
    """n random sources of 1-14 digits, in three batches padded to widths 14, 16 and 20."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for width in (14, 16, 20):
        lengths = torch.randint(1, 15, (n // 3,), generator=g)  # (n/3,)
        src = torch.randint(3, V, (n // 3, width), generator=g)  # (n/3, width) digits
        out.append(src.masked_fill(torch.arange(width) >= lengths[:, None], PAD))
    return out


CACHE_MODELS = {  # name -> (config changes, logit biases, trained a few steps)
    "pre-norm": ({}, {EOS: 0.8, PAD: 0.5}, False),  # PAD raised too: beams carry padding, tgt_valid must move
    "post-norm": ({"norm_first": False}, {EOS: 0.5}, False),
    "relu-unscaled": ({"ffn": "relu", "scale_embeddings": False}, {EOS: 0.5}, False),
    "trained-ish": ({}, {}, True),
}


def cache_model(name: str) -> nn.Module:
    """A random model whose outputs vary by row and (EOS logit raised) end at varied steps, or a trained-ish one."""
    kw, biases, trained = CACHE_MODELS[name]
    torch.manual_seed(1)
    model = build_seq2seq(Seq2SeqConfig(n_embd=32, n_head=4, d_ff=64, dropout=0.0, block_size=24, **kw))
    with torch.no_grad():
        model.head.bias[BOS] = -10.0  # never BOS again, as in a trained model
        for token, bias in biases.items():
            model.head.bias[token] += bias
    if trained:
        train_to_reverse(model, sources(60, seed=99)[0])  # 20 sources of 1-14 digits
    return model.eval()


def ends(out: torch.Tensor) -> list[int | None]:
    """Per row, how many tokens up to and including its EOS (None: cut at max_new)."""
    return [row.index(EOS) + 1 if EOS in row else None for row in out.tolist()]


@pytest.mark.parametrize("name", list(CACHE_MODELS))
def test_cached_greedy_and_beam_search_give_the_very_tokens_of_uncached_decoding(name):
    """60 sources (3 paddings) x greedy and beam 1-4 at alpha 0 and 0.6: cache=True == cache=False, token for token."""
    model, greedy_ends, beam_ends, changed, padded = cache_model(name), [], [], 0, 0
    for src in sources(60, seed=len(name)):
        greedy = greedy_decode(model, src, **IDS, max_new=16)
        assert torch.equal(greedy, greedy_decode(model, src, **IDS, max_new=16, cache=False))
        assert torch.equal(greedy, greedy_decode(Uncached(model), src, **IDS, max_new=16))  # no cache at all
        greedy_ends += ends(greedy)
        for beam in (1, 2, 3, 4):
            for alpha in (0.0, 0.6):
                kw = dict(beam=beam, alpha=alpha, max_new=16, **IDS)
                cached = beam_search(model, src, **kw)
                assert torch.equal(cached, beam_search(model, src, **kw, cache=False)), (name, beam, alpha)
                beam_ends += ends(cached)
                padded += sum(PAD in row[: (end or 16) - 1] for row, end in zip(cached.tolist(), ends(cached)))
                changed += cached.shape != greedy.shape or bool((cached != greedy).any())
    assert len(set(greedy_ends)) >= 5 and len(set(beam_ends)) >= 5  # EOS at varied steps: the check has teeth
    assert changed > 12  # wider beams find other outputs than greedy: their cache rows really moved
    if name == "pre-norm":
        assert padded > 20  # hypotheses with PAD inside them: the cache's tgt_valid rows must move with the beams
    if name == "trained-ish":
        assert greedy_ends.count(None) < len(greedy_ends) / 4  # the trained-ish model mostly ends with EOS


def test_the_test_doubles_offer_the_encoder_decoder_protocol():
    from tinyformer.models.protocols import EncoderDecoder, unmet

    assert unmet(Reverser(), EncoderDecoder) == []
    assert unmet(Uncached(Reverser()), EncoderDecoder) == []
