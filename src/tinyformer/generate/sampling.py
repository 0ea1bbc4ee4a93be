"""Autoregressive sampling: temperature, top-k (Fan et al., 2018) and top-p / nucleus
(Holtzman et al., 2020), with a seeded generator and the context cropped to a
window (the model's block size unless told otherwise).

`generate` uses a KV cache by default: the prompt is run once (prefill), then
each step runs only the newest token. Once the window is full, the oldest token
leaves it, and every cached key above the first layer was computed while its
token could still see that token (with absolute positions, every position also
shifts by one): no cached entry is what the window would compute. The cached
path then rebuilds the cache from the last `window` tokens, which is exactly
what the naive path (`use_cache=False`, the whole window re-run every step)
computes.

With `model.backend=auto`, the cached path first picks the attention backend for one query against
the cache (`choose_decode_backend`): a step of one token behaves unlike training's full sequences, so it
is timed on its own (a few cached steps per backend) and cached per machine like training's choice.

`stream` is the one generation loop: it yields each new token as it is sampled, and `generate` (hence
`generate_text`, `tinyformer sample`) collects what it yields. `TextStream` turns those ids into text as
they come, holding back a character until all of its bytes have arrived (byte-level tokenizers).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tinyformer.attention.multihead import softmax_layers, using_backend
from tinyformer.config import SampleConfig
from tinyformer.device import BackendChoice, choose_backend, inference, model_device
from tinyformer.errors import UserError
from tinyformer.models.protocols import CausalLM


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits (B, V) with everything outside the top-k / top-p set at -inf."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        mass_before = probs.cumsum(-1) - probs  # probability of strictly more likely tokens
        drop_sorted = mass_before >= top_p  # the most likely token always stays
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits (B, V) -> next ids (B, 1). temperature 0 means greedy (argmax)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    probs = filter_logits(logits.float() / temperature, top_k, top_p).softmax(-1)  # (B, V)
    if not bool(torch.isfinite(probs).all()):
        raise UserError("the model's next-token probabilities are not finite: its weights have diverged")
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)


def stream(model: CausalLM, idx: torch.Tensor, max_new_tokens: int, **options) -> Iterator[torch.Tensor]:
    """idx (B, T0) -> the next ids (B, 1), one per step, `max_new_tokens` of them, each yielded as soon as it is
    sampled; each step sees at most `window` (default block_size) tokens. The window is checked now, not at the
    first step. Eval mode and no-grad are set for each step only: between tokens, the caller's state is its own.
    `options` are `stream_steps`'s (temperature, top_k, top_p, generator, use_cache, window)."""
    return (token for token, _ in stream_steps(model, idx, max_new_tokens, **options))


def stream_steps(
    model: CausalLM,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    window: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`stream` with its options spelled out, each token with the logits (B, V) it was sampled from (what
    `distribution` reads)."""
    window = model.check_context(window or model.config.block_size)
    use_cache = use_cache and model.config.causal  # without the mask, earlier keys change as text grows
    step = _cached_steps(model, idx, window) if use_cache else _naive_steps(model, window)
    return _stream(model, step, idx, max_new_tokens, (temperature, top_k, top_p, generator), window if use_cache else 0)


def _stream(model: CausalLM, step, idx: torch.Tensor, n: int, sampling: tuple, window: int):
    """`window` > 0: cached steps, with the backend `choose_decode_backend` picks for them (chosen at the first
    step, and set only during each step)."""
    backend = None
    for i in range(n):
        if i == 0 and window:
            backend = getattr(choose_decode_backend(model, window), "name", None)
        with inference(model), using_backend(model, backend):  # per step: between tokens the model is the caller's
            logits = step(idx)  # (B, V): the logits after idx
            token = next_token(logits, *sampling)  # (B, 1)
        idx = torch.cat([idx, token], dim=1)  # (B, T + 1)
        yield token, logits


COLUMNS = ("id", "p", "p_temp", "kept", "p_final")  # a step's distribution: one list per column, one entry per token


def distributions(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, n: int = 20
) -> list[dict[str, list]]:
    """What sampling does to each step's logits (N, V), for its `n` most likely tokens, most likely first: per
    step, one list per column (`COLUMNS`): `id`, `p` the model's probability, `p_temp` after temperature,
    `kept` whether top-k and top-p keep it, and `p_final` the probability it is drawn with (0 when cut;
    temperature 0: 1 for the argmax). Columns, not one object per token: the playground sends them as JSON
    for every step, and 20 objects a step cost more to build, write and parse than the step's token. The N
    steps are computed at once and read in one transfer (a few kernels per step cost more than its token)."""
    logits = logits.float()  # (N, V)
    p = logits.softmax(-1)
    if temperature == 0:
        p_temp = torch.zeros_like(p).scatter(-1, p.argmax(-1, keepdim=True), 1.0)
        final = p_temp
    else:
        scaled = logits / temperature
        p_temp = scaled.softmax(-1)
        final = filter_logits(scaled, top_k, top_p).softmax(-1)
    top = p.topk(min(n, p.size(-1)), dim=-1).indices.sort(-1).values  # (N, n), in id order
    # most likely first, equal probabilities in id order, as argmax breaks the tie: at temperature 0 the drawn
    # token is first (bf16 logits tie often; topk orders ties as it likes)
    top = top.gather(-1, p.gather(-1, top).sort(dim=-1, descending=True, stable=True).indices)
    rows = torch.stack([p.gather(-1, top), p_temp.gather(-1, top), final.gather(-1, top)], 1)  # (N, 3, n)
    rows = significant(rows.double()).tolist()  # N x 3 x n
    return [
        dict(zip(COLUMNS, (ids, a, b, [c > 0 for c in f], f), strict=True))
        for ids, (a, b, f) in zip(top.tolist(), rows, strict=True)
    ]


def significant(x: torch.Tensor, digits: int = 6) -> torch.Tensor:
    """`x` (float64) rounded to `digits` significant digits: a float32 read as a Python float prints 17 digits in
    JSON, most of them noise (rounded, 200 steps' distributions make JSON 43% shorter that takes half the time to
    encode and parse, measured on a 2-core EPYC). 0 stays 0."""
    scale = torch.pow(10.0, digits - 1 - x.abs().clamp_min(1e-300).log10().floor())
    return (x * scale).round() / scale


def distribution(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, n: int = 20
) -> dict[str, list]:
    """`distributions` of one step's logits (V,)."""
    return distributions(logits[None], temperature, top_k, top_p, n)[0]


def generate(model: CausalLM, idx: torch.Tensor, max_new_tokens: int, **options) -> torch.Tensor:
    """idx (B, T0) -> (B, T0 + max_new_tokens): everything `stream` yields, after the prompt. `options` are
    `stream_steps`'s (temperature, top_k, top_p, generator, use_cache, window)."""
    return torch.cat([idx, *stream(model, idx, max_new_tokens, **options)], 1)


DECODE_STEPS = 32  # cached one-token steps per timed try of a backend


def choose_decode_backend(model: CausalLM, window: int) -> BackendChoice | None:
    """`model.backend=auto`: the faster backend for one-token steps with a KV cache, timed (or from the cache)
    on `DECODE_STEPS` steps that attend to a nearly full `window` -> the choice; None when the config fixed
    it. The model's backends are left as they were."""
    if getattr(model.config, "backend", None) != "auto" or not softmax_layers(model):
        return None
    device, n = model_device(model), min(window, DECODE_STEPS)
    first, cache = window - n, model.new_cache(1, window)
    ids = torch.zeros(1, 1, dtype=torch.long, device=device)  # (1, 1): one token per step

    def steps(name: str):
        def run() -> int:
            with using_backend(model, name):
                for pos in range(first, window):  # overwrites the same positions each time
                    model(ids, cache=cache, start=pos)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return n

        return run

    kind = device.type
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else torch.float32
    fields = {"decode": model.config.__dict__, "window": window, "dtype": str(dtype), "device": kind}
    with inference(model):
        if first:
            model(ids.expand(1, first), cache=cache, start=0)  # prefill, untimed: the steps see `window` keys
        return choose_backend(fields, {name: steps(name) for name in ("sdpa", "manual")}, device=device, budget_s=1.0)


def _naive_steps(model: CausalLM, window: int):
    """Each step re-runs the model over the whole window: O(window) tokens of work per new token."""
    return lambda idx: model(idx[:, -window:]).logits[:, -1, :]


def _cached_steps(model: CausalLM, idx: torch.Tensor, window: int):
    """Each step runs only the tokens the cache has not seen; a full window rebuilds the cache."""
    cache = model.new_cache(idx.size(0), window)
    state = {"seen": 0}  # tokens of idx already in the cache (idx only grows by one per step)

    def step(idx: torch.Tensor) -> torch.Tensor:
        n, seen = idx.size(1), state["seen"]
        if seen and n - seen == 1 and n <= window:  # the usual step: one new token at position n - 1
            out = model(idx[:, -1:], cache=cache, start=n - 1)
        else:  # the prompt, or a full window whose positions all shifted: prefill from scratch
            out = model(idx[:, -window:], cache=cache, start=0)
        state["seen"] = n
        return out.logits[:, -1, :]

    return step


def generate_text(
    model: CausalLM, tokenizer, s: SampleConfig, use_cache: bool = True, window: int | None = None
) -> str:
    """`s.prompt` followed by `s.tokens` sampled tokens, seeded by `s.seed`."""
    return "".join(stream_text(model, tokenizer, s, use_cache, window))


def stream_text(
    model: CausalLM, tokenizer, s: SampleConfig, use_cache: bool = True, window: int | None = None
) -> Iterator[str]:
    """`generate_text` as it is made: the prompt, then the text of the tokens as each character completes
    (`TextStream`). The model runs when the next piece is asked for."""
    device = model_device(model)
    ids = tokenizer.encode(s.prompt)
    idx = torch.tensor([ids], dtype=torch.long, device=device)  # (1, T0)
    g = torch.Generator(device=device).manual_seed(s.seed)
    sampling = dict(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, generator=g)
    tokens = stream(model, idx, s.tokens, **sampling, use_cache=use_cache, window=window)  # checks the window now
    yield tokenizer.decode(ids)
    text = TextStream(tokenizer)
    for token in tokens:
        yield text.push(int(token))
    yield text.flush()


REPLACEMENT = "\ufffd"  # what decoding an incomplete UTF-8 sequence gives


class TextStream:
    """Ids in, one at a time; the text they complete out. Text is given out once it no longer ends in
    U+FFFD, i.e. once the last character's bytes have all arrived (a byte-level BPE can split one character
    over several ids; a character tokenizer never holds anything back). `flush()` gives what is held.

    The pieces join to `tokenizer.decode(all ids)` for any tokenizer whose decode is concatenative at
    complete characters: character tokenizers, and byte-level ones (UTF-8 resynchronises after each one).
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.pending: list[int] = []  # ids since the last piece given out

    def push(self, token: int) -> str:
        self.pending.append(int(token))
        text = self.tokenizer.decode(self.pending)
        if text.endswith(REPLACEMENT):
            return ""
        self.pending = []
        return text

    def flush(self) -> str:
        text = self.tokenizer.decode(self.pending) if self.pending else ""
        self.pending = []
        return text
