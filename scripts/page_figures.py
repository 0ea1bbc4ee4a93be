"""Figures of `tinyformer export page` and `export onnx` for runs, measured here (issue 59):

    python scripts/page_figures.py runs/demo runs/lab/gpt [--repeats 3]

Per run: the page's size in fp16, fp32 and int8, and the logit error each costs (the export's own line); in Debian's
Chromium, headless: how many of 200 greedy tokens from the run's prompt the fp32 and fp16 pages make equal to
`tinyformer sample --temperature 0`'s; the time from opening the file to the first generated token; tokens a second
while the page streams the run's own `sample.tokens` with the attention view on and off (clicking Generate, as a
visitor does), and of the engine alone inside the window (one cached step a token) and past it (a prefill of the
window a token); then onnxruntime's greedy tokens a second against tinyformer's own cached generation. Medians of
`--repeats`, side by side in one sitting. Prints the CPU and the browser.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"


def cpu() -> str:
    info = Path("/proc/cpuinfo").read_text()
    name = re.search(r"model name\s*:\s*(.*)", info)[1]
    flags = set(re.search(r"flags\s*:\s*(.*)", info)[1].split())
    extra = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name} ({', '.join(extra) or 'avx2'})"


def export(run: str, out: Path, precision: str) -> tuple[int, str]:
    r = subprocess.run(
        [sys.executable, "-m", "tinyformer", "export", "page", run, str(out), "--precision", precision, "--force"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stat().st_size, r.stdout


def greedy_in_browser(run: str, page_file: Path, prompt: str, pw, n: int = 200) -> str:
    """How many of `n` greedy tokens the page generates in Chromium equal `tinyformer sample --temperature 0`'s."""
    from tinyformer import api

    tokenizer = api.load(run).tokenizer
    r = subprocess.run(
        [sys.executable, "-m", "tinyformer", "sample", run, "--prompt", prompt, "--tokens", str(n)]
        + ["--temperature", "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    b = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
    page = b.new_page()
    page.goto(page_file.as_uri())
    got = page.evaluate("([p, n]) => tinyformer.generate(p, {tokens: n, temperature: 0})", [prompt, n])
    b.close()
    want, mine = tokenizer.encode(r.stdout[:-1]), tokenizer.encode(got)  # sample ends its text with a newline
    same = next((i for i, (x, y) in enumerate(zip(want, mine, strict=False)) if x != y), min(len(want), len(mine)))
    p0 = len(tokenizer.encode(prompt))
    return f"{same - p0} of {n}" + (" (all)" if same - p0 == n and len(want) == len(mine) else "")


def browser_figures(page_file: Path, tokens: int, repeats: int, pw) -> dict:
    b = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
    found: dict[str, list] = {"first_ms": [], "live": [], "quiet": [], "inside": [], "past": []}
    version = b.version
    for _ in range(repeats):
        context = b.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(page_file.as_uri())
        first = page.evaluate(
            "async () => { await tinyformer.ready; await tinyformer.generate(document.querySelector('#prompt').value,"
            " {tokens: 1}); return performance.now(); }"
        )
        found["first_ms"].append(first)  # since navigation started: load, parse, weights decoded, one token
        window = page.evaluate("tinyformer.spec.window")
        inside = page.evaluate(f"tinyformer.timed(tinyformer.decode([1]), {{tokens: {window - 2}, temperature: 0}})")
        found["inside"].append(inside["tokens"] / inside["seconds"])
        # a prompt that fills the window: every one of 40 tokens is a prefill of the whole window; timed the second
        # time (the first, in a fresh page, runs while the browser still compiles the prefill's code: ~60% slower)
        past = f"tinyformer.timed(tinyformer.decode(Array({window}).fill(1)), {{tokens: 40, temperature: 0}})"
        page.evaluate(past)
        past = page.evaluate(past)
        found["past"].append(past["tokens"] / past["seconds"])
        for live, key in ((True, "live"), (False, "quiet")):
            page.set_checked("#live", live)
            page.fill("#tokens", str(tokens))
            page.evaluate("delete document.querySelector('#speed').dataset.tokensPerS")
            page.click("#go")
            while page.evaluate("document.querySelector('#speed').dataset.tokensPerS") is None:
                time.sleep(0.05)
            found[key].append(float(page.evaluate("document.querySelector('#speed').dataset.tokensPerS")))
        context.close()
    b.close()
    return {k: statistics.median(v) for k, v in found.items()} | {"browser": f"Chromium {version}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    from playwright.sync_api import sync_playwright

    from tinyformer import api
    from tinyformer.export.onnx import tokens_per_second

    print(f"machine: {cpu()}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        for run in a.runs:
            loaded = api.load(run)
            n = sum(p.numel() for p in loaded.model.parameters())
            c = loaded.model.config
            tokens = loaded.config.sample.tokens
            print(f"\n## {run}: {n:,} parameters, block_size {c.block_size}, sample.tokens {tokens}")
            for precision in ("fp16", "fp32", "int8"):
                size, printed = export(run, Path(tmp) / f"{precision}.html", precision)
                error = re.search(r"largest logit difference (\S+)", printed)[1]
                greedy = re.search(r"greedy, .*", printed)[0]
                print(f"- {precision}: {size / 1e6:.2f} MB; largest logit difference {error}; {greedy}")
            for precision in ("fp32", "fp16"):
                same = greedy_in_browser(run, Path(tmp) / f"{precision}.html", loaded.config.sample.prompt, pw)
                print(f"- {precision} page in Chromium, greedy from the run's prompt: {same} tokens as `sample`'s")
            f = browser_figures(Path(tmp) / "fp16.html", loaded.config.sample.tokens, a.repeats, pw)
            print(f"- in {f['browser']}, fp16 page, medians of {a.repeats}:")
            print(f"  - opening the file to the first token: {f['first_ms']:.0f} ms")
            print(
                f"  - streaming {loaded.config.sample.tokens} tokens, attention view on: {f['live']:.0f} tokens/s; "
                f"off: {f['quiet']:.0f} tokens/s"
            )
            print(
                f"  - the engine alone: {f['inside']:.0f} tokens/s inside the window (one cached step each), "
                f"{f['past']:.0f} tokens/s past it (a prefill of {c.block_size} positions each)"
            )
            if c.attention == "softmax":
                t = tokens_per_second(loaded, n=200, repeats=a.repeats)
                print(
                    f"- greedy, 200 tokens: onnxruntime {t['onnxruntime']:.0f} tokens/s (the window re-run each "
                    f"step), tinyformer {t['tinyformer']:.0f} tokens/s (KV cache): "
                    f"{t['onnxruntime'] / t['tinyformer']:.2f}x"
                )


if __name__ == "__main__":
    main()
