import pytest
import torch
from torch import nn

from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.generate.sampling import (
    COLUMNS,
    _cached_steps,
    _naive_steps,
    distribution,
    distributions,
    filter_logits,
    generate,
    next_token,
    significant,
)
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.models.outputs import ModelOutput


def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[False, True, False, True, False]]


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    probs = torch.tensor([[0.5, 0.05, 0.3, 0.15]])
    logits = probs.log()
    assert torch.isfinite(filter_logits(logits, top_p=0.7)).tolist() == [[True, False, True, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.8)).tolist() == [[True, False, True, False]]
    assert torch.isfinite(filter_logits(logits, top_p=0.81)).tolist() == [[True, False, True, True]]
    assert torch.isfinite(filter_logits(logits, top_p=0.01)).tolist() == [[True, False, False, False]]


@pytest.mark.parametrize("settings", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (0.0, 3, 0.5)])
def test_distributions_of_a_batch_of_steps_are_each_steps_own(settings):
    """The playground computes a chunk of steps' distributions at once: row by row, the same as one step."""
    logits = torch.randn(7, 50, generator=torch.Generator().manual_seed(0)) * 3
    together = distributions(logits, *settings, n=12)
    alone = [distribution(row, *settings, n=12) for row in logits]
    assert together == alone
    for row, dist in zip(logits, together, strict=True):
        assert list(dist) == list(COLUMNS) and all(len(column) == 12 for column in dist.values())
        assert dist["id"] == row.topk(12).indices.tolist()
        kept = dist["kept"]
        assert kept == sorted(kept, reverse=True)  # what is kept is the most likely
        temperature, top_k, top_p = settings
        if temperature == 0 or (top_k and top_p == 1):
            assert sum(kept) == (1 if temperature == 0 else top_k)


def test_tied_logits_list_the_token_greedy_decoding_draws_first():
    """bf16 logits tie often. At temperature 0 the drawn token (argmax: the lowest id of the tied ones) must be
    the first listed, with p_final 1; every tie is listed in id order."""
    logits = torch.zeros(2, 65)
    logits[0, [9, 41, 60]] = 2.0  # three-way tie at the top
    logits[1, [50, 7]] = torch.tensor([1.5, 1.5]).bfloat16().float()
    logits[1, 30] = 1.0
    drawn = next_token(logits, temperature=0.0).flatten().tolist()
    for row, token, dist in zip(logits, drawn, distributions(logits, 0.0, 0, 1.0, n=5), strict=True):
        assert dist["id"][0] == token and dist["p_final"][:2] == [1.0, 0.0]
        top = row.max()
        assert [i for i in dist["id"] if row[i] == top] == sorted(i for i in range(65) if row[i] == top)
    assert distributions(logits, 0.0, 0, 1.0, n=5)[0]["id"][:3] == [9, 41, 60]


def test_probabilities_keep_six_significant_digits_and_print_short():
    x = torch.tensor([0.123456789, 1.0, 0.0, 3.14159265e-9, 0.99999995, 2.5e-15], dtype=torch.float64)
    assert significant(x).tolist() == [0.123457, 1.0, 0.0, 3.14159e-09, 1.0, 2.5e-15]
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(1)) * 4
    for row, dist in zip(logits, distributions(logits, 0.8, 0, 0.9), strict=True):
        p = torch.tensor(dist["p"], dtype=torch.float64)
        exact = row.softmax(-1).double()[dist["id"]]  # the probabilities before rounding
        assert torch.allclose(p, exact, rtol=6e-6, atol=0) and not torch.equal(p, exact)
        assert all(len(repr(x)) <= 12 for k in ("p", "p_temp", "p_final") for x in dist[k])


def test_temperature_zero_is_greedy_and_sampling_is_seeded():
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(next_token(logits, temperature=0), logits.argmax(-1, keepdim=True))
    a = [next_token(logits, 1.0, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(*a)
    draws = torch.cat(
        [next_token(logits, 1.0, top_k=3, generator=torch.Generator().manual_seed(s)) for s in range(50)], 1
    )
    top3 = logits.topk(3).indices
    assert all(int(d) in top3[i] for i in range(3) for d in draws[i])  # top-k is honoured


class Spy(nn.Module):
    """A 'model' that records how much context it was given."""

    def __init__(self, block_size=8, vocab=5):
        super().__init__()
        self.config = type("C", (), {"block_size": block_size})()
        self.vocab, self.seen = vocab, []
        self.w = nn.Parameter(torch.zeros(1))

    def check_context(self, T):  # MiniGPT's context rule, for learned positions
        assert 0 < T <= self.config.block_size
        return T

    def forward(self, idx):
        self.seen.append(idx.size(1))
        return ModelOutput(logits=torch.zeros(idx.size(0), idx.size(1), self.vocab))


def test_context_is_cropped_to_the_block_size():
    spy = Spy(block_size=8)
    out = generate(spy, torch.zeros(2, 3, dtype=torch.long), 20, temperature=0, use_cache=False)
    assert out.shape == (2, 23)
    assert spy.seen[:6] == [3, 4, 5, 6, 7, 8] and max(spy.seen) == 8


# ---- the KV cache: equivalence with the naive path ---------------------------------------------------------
def small_gpt(positions: str = "learned", vocab_size: int = 30) -> MiniGPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab_size, block_size=32, n_layer=2, n_head=4, n_embd=32, positions=positions)
    return MiniGPT(cfg).eval()


@pytest.fixture(scope="module")
def trained_gpt() -> tuple[MiniGPT, CharTokenizer]:
    """A MiniGPT after 60 AdamW steps on the synthetic text: peaked, text-like next-token distributions."""
    from tests.conftest import SYNTHETIC

    tok = CharTokenizer.from_text(SYNTHETIC)
    ids = torch.tensor(tok.encode(SYNTHETIC))
    model = small_gpt(vocab_size=tok.vocab_size).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        starts = torch.randint(len(ids) - 33, (16,), generator=g)
        windows = ids[starts[:, None] + torch.arange(33)]  # (16, 33)
        loss = model(windows[:, :-1], windows[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 2.6  # it did learn something (uniform would be ln(V) ~ 3.3)
    return model.eval(), tok


def trace(model, prompt, n, use_cache, temperature, seed=0):
    """(tokens (B, T0 + n), per-step next-token logits (n, B, V)) through the same steps `generate` uses."""
    step = _cached_steps(model, prompt, 32) if use_cache else _naive_steps(model, 32)
    g = torch.Generator().manual_seed(seed)
    idx, logits = prompt, []
    with torch.no_grad():
        for _ in range(n):
            logits.append(step(idx))
            idx = torch.cat([idx, next_token(logits[-1], temperature, top_k=10, generator=g)], 1)
    return idx, torch.stack(logits)


@pytest.mark.parametrize("which", ["random", "trained"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cached_and_naive_generation_agree_for_200_tokens(which, temperature, trained_gpt):
    model = small_gpt() if which == "random" else trained_gpt[0]
    prompt = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    tokens, logits = trace(model, prompt, 200, True, temperature)
    ref_tokens, ref_logits = trace(model, prompt, 200, False, temperature)
    assert torch.equal(tokens, ref_tokens)  # 200 new tokens: well past block_size=32, the window slides
    assert (logits - ref_logits).abs().max() < 1e-5  # at every step
    g = [torch.Generator().manual_seed(3) for _ in range(2)]
    a = generate(model, prompt, 200, temperature=temperature or 1.0, top_k=10, generator=g[0], use_cache=True)
    b = generate(model, prompt, 200, temperature=temperature or 1.0, top_k=10, generator=g[1], use_cache=False)
    assert torch.equal(a, b)


@pytest.mark.parametrize("positions", ["rope", "sinusoidal", "none"])
def test_cache_equivalence_holds_for_every_position_kind(positions):
    model = small_gpt(positions)
    prompt = torch.randint(0, 30, (2, 3), generator=torch.Generator().manual_seed(1))
    tokens, logits = trace(model, prompt, 60, True, 1.0)
    ref_tokens, ref_logits = trace(model, prompt, 60, False, 1.0)
    assert torch.equal(tokens, ref_tokens) and (logits - ref_logits).abs().max() < 1e-5


def test_the_cache_runs_one_token_per_step_until_the_window_is_full():
    model, seen = small_gpt(), []
    model.config.backend = "manual"  # `auto` times decode steps first (unless an earlier test cached the choice)
    model.embed = (lambda f: lambda idx, start: (seen.append((idx.size(1), start)), f(idx, start))[1])(model.embed)
    generate(model, torch.zeros(1, 30, dtype=torch.long), 4, temperature=0)
    assert seen == [(30, 0), (1, 30), (1, 31), (32, 0)]  # prefill, two steps, then a full window rebuilds
