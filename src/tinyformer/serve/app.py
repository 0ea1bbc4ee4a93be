"""The playground's web app: one page (static/) and the JSON API under /api that the page uses, and only it.

- `GET  /api/runs`        the runs under the root, each with its task's views and inputs
- `GET  /api/run?run=`    one run: what `tinyformer info` prints, its config and its loss curves
- `POST /api/generate`    a language model's continuation, as `tinyformer sample` gives it; `"stream": true`
                          sends each token as a server-sent event, with the step's next-token distribution
- `POST /api/next-token`  the next-token distribution after a prompt (what top-k, top-p and temperature do)
- `POST /api/attention`   the attention from one token of a text (or of ids), every layer x head, head roles
- `POST /api/predict`     the task's answer as panels (`Task.play`): probabilities, tags, a span, a matrix

Every error is a JSON object {"error": one line, "field": the field it names} ("body" for a body that is not
JSON, "path" for an unknown address); bad input and bad data on disk get a 4xx, and the server keeps serving.
A run folder that cannot be read is listed under "unreadable" with its reason.
A task contributes its views through the task contract (`Task.views`, `predict_args`, `play`): nothing here
names a task. Limits (`Limits`) bound the body size, the tokens a request may ask for, and the generations
that run at once (the others wait for a slot, up to `wait_s`, holding no thread meanwhile).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from tinyformer.config import SAMPLING, check_sampling
from tinyformer.device import inference
from tinyformer.errors import UserError
from tinyformer.serve.limits import Limits, Slots
from tinyformer.serve.store import Busy, NotFound, RunStore, metrics
from tinyformer.serve.views import Bad, attention_from, blame, inputs, task_options
from tinyformer.tasks.base import VIEWS

STATIC = Path(__file__).parent / "static"
# A generation's steps run on the model thread in chunks of about this long (at least one step): each hand-off
# costs the stream time, 20 ms chunks cost it 6-15% over `sample` and 50 ms ones 3-8% (bench serve, 2-core
# EPYC), and a stream still updates 20 times a second while other requests wait at most one chunk.
CHUNK_S = 0.05
PAGE_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"


# ---- request bodies (pydantic checks types and ranges; the error names the field) ------------------------
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sampling(Strict):
    """The sampling settings take what `tinyformer sample` takes: each is checked by `check_sampling`, the
    rule `SampleConfig` checks its own fields with."""

    run: str = Field(min_length=1, description="the run's name, as /api/runs lists it")
    prompt: str | None = Field(None, max_length=20_000, description="text to continue (default: the run's)")
    temperature: float | None = Field(None, description="0 = greedy, else in [0.001, 1000] (default: the run's)")
    top_k: int | None = Field(None, description="keep the k most likely tokens; 0 = off")
    top_p: float | None = Field(None, description="nucleus mass in (0, 1]; 1 = off")
    top: int = Field(20, ge=1, le=200, description="candidates of the distribution to return")

    @field_validator(*SAMPLING, check_fields=False)
    @classmethod
    def as_sample_takes_it(cls, value, info: ValidationInfo):
        if value is not None:
            try:
                check_sampling(info.field_name, value)
            except UserError as e:
                raise ValueError(str(e)) from None
        return value


class Generate(Sampling):
    top: int = Field(20, ge=0, le=200, description="candidates of each step's distribution to return; 0 = none")
    tokens: int | None = Field(None, description="new tokens (default: the run's; at most --max-tokens)")
    seed: int | None = Field(None, description="sampling seed (default: the run's)")
    stream: bool = Field(False, description="send each token as a server-sent event")


class Attention(Strict):
    run: str = Field(min_length=1)
    text: str | None = Field(None, max_length=20_000, description="the text (or give ids, for a language model)")
    ids: list[int] | None = Field(None, max_length=20_000, description="token ids, as /api/generate returned them")
    query: int | None = Field(None, ge=0, description="the token whose attention to return (default: the last)")
    part: str | None = Field(None, description="the attention stack, for a model with several")


class Predict(Strict):
    run: str = Field(min_length=1)
    inputs: dict[str, str | int | float | bool] = Field(description="the task's inputs, as /api/runs lists them")


def create_app(root: str | Path, device: str = "cpu", limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits()
    store = RunStore(root, device)
    slots = Slots(limits.max_generations)
    app = FastAPI(
        title="tinyformer playground",
        version="1",
        description=__doc__,
        docs_url=None,  # the stock /docs page loads its scripts from a CDN: ours is served from here
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    add_errors(app, limits)
    app.state.store = store  # the benchmark runs `tinyformer sample`'s path on the same model thread

    # ---- the page ---------------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Content-Security-Policy": CSP})

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: str) -> FileResponse:
        if name not in PAGE_FILES:
            raise Bad("name", f"no such file: {name}", 404)
        return FileResponse(STATIC / name, media_type=PAGE_FILES[name])

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        from tinyformer.serve.docs import api_page

        return HTMLResponse(api_page(app.openapi()), headers={"Content-Security-Policy": CSP})

    # ---- the API ----------------------------------------------------------------------------------------
    @app.get("/api/runs", summary="the runs under the served folder, and those that cannot be read (why)")
    def runs() -> dict:
        listed, unreadable = [], []
        for name in store.names():
            try:
                listed.append(summary(store, name))
            except NotFound:
                continue  # gone since it was found
            except (UserError, OSError) as e:  # a bad file in it: named with its one-line reason
                unreadable.append({"name": name, "error": " ".join(str(e).split())})
        return {
            "root": str(store.root),
            "runs": listed,
            "unreadable": unreadable,
            "views": VIEWS,
            "limits": limits.__dict__,
        }

    @app.get("/api/run", summary="one run: info, config, loss curves")
    def run(run: str) -> dict:
        from tinyformer.config import to_dict
        from tinyformer.info import describe

        held = get(store, run)
        info = describe(held.run)  # counts parameters: no torch kernel runs
        with blame("run", 409):  # its config.json replaced by a bad one since it was loaded
            about = summary(store, run)
        return about | {
            "step": (held.run.state or {}).get("step"),
            "info": info,
            "config": to_dict(held.run.config),
            "metrics": metrics(held.run.path),
        }

    @app.post("/api/generate", summary="continue a prompt (as `tinyformer sample`); stream: server-sent events")
    async def generate(body: Generate):
        held = await run_in_threadpool(get, store, body.run, "generate")  # may load the run: not on the loop
        job = Generation(store, held, body, limits)
        if not await slots.acquire(limits.wait_s):  # waits on the event loop, holding no thread
            raise Bad("run", f"every one of the {limits.max_generations} generation slots is busy; try again", 503)
        if not body.stream:
            try:
                return JSONResponse(await job.collect())  # plain JSON: FastAPI's encoder would walk every float
            finally:
                slots.release()
        return StreamingResponse(events(job, slots), media_type="text/event-stream")

    @app.post("/api/next-token", summary="the next-token distribution after a prompt")
    def next_token(body: Sampling) -> dict:
        held = get(store, body.run, view="generate")
        one = Generate(**body.model_dump(), tokens=1, seed=0)
        job = Generation(store, held, one, limits)
        return {"prompt": job.text, "distribution": job.distribution_now()}

    @app.post("/api/attention", summary="attention from one token, every layer x head, with head roles")
    def attention(body: Attention) -> dict:
        held = get(store, body.run, view="attention")

        def answer() -> dict:
            with inference(held.run.model), held.run.autocast():
                return attention_from(held.run, body.text, body.ids, body.query, body.part)

        return store.call(answer)

    @app.post("/api/predict", summary="the task's answer for its inputs, as panels")
    def predict(body: Predict) -> dict:
        held = get(store, body.run, view="predict")
        options = task_options(held.run.task, body.inputs)

        def answer() -> dict:
            with inference(held.run.model), held.run.autocast(), blame("inputs"):
                return {"panels": held.run.task.play(held.run.model, **options)}

        return store.call(answer)

    return app


def get(store: RunStore, name: str, view: str | None = None):
    """The loaded run `name`, which must offer `view`; else a 4xx naming the field."""
    try:
        held = store.get(name)
    except NotFound:
        raise Bad("run", f"no run {name!r} under the served folder; GET /api/runs lists them", 404) from None
    except Busy:
        raise Bad("run", f"run {name!r} is writing a checkpoint right now; try again in a moment", 503) from None
    except UserError as e:
        raise Bad("run", str(e), 409) from None
    task = held.run.task
    if view is not None and view not in task.views:
        raise Bad("run", f"a {task.name!r} run has no {view!r} view; it has {', '.join(task.views)}")
    return held


def summary(store: RunStore, name: str) -> dict:
    """What the page needs to draw a run's views, from its config alone (no weights are loaded)."""
    from tinyformer.runs import read_config

    config, task = read_config(store.path(name))
    return {
        "name": name,
        "task": config.task,
        "views": list(task.views),
        "inputs": inputs(task),
        "max_iters": config.train.max_iters,
        "block_size": getattr(config.model, "block_size", None),
        "sample": config.sample.__dict__ if "generate" in task.views else None,
    }


# ---- generation -------------------------------------------------------------------------------------------
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


# ---- errors and limits ------------------------------------------------------------------------------------
def add_errors(app: FastAPI, limits: Limits) -> None:
    @app.exception_handler(Bad)
    def bad(_: Request, e: Bad) -> JSONResponse:
        return JSONResponse({"error": str(e), "field": e.field}, status_code=e.status)

    @app.exception_handler(RequestValidationError)
    def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0]
        if first["type"] == "json_invalid":  # its loc is the character offset, not a field
            why = (first.get("ctx") or {}).get("error") or first["msg"]  # e.g. "Expecting value: line 1 column 9"
            return JSONResponse({"error": f"the body is not JSON: {why}", "field": "body"}, 422)
        loc = list(first["loc"])
        field = ".".join(str(p) for p in (loc[1:] if loc and loc[0] in ("body", "query", "path") else loc))
        if first["type"] == "value_error":  # our own rule (check_sampling): its message names field and value
            return JSONResponse({"error": str(first["ctx"]["error"]), "field": field}, 422)
        value = f" (got {first['input']!r:.60})" if "input" in first and field else ""
        return JSONResponse({"error": f"{field or 'body'}: {first['msg']}{value}", "field": field or "body"}, 422)

    @app.exception_handler(HTTPException)
    def http(request: Request, e: HTTPException) -> JSONResponse:  # no route (404), wrong method (405), a body
        field = {404: "path", 405: "method"}.get(e.status_code, "body")  # that cannot be decoded (400)
        what = {
            400: "the body cannot be parsed: it is not UTF-8 JSON",  # FastAPI's only 400 is a body it cannot decode
            404: f"no {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }
        return JSONResponse({"error": what.get(e.status_code, str(e.detail)), "field": field}, e.status_code)

    @app.exception_handler(Exception)
    def crash(_: Request, e: Exception) -> JSONResponse:  # a bug of ours: logged here, one line to the client
        traceback.print_exception(e, file=sys.stderr)
        return JSONResponse({"error": f"internal error ({type(e).__name__}); see the server's log", "field": ""}, 500)

    app.add_middleware(BodyLimit, limit=limits.max_body)


class BodyLimit:
    """ASGI middleware: a body over `limit` bytes is refused with a 413, by its Content-Length or, when it has
    none (chunked), once that many bytes have arrived; such a body is read here and handed on whole."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        size = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1")
        if size and (not size.isdigit() or int(size) > self.limit):
            return await self.refuse(f"the request body is {size} bytes", scope, receive, send)
        if size or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            body, more = body + message.get("body", b""), message.get("more_body", False)
            if len(body) > self.limit:
                return await self.refuse("the request body is over that", scope, receive, send)
        done = False

        async def whole():
            nonlocal done
            if done:
                return await receive()  # after the body: a disconnect, when the client leaves
            done = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, whole, send)

    async def refuse(self, what: str, scope, receive, send) -> None:
        msg = f"{what}; this server takes at most {self.limit} bytes (--max-body)"
        await JSONResponse({"error": msg, "field": "body"}, 413)(scope, receive, send)


# ---- running it ---------------------------------------------------------------------------------------------
def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0 = any free port), or one line saying why not. It listens at once, so
    that a client given the URL before the server's loop starts waits in the backlog instead of being refused."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror}; try another --port") from None
    return sock


@contextlib.contextmanager
def background(app: FastAPI, host: str = "127.0.0.1") -> Iterator[str]:
    """`app` served by uvicorn in a thread of this process, on a free port -> its base URL; stopped on exit."""
    import uvicorn

    sock = bind(host, 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.02)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
