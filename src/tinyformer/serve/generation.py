"""One generation of the playground: a run's sampling settings resolved as `tinyformer sample` resolves them, its
steps computed on the store's model thread a chunk at a time, and sent whole (`collect`) or as server-sent
events (`events`)."""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Iterator

import torch

from tinyformer.config import SAMPLING
from tinyformer.errors import UserError
from tinyformer.serve.bodies import Generate
from tinyformer.serve.limits import Limits, Slots
from tinyformer.serve.store import RunStore
from tinyformer.serve.views import Bad, blame

# A generation's steps run on the model thread in chunks of about this long (at least one step): each hand-off
# costs the stream time, 20 ms chunks cost it 6-15% over `sample` and 50 ms ones 3-8% (bench serve, 2-core
# EPYC), and a stream still updates 20 times a second while other requests wait at most one chunk.
CHUNK_S = 0.05


class Generation:
    """One sampling job on a loaded run: the settings resolved against the run's own (as `sample` resolves
    them), the prompt encoded, and a stream of steps, each computed on the store's model thread."""

    def __init__(self, store: RunStore, held, body: Generate, limits: Limits) -> None:
        from tinyformer.config import SampleConfig

        self.store, self.held, self.top = store, held, body.top
        run = held.run
        given = {k: v for k, v in body.model_dump().items() if k in SAMPLING and v is not None}  # checked
        self.s = SampleConfig(**(run.config.sample.__dict__ | given))
        if self.s.tokens > limits.max_tokens:
            raise Bad("tokens", f"tokens={self.s.tokens} is more than this server allows ({limits.max_tokens})", 422)
        with blame("prompt"):
            ids = run.tokenizer.encode(self.s.prompt)
        if not ids:
            raise Bad("prompt", "the prompt is empty; give at least one character")
        self.ids = ids
        self.text = run.tokenizer.decode(ids)
        self.labels: dict[int, str] = {}  # token id -> its text, decoded once per generation

    def steps(self) -> Iterator[dict]:
        """One dict per new token: its id, the text it completes, and the distribution it was drawn from."""
        it, text, done = self.store.call(self._start), self.text_stream(), 0
        while done < self.s.tokens:
            chunk = self.chunk(done, self.store.call(self._steps, it, self.s.tokens - done), text)
            done += len(chunk)
            yield from chunk

    async def stream(self):
        """The same, a chunk of steps at a time (`CHUNK_S`), each chunk awaited as soon as it is sampled: one
        server-sent write per chunk instead of a thread hop and a write per token. The first chunk is one step,
        so that the first token shows at once."""
        it, text, done = await self.store.wait(self._start), self.text_stream(), 0
        while done < self.s.tokens:
            left = self.s.tokens - done if done else 1
            chunk = self.chunk(done, await self.store.wait(self._steps, it, left), text)
            done += len(chunk)
            yield chunk

    def text_stream(self):
        from tinyformer.generate.sampling import TextStream

        return TextStream(self.held.run.tokenizer)

    def chunk(self, first: int, steps: list[tuple[int, dict[str, list]]], text) -> list[dict]:
        return [
            {"i": first + k, "id": tid, "text": text.push(tid), "distribution": self.labelled(dist)}
            for k, (tid, dist) in enumerate(steps)
        ]

    def _start(self):
        """The generator of (token, logits) steps, as `tinyformer sample` makes it (the cache is made now)."""
        from tinyformer.generate.sampling import stream_steps

        run, s = self.held.run, self.s
        device = next(run.model.parameters()).device
        idx = torch.tensor([self.ids], dtype=torch.long, device=device)  # (1, T0)
        g = torch.Generator(device=device).manual_seed(s.seed)
        with run.autocast():  # the precision the steps run in
            return stream_steps(
                run.model, idx, s.tokens, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, generator=g
            )

    def _steps(self, it, left: int) -> list[tuple[int, dict[str, list]]]:
        """The next steps of the generator, as many as `CHUNK_S` allows (at least one, at most `left`), on the
        model thread: each token id and the distribution it was drawn from (computed for the whole chunk at
        once). Other requests' chunks run between two of this one."""
        from tinyformer.generate.sampling import COLUMNS, distributions

        s, tokens, logits = self.s, [], []
        start = time.perf_counter()
        with self.held.run.autocast():
            while len(tokens) < left and (not tokens or time.perf_counter() - start < CHUNK_S):
                token, step_logits = next(it)  # (1, 1), (1, V)
                tokens.append(int(token))
                logits.append(step_logits)
            if self.top:
                dists = distributions(torch.cat(logits), s.temperature, s.top_k, s.top_p, self.top)
            else:  # the tokens alone, what `sample` computes: every column empty
                dists = [{c: [] for c in COLUMNS} for _ in tokens]
        return list(zip(tokens, dists, strict=True))

    def labelled(self, dist: dict[str, list]) -> dict[str, list]:
        """The step's distribution with a `token` column: each id's text, decoded once per generation."""
        label, decode = self.labels, self.held.run.tokenizer.decode
        for i in dist["id"]:
            if i not in label:
                label[i] = decode([i])
        return dist | {"token": [label[i] for i in dist["id"]]}

    async def collect(self) -> dict:
        start, out = time.perf_counter(), []
        async for chunk in self.stream():
            out += chunk
        return self.done(out, time.perf_counter() - start) | {"steps": out}

    def done(self, out: list[dict], seconds: float) -> dict:
        ids = self.ids + [d["id"] for d in out]
        return {
            "text": self.held.run.tokenizer.decode(ids),  # what `tinyformer sample` prints for these settings
            "prompt_ids": self.ids,
            "prompt_tokens": [self.held.run.tokenizer.decode([i]) for i in self.ids],
            "ids": ids,
            "settings": self.s.__dict__,
            "ms_per_token": 1000 * seconds / max(len(out), 1),
        }

    def distribution_now(self) -> dict[str, list]:
        return next(self.steps())["distribution"]


async def events(job: Generation, slots: Slots):
    """Server-sent events: `start` (the prompt's tokens), one `token` per step, then `done` (or `error`). The
    slot is given back however the stream ends, a client that leaves included."""
    out: list[dict] = []
    try:
        start = time.perf_counter()
        yield sse(
            "start", {"prompt_ids": job.ids, "prompt_tokens": [job.held.run.tokenizer.decode([i]) for i in job.ids]}
        )
        async for steps in job.stream():
            out += steps
            yield "".join(sse("token", step) for step in steps)
        yield sse("done", job.done(out, time.perf_counter() - start))
    except UserError as e:
        yield sse("error", {"error": str(e), "field": "run"})
    except Exception as e:  # a bug of ours mid-stream: logged here, one line to the client, as for a request
        traceback.print_exception(e, file=sys.stderr)
        yield sse("error", {"error": f"internal error ({type(e).__name__}); see the server's log", "field": ""})
    finally:
        slots.release()


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
