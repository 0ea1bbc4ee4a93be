"""`tinyformer bench serve --run RUN`: what the playground costs over `tinyformer sample`, measured side by side
in one process on one run, and how it answers 8 clients at once.

- ms per generated token: `sample`'s own path (the task's predict under the run's precision, as the CLI runs
  it) against POST /api/generate over HTTP on 127.0.0.1, the same settings: bare (`top: 0`, the tokens only,
  what `sample` computes), with each step's top-20 distribution, and streamed as the page reads it;
  alternated `repeats` times: medians, and each overhead the median of the rounds' own ratios;
- p50 / p95 latency and requests/s of 8 concurrent clients x 20 generate requests on a real server on
  127.0.0.1 (uvicorn in a thread), and how many failed;
- the page's weight (its three files), and, where Chromium is at /usr/bin/chromium, the time from the click
  on Generate to the first token on the page.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tinyformer.device import inference
from tinyformer.errors import UserError
from tinyformer.runfolder import is_run

PROMPT_SETTINGS = dict(temperature=0.8, top_k=40, seed=1)
CHROMIUM = Path("/usr/bin/chromium")


def run_serve_benchmark(run: str | None, repeats: int, tokens: int = 200, clients: int = 8, requests: int = 20) -> dict:
    import httpx

    from tinyformer.runs import read_config
    from tinyformer.serve.app import STATIC, background, create_app

    if run is None or not is_run(run):
        raise UserError("bench serve needs --run RUN, a language-model run folder (e.g. runs/demo)")
    config, task = read_config(Path(run))
    if "generate" not in task.views:
        raise UserError(f"bench serve needs a language-model run; {run} is a {config.task!r} run")
    app = create_app(run)  # the run folder itself, served as "."
    loaded = app.state.store.get(".").run  # loaded on the model thread: this thread never runs torch
    body = {"run": ".", "tokens": tokens, **PROMPT_SETTINGS}
    prompt = loaded.config.sample.prompt

    def sample() -> str:  # the CLI's own path, on the server's model thread (one OpenMP team in this process)
        def run() -> str:
            with inference(loaded.model), loaded.autocast():
                return loaded.task.predict(loaded.model, prompt=prompt, tokens=tokens, **PROMPT_SETTINGS)

        return app.state.store.call(run)

    with background(app) as url, httpx.Client(base_url=url, timeout=300) as client:  # real HTTP on 127.0.0.1

        def api() -> str:
            return client.post("/api/generate", json=body).json()["text"]

        def api_bare() -> str:  # what `sample` computes: the tokens, no distribution
            return client.post("/api/generate", json=body | {"top": 0}).json()["text"]

        def streamed() -> str:
            with client.stream("POST", "/api/generate", json=body | {"stream": True}) as r:
                return "".join(r.iter_text())

        ways = {"sample": sample, "api-bare": api_bare, "api": api, "api-stream": streamed}
        texts = {name: way() for name, way in ways.items()}  # warm-up (the decode backend's choice), untimed
        times = rounds(ways, repeats, tokens)
        ms = {name: statistics.median(t) for name, t in times.items()}
        out = {
            "run": str(run),
            "tokens": tokens,
            "repeats": repeats,
            "ms_per_token": ms,
            "overhead": {  # the median of each round's own ratio: a round runs every way back to back
                name: statistics.median(a / b - 1 for a, b in zip(times[name], times["sample"], strict=True))
                for name in ms
                if name != "sample"
            },
            "same_text": texts["sample"] == texts["api"] == texts["api-bare"],
            "page_kb": sum((STATIC / f).stat().st_size for f in ("index.html", "app.js", "style.css")) / 1024,
            "concurrent": concurrent(url, httpx, clients, requests),
            "browser": first_token_in_browser(url) if CHROMIUM.exists() else None,
        }
    report(out)
    return out


def rounds(ways: dict, repeats: int, tokens: int) -> dict[str, list[float]]:
    """ms per token of each way, `repeats` rounds that run every way back to back."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            times[name].append(1000 * (time.perf_counter() - start) / tokens)
    return times


def concurrent(url: str, httpx, clients: int, requests: int, tokens: int = 20) -> dict:
    """`clients` threads, each sending `requests` generate requests of `tokens` tokens one after another."""

    def session(k: int) -> list[tuple[int, float]]:
        out = []
        with httpx.Client(base_url=url, timeout=120) as c:
            for i in range(requests):
                start = time.perf_counter()
                r = c.post("/api/generate", json={"run": ".", "tokens": tokens, "seed": k * requests + i})
                out.append((r.status_code, 1000 * (time.perf_counter() - start)))
        return out

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = [x for xs in pool.map(session, range(clients)) for x in xs]
    wall = time.perf_counter() - start
    ms = sorted(t for _, t in done)
    return {
        "clients": clients,
        "requests": len(done),
        "tokens": tokens,
        "failed": sum(code != 200 for code, _ in done),
        "p50_ms": ms[len(ms) // 2],
        "p95_ms": ms[min(len(ms) - 1, round(0.95 * len(ms)))],
        "requests_per_s": len(done) / wall,
    }


def first_token_in_browser(url: str) -> dict | None:
    """Headless Chromium opens the page; the time from the click on Generate to the first token on the page."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox"])
        page = browser.new_page()
        start = time.perf_counter()
        page.goto(f"{url}/?run=.")
        page.wait_for_selector("#generate:not([hidden])")
        loaded = time.perf_counter() - start
        firsts = []
        for _ in range(3):
            page.fill("#tokens", "50")
            start = time.perf_counter()
            page.click("#go")
            page.wait_for_selector("#output .tok.gen")
            firsts.append(1000 * (time.perf_counter() - start))
            page.wait_for_selector("#stop[disabled]")
        browser.close()
    return {"page_ready_ms": 1000 * loaded, "first_token_ms": statistics.median(firsts)}


def report(out: dict) -> None:
    ms, c = out["ms_per_token"], out["concurrent"]
    rounds = f"median of {out['repeats']} rounds (overhead: of each round's own ratio)"
    print(f"run {out['run']}: {out['tokens']} tokens per generation, {rounds}")
    for name, value in ms.items():
        extra = "" if name == "sample" else f"  ({out['overhead'][name]:+.1%} over sample)"
        print(f"  {name:<10} {value:7.2f} ms/token{extra}")
    print(f"  same text as tinyformer sample: {'yes' if out['same_text'] else 'NO'}")
    print(
        f"{c['clients']} concurrent clients x {c['requests'] // c['clients']} requests of {c['tokens']} tokens: "
        f"p50 {c['p50_ms']:.0f} ms, p95 {c['p95_ms']:.0f} ms, {c['requests_per_s']:.1f} requests/s, "
        f"{c['failed']} failed"
    )
    print(f"page weight: {out['page_kb']:.1f} KB (index.html, app.js, style.css; no other asset)")
    b = out["browser"]
    if b:
        print(f"Chromium: page ready in {b['page_ready_ms']:.0f} ms, first streamed token {b['first_token_ms']:.0f} ms")
    else:
        print("Chromium: not measured (needs playwright and /usr/bin/chromium)")
