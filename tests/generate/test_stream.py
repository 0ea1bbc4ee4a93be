"""Streaming generation: `stream` yields what `generate` returns, token by token, and `TextStream` turns
ids into text that joins to the tokenizer's decode and never shows half a character."""

import random

import pytest
import torch

from tests.conftest import SYNTHETIC
from tinyformer.config import SampleConfig
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.generate.sampling import (
    REPLACEMENT,
    TextStream,
    _naive_steps,
    generate,
    generate_text,
    next_token,
    stream,
)
from tinyformer.models.gpt import GPTConfig, MiniGPT


@pytest.fixture(scope="module")
def lm() -> tuple[MiniGPT, CharTokenizer]:
    tok = CharTokenizer.from_text(SYNTHETIC)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0)
    return MiniGPT(cfg).eval(), tok


def reference(model, idx, n, temperature, top_k, top_p, seed):
    """A step-by-step loop written out here: the whole window re-run every step, one draw per step."""
    step, g = _naive_steps(model, model.config.block_size), torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(n):
            idx = torch.cat([idx, next_token(step(idx), temperature, top_k, top_p, g)], 1)
    return idx


def test_stream_yields_the_tokens_of_a_written_out_loop_and_of_generate(lm):
    model, _ = lm
    prompt = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    s = dict(temperature=0.9, top_k=12, top_p=0.95)
    streamed = list(stream(model, prompt, 40, **s, generator=torch.Generator().manual_seed(4)))  # 45 > 16: slides
    assert len(streamed) == 40 and all(t.shape == (2, 1) for t in streamed)
    tokens = torch.cat([prompt, *streamed], 1)
    assert torch.equal(tokens, reference(model, prompt, 40, **s, seed=4))
    assert torch.equal(tokens, generate(model, prompt, 40, **s, generator=torch.Generator().manual_seed(4)))


def test_streamed_text_joins_to_generate_texts_continuation(lm):
    model, tok = lm
    s = SampleConfig(prompt="ROMEO:", tokens=50, temperature=0.8, top_k=10, top_p=0.9, seed=7)
    idx = torch.tensor([tok.encode(s.prompt)])  # (1, 6)
    text, pieces = TextStream(tok), []
    g = torch.Generator().manual_seed(s.seed)
    for token in stream(model, idx, s.tokens, temperature=0.8, top_k=10, top_p=0.9, generator=g):
        pieces.append(text.push(int(token)))
    pieces.append(text.flush())
    assert len(pieces) == 51 and all(len(p) == 1 for p in pieces[:-1])  # a character tokenizer holds nothing back
    assert s.prompt + "".join(pieces) == generate_text(model, tok, s)


def test_a_suspended_stream_leaves_grad_mode_and_the_training_flag_alone(lm):
    model, _ = lm
    model.train()
    try:
        tokens = stream(model, torch.zeros(1, 3, dtype=torch.long), 5, temperature=0)
        next(tokens)
        assert torch.is_grad_enabled() and model.training  # between two tokens, the caller's state is its own
        assert len(list(tokens)) == 4
    finally:
        model.eval()


def test_stream_checks_the_window_when_called_not_at_the_first_token(lm):
    model, _ = lm
    with pytest.raises(UserError, match="block_size=16"):
        stream(model, torch.zeros(1, 3, dtype=torch.long), 5, window=32)  # never iterated


class ByteTokenizer:
    """A byte-level tokenizer in miniature: each id is a few bytes; decode joins them and reads UTF-8."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def decode(self, ids) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


def test_a_character_split_over_ids_is_shown_only_when_complete():
    tok = ByteTokenizer([b"a", b"\xe2", b"\x82\xac", b"b\xf0\x9f", b"\x98", b"\x80c"])  # € and 😀 split
    ids = [0, 1, 2, 3, 4, 5]
    text = TextStream(tok)
    assert [text.push(i) for i in ids] == ["a", "", "€", "", "", "b😀c"]
    assert text.flush() == ""
    assert tok.decode([1]) == REPLACEMENT  # what the stream held back: decode of half a character
    assert text.push(1) == "" and text.flush() == REPLACEMENT  # at the end, held bytes come out as decode has them


@pytest.mark.parametrize("seed", range(5))
def test_streamed_pieces_join_to_decode_and_never_show_half_a_character(seed):
    rng = random.Random(seed)
    data = "".join(rng.choice("ab €é😀中\n") for _ in range(200)).encode()
    cuts = sorted(rng.sample(range(1, len(data)), 150))  # ids cut anywhere, mid-character too
    tok = ByteTokenizer([data[i:j] for i, j in zip([0, *cuts], [*cuts, len(data)])])
    ids = list(range(len(tok.pieces)))
    text = TextStream(tok)
    pieces = [text.push(i) for i in ids] + [text.flush()]
    assert not any(REPLACEMENT in p for p in pieces)
    assert "".join(pieces) == tok.decode(ids) == data.decode()


def test_a_byte_level_bpe_streams_whole_characters():
    pytest.importorskip("tokenizers")
    from tinyformer.data.bpe import BPETokenizer

    tok = BPETokenizer.train(["hello world " * 50], 260)  # hardly any merges: other scripts stay single bytes
    text = "héllo 😀 中文 € world"
    ids = tok.encode(text)
    assert len(ids) > len(text)  # some characters span several ids
    stream_ = TextStream(tok)
    pieces = [stream_.push(i) for i in ids] + [stream_.flush()]
    assert not any(REPLACEMENT in p for p in pieces) and "".join(pieces) == text
    assert "😀" in pieces and "中" in pieces  # each shown whole, in one piece
