"""The playground's web app: one page (static/) and the JSON API under /api. The page uses every route but
next-token, which is there for scripts and notebooks (a distribution without generating).

- `GET  /api/runs`        the runs under the root, each with its task's views and inputs
- `GET  /api/run?run=`    one run: what `tinyformer info` prints, its config and its loss curves
- `POST /api/generate`    a language model's continuation, as `tinyformer sample` gives it; `"stream": true`
                          sends each token as a server-sent event, with the step's next-token distribution
- `POST /api/next-token`  the next-token distribution after a prompt (what top-k, top-p and temperature do);
                          API only: the page reads each step's distribution from the generate stream
- `POST /api/attention`   the attention from one token of a text (or of ids), every layer x head, head roles
- `POST /api/predict`     the task's answer as panels (`Task.play`): probabilities, tags, a span, a matrix
- `GET  /api/page?run=`   a language model as one HTML file that runs it offline (`tinyformer export page`)

Every error is a JSON object {"error": one line, "field": the field it names} ("body" for a body that is not
JSON, "path" for an unknown address); bad input and bad data on disk get a 4xx, and the server keeps serving.
A run folder that cannot be read is listed under "unreadable" with its reason.
A task contributes its views through the task contract (`Task.views`, `predict_args`, `play`): nothing here
names a task. Limits (`Limits`) bound the body size, the tokens a request may ask for, and the generations
that run at once (the others wait for a slot, up to `wait_s`, holding no thread meanwhile).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from tinyformer.device import inference
from tinyformer.errors import UserError
from tinyformer.serve.bodies import Attention, Generate, Predict, Sampling
from tinyformer.serve.errors import add_errors
from tinyformer.serve.generation import Generation, events
from tinyformer.serve.limits import Limits, Slots
from tinyformer.serve.store import Busy, NotFound, RunStore, metrics
from tinyformer.serve.views import Bad, attention_from, blame, inputs, task_options
from tinyformer.tasks.base import VIEWS

STATIC = Path(__file__).parent / "static"
PAGE_FILES = {"app.js": "text/javascript", "style.css": "text/css"}
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"


def create_app(root: str | Path, device: str = "cpu", limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits()
    store = RunStore(root, device)
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
    page_routes(app)
    run_routes(app, store, limits)
    model_routes(app, store, limits)
    return app


def page_routes(app: FastAPI) -> None:
    """The page, its two assets and the API's own documentation page."""

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


def run_routes(app: FastAPI, store: RunStore, limits: Limits) -> None:
    """What the served folder holds: the runs (and those that cannot be read), one run's info and curves."""

    @app.get("/api/runs", summary="the runs under the served folder, and those that cannot be read (why)")
    def runs() -> dict:
        listed, unreadable = listing(store)
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
            "step": held.run.state.step,
            "info": info,
            "config": to_dict(held.run.config),
            "metrics": metrics(held.run.path),
            "page": page_refusal(held.run.model),
        }

    @app.get(
        "/api/page", summary="the run as one HTML file that runs it offline, as `tinyformer export page` writes it"
    )
    def page(run: str) -> Response:
        return page_download(store, run)


def listing(store: RunStore) -> tuple[list[dict], list[dict]]:
    """-> (each readable run's `summary`, each unreadable one's name with its one-line reason)."""
    listed, unreadable = [], []
    for name in store.names():
        try:
            listed.append(summary(store, name))
        except NotFound:
            continue  # gone since it was found
        except (UserError, OSError) as e:  # a bad file in it: named with its one-line reason
            unreadable.append({"name": name, "error": " ".join(str(e).split())})
    return listed, unreadable


def page_download(store: RunStore, run: str) -> Response:
    """The run as one HTML file (`tinyformer export page`'s), to download as RUN.html."""
    from tinyformer.export.page import page_html

    held = get(store, run, view="generate")
    with blame("run", 422):  # a model the page's engine does not run: the reason, in one line
        html = store.call(lambda: page_html(held.run))
    name = re.sub(r"[^\w.-]+", "-", run).strip("-") or "run"
    return Response(
        html, media_type="text/html", headers={"Content-Disposition": f'attachment; filename="{name}.html"'}
    )


def page_refusal(model) -> str | None:
    """Why `tinyformer export page` would refuse this model (one line), or None: it exports."""
    from tinyformer.export.page import check_exportable

    try:
        check_exportable(model)
    except UserError as e:
        return str(e)
    return None


def model_routes(app: FastAPI, store: RunStore, limits: Limits) -> None:
    """What a loaded model computes: a generation (at most `limits.max_generations` at once), the next-token
    distribution, attention, a task's answer. Each runs on the store's one model thread."""
    slots = Slots(limits.max_generations)

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
        return store.call(lambda: attention_of(held.run, body))

    @app.post("/api/predict", summary="the task's answer for its inputs, as panels")
    def predict(body: Predict) -> dict:
        held = get(store, body.run, view="predict")
        options = task_options(held.run.task, body.inputs)
        return store.call(lambda: panels_of(held.run, options))


def attention_of(run, body: Attention) -> dict:
    """/api/attention's answer, computed on the model thread in eval mode and the run's precision."""
    with inference(run.model), run.autocast():
        return attention_from(run, body.text, body.ids, body.query, body.part)


def panels_of(run, options: dict) -> dict:
    """/api/predict's answer: the task's panels for `options` (a bad input is a 4xx naming "inputs")."""
    with inference(run.model), run.autocast(), blame("inputs"):
        return {"panels": run.task.play(run.model, **options)}


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
