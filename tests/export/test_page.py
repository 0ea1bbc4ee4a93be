"""`tinyformer export page`: one HTML file that runs a MiniGPT in the browser.

Without a browser: the stored weights are what the page reads back, the page's CSP allows exactly its own
inline script and style, its data cannot close its script block, and what the engine does not run is refused
in one line. In Debian's Chromium (playwright, `file://`, offline): the engine's logits equal PyTorch's for
every architecture switch it runs, greedy text equals `tinyformer sample --temperature 0` for a learned-position
and a rotary run (past the window, where the cache is rebuilt), the fp16 page computes what its stored
weights give, and the page streams, shows distributions and attention, and speaks Chinese.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest
import torch

from tests.cli_helpers import FAST, TINY, cli
from tinyformer import api
from tinyformer.config import SampleConfig
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.export.page import as_read, pack, page_data, render, stored_model
from tinyformer.generate.sampling import generate_text
from tinyformer.models.gpt import GPTConfig, MiniGPT

CHARS = list("\n !',-.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz<>/")  # 65, with "<" "/" ">"
SAMPLE = {"prompt": "\n", "tokens": 50, "temperature": 0.8, "top_k": 40, "top_p": 1.0, "seed": 1}


def random_gpt(**kw) -> MiniGPT:
    """A MiniGPT whose every parameter is random (biases and norms too), so a misread one shows in the logits."""
    torch.manual_seed(0)
    c = dict(vocab_size=len(CHARS), block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0) | kw
    model = MiniGPT(GPTConfig(**c)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return model


def write_page(model, path, precision="fp32", name="test"):
    html = render(page_data(model, CharTokenizer(CHARS), precision, name, SAMPLE, "info"))
    path.write_text(html, encoding="utf-8")
    return path


def data_of(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="tf-model">(.*?)</script>', html, re.S)[1])


# ---- without a browser -------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_the_blob_holds_what_the_page_reads_back(precision):
    model = random_gpt()
    state = {k: v.float() for k, v in model.state_dict().items()}
    header, blob = pack(state, precision)
    for name, x in state.items():  # decoded here the way engine.js decodes it
        t = header[name]
        n, at = x.numel(), t["offset"]
        assert at % 4 == 0
        if t["dtype"] == "f32":
            got = torch.frombuffer(bytearray(blob[at : at + 4 * n]), dtype=torch.float32)
        elif t["dtype"] == "f16":
            got = torch.frombuffer(bytearray(blob[at : at + 2 * n]), dtype=torch.float16).float()
        else:
            q = torch.frombuffer(bytearray(blob[at : at + n]), dtype=torch.int8).float().view(x.size(0), -1)
            s = torch.frombuffer(bytearray(blob[t["scales"] : t["scales"] + 4 * x.size(0)]), dtype=torch.float32)
            got = q * s[:, None]
        assert torch.equal(got.view_as(x), as_read(x, precision)), name
    vectors = [k for k, x in state.items() if x.dim() < 2]
    assert all(header[k]["dtype"] == "f32" for k in vectors)  # norms and biases are never rounded
    worst = max(float((as_read(x, precision) - x).abs().max() / x.abs().max()) for x in state.values())
    assert worst == 0 if precision == "fp32" else 0 < worst <= {"fp16": 1e-3, "int8": 1 / 254 + 1e-6}[precision]


def test_the_stored_model_is_the_model_with_the_weights_the_page_reads():
    model = random_gpt(tie_weights=True)
    twin = stored_model(model, "int8")
    assert twin.head.weight is twin.tok_emb.weight  # the tie survives the copy
    assert torch.equal(twin.blocks[0].mlp.fc.weight, as_read(model.blocks[0].mlp.fc.weight.detach(), "int8"))
    assert not torch.equal(twin.blocks[0].mlp.fc.weight, model.blocks[0].mlp.fc.weight)


def test_the_csp_allows_exactly_the_inline_script_and_style_and_the_data_cannot_close_its_block(tmp_path):
    html = write_page(random_gpt(), tmp_path / "p.html", name="</script><script>alert(1)</script>").read_text()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)[1]
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(scripts) == 1 and len(styles) == 1

    def digest(text):
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    rules = dict((part.split()[0], part.split()[1:]) for part in csp.split("; "))
    assert rules["default-src"] == ["'none'"]
    # its own script, and WebAssembly compiled by it (the matrix products); no JavaScript eval
    assert rules["script-src"] == [digest(scripts[0]), "'wasm-unsafe-eval'"] and rules["style-src"] == [
        digest(styles[0])
    ]
    assert (
        "'unsafe-eval'" not in csp
        and "unsafe-inline" not in csp
        and "http" not in html.split("<body>")[1].split('id="tf-model"')[0]
    )
    assert data_of(html)["name"] == "</script><script>alert(1)</script>"  # parsed back whole: never closed early
    assert html.count("</script>") == 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(attention="linear"), "softmax attention"),
        (dict(causal=False), "causal models"),
    ],
)
def test_what_the_engine_does_not_run_is_refused(kw, message):
    with pytest.raises(UserError, match=message):
        page_data(random_gpt(**kw), CharTokenizer(CHARS), "fp16", "x", SAMPLE)


def test_the_command_refuses_an_existing_file_a_folder_and_an_encoder_decoder(trained, reversal_run, tmp_path):
    existing = tmp_path / "there.html"
    existing.write_text("mine")
    for args, message in (
        ([str(trained), str(existing)], "exists; give a new file, or --force"),
        ([str(trained), str(tmp_path)], "is a folder; give a file to write"),
        ([str(reversal_run), str(tmp_path / "r.html")], "runs MiniGPT language models"),
    ):
        r = cli("export", "page", *args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert existing.read_text() == "mine" and not (tmp_path / "r.html").exists()


# ---- in Chromium -------------------------------------------------------------------------------------
@pytest.fixture
def open_page(browser):
    """open_page(path) -> a playwright page of the file, its engine ready; requests that leave the file and
    console errors are recorded on it."""
    contexts = []

    def open_(path, address=""):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.elsewhere, page.errors = [], []
        page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else page.elsewhere.append(r.url))
        page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.goto(path.as_uri() + address)
        page.evaluate("tinyformer.ready")
        return page

    yield open_
    for context in contexts:
        context.close()


VARIANTS = {
    "learned": {},
    "sinusoidal": dict(positions="sinusoidal"),
    "sinusoidal-default-init": dict(positions="sinusoidal", init="default"),
    "rope-gqa-swiglu": dict(positions="rope", n_kv_head=2, ffn="swiglu", rope_base=500.0),
    "none-relu2-tied": dict(positions="none", ffn="relu2", tie_weights=True),
    "qknorm-softcap-relu": dict(qk_norm=True, logit_softcap=5.0, ffn="relu"),
    "gelu-tanh-qkv-bias-mqa": dict(ffn="gelu_tanh", qkv_bias=True, n_kv_head=1),
    "llama": dict(norm="rmsnorm", norm_eps=1e-6, bias=False, positions="rope", ffn="swiglu", n_kv_head=2),
    "qwen2-layernorm-no-bias": dict(qkv_bias=True, bias=False),  # a LayerNorm without its bias too
}


@pytest.mark.slow
@pytest.mark.parametrize("products", ["simd", "js"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_engine_computes_minigpts_logits(variant, products, open_page, tmp_path):
    model = random_gpt(**VARIANTS[variant])
    page = open_page(write_page(model, tmp_path / "p.html"), "#js" if products == "js" else "")
    assert page.evaluate("tinyformer.engine.simd()") == (products == "simd")  # WebAssembly runs under the CSP
    g = torch.Generator().manual_seed(1)
    for T in (1, 5, 16):
        ids = torch.randint(0, len(CHARS), (T,), generator=g).tolist()
        got = torch.tensor(page.evaluate("ids => tinyformer.logits(ids)", ids))
        with torch.no_grad():
            want = model(torch.tensor([ids])).logits[0, -1]
        assert (got - want).abs().max() < 1e-3, (variant, T, (got - want).abs().max())
    # past the window (16): the page slides it and rebuilds its cache as `generate` does
    text = page.evaluate("tinyformer.generate('ab', {tokens: 40, temperature: 0})")
    want = generate_text(model, CharTokenizer(CHARS), SampleConfig(prompt="ab", tokens=40, temperature=0))
    assert text == want
    assert page.errors == [] and page.elsewhere == []
    with pytest.raises(Exception, match="violates the following Content Security Policy"):
        page.wait_for_function("1 === 2", timeout=5000)  # polled by evaluating a string in the page: eval


@pytest.mark.slow
def test_the_engines_sampling_filters_as_tinyformers(open_page, tmp_path):
    from tinyformer.generate.sampling import filter_logits

    page = open_page(write_page(random_gpt(), tmp_path / "p.html"))
    g = torch.Generator().manual_seed(2)
    for top_k, top_p in ((0, 1.0), (5, 1.0), (0, 0.5), (7, 0.9), (0, 0.05)):
        logits = torch.randn(65, generator=g, dtype=torch.float64)
        got = page.evaluate("([x, k, p]) => tinyformer.engine.filterLogits(x, k, p)", [logits.tolist(), top_k, top_p])
        got = torch.tensor([float("-inf") if v is None else v for v in got], dtype=torch.float64)
        assert torch.equal(torch.isinf(got), torch.isinf(filter_logits(logits[None], top_k, top_p)[0]))
    one = "tinyformer.generate('ab', {tokens: 30, temperature: 1, top_k: 10, seed: SEED})"
    a, b, c = (page.evaluate(one.replace("SEED", s)) for s in ("3", "3", "4"))
    assert a == b != c  # a seed draws the same text every time; another seed another text


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory, text_file_module):
    """A learned-position run trained in bf16 autocast (emulated where the CPU lacks bf16) and a rotary run in fp32,
    ~30 steps each; `sample` computes both in fp32 on a CPU, as the page does."""
    root = tmp_path_factory.mktemp("page")
    for which, precision in (("learned", "bf16"), ("rope", "fp32")):
        steps = ["train.max_iters=30", "sample.tokens=20", f"train.precision={precision}", f"model.positions={which}"]
        sets = [x for s in steps for x in ("--set", s)]
        r = cli("train", "gpt", "--data", str(text_file_module), *TINY, *FAST, *sets, "--out", str(root / which))
        assert r.returncode == 0, r.stderr
    return root


@pytest.fixture(scope="module")
def text_file_module(tmp_path_factory):
    import os
    from pathlib import Path

    src = os.environ.get("TINYFORMER_DATA")
    path = tmp_path_factory.mktemp("text") / "slice.txt"
    path.write_text(Path(src).read_text(encoding="utf-8")[:60_000] if src else "to be or not to be\n" * 3000)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("which", ["learned", "rope"])
def test_200_greedy_tokens_equal_tinyformer_sample_and_fp16_computes_its_stored_weights(
    which, page_runs, open_page, tmp_path
):
    folder = page_runs / which
    pages = {}
    for precision in ("fp32", "fp16"):
        r = cli("export", "page", str(folder), str(tmp_path / f"{precision}.html"), "--precision", precision)
        assert r.returncode == 0, r.stderr
        pages[precision] = open_page(tmp_path / f"{precision}.html")
    printed = float(re.search(r"largest logit difference ([\d.e+-]+)", r.stdout)[1])  # the fp16 export's cost
    run = api.load(folder)
    run.model.float()
    sampled = cli("sample", str(folder), "--prompt", "ROMEO:", "--tokens", "200", "--temperature", "0")
    assert sampled.returncode == 0, sampled.stderr
    got = pages["fp32"].evaluate("tinyformer.generate('ROMEO:', {tokens: 200, temperature: 0})")
    assert got + "\n" == sampled.stdout  # past the window (block_size 32) too: the cache rebuilt as sample does
    ids = run.tokenizer.encode(got)[-32:]
    with torch.no_grad():
        want = run.model(torch.tensor([ids])).logits[0, -1]
        twin = stored_model(run.model, "fp16")(torch.tensor([ids])).logits[0, -1]
    fp32 = torch.tensor(pages["fp32"].evaluate("ids => tinyformer.logits(ids)", ids))
    fp16 = torch.tensor(pages["fp16"].evaluate("ids => tinyformer.logits(ids)", ids))
    assert (fp32 - want).abs().max() < 1e-3
    assert (fp16 - twin).abs().max() < 1e-3  # the page computes what its stored weights give ...
    assert 0 < (fp16 - want).abs().max() < 0.05  # ... which costs a bounded error against fp32
    assert 0 < printed < 0.05


@pytest.mark.slow
def test_the_attention_the_page_shows_is_pytorchs_for_the_prompt_and_past_the_window(trained, open_page, tmp_path):
    from tinyformer.viz.capture import capture_attention

    assert cli("export", "page", str(trained), str(tmp_path / "p.html"), "--precision", "fp32").returncode == 0
    page = open_page(tmp_path / "p.html")
    run = api.load(trained)
    window = run.config.model.block_size
    prompt = run.tokenizer.encode("ROMEO: But, soft!")
    steps = page.evaluate(
        """([ids, n]) => { const s = tinyformer.session(), all = [...ids], seen = [];
        for (let k = 0; k < n; k++) {
          const logits = s.next(all, true, (i, offset, w) => seen.push([i, offset, Array.from(w)]));
          all.push(tinyformer.engine.argmax(logits));
        }
        return {all, seen}; }""",
        [prompt, window + 10],
    )
    ids, seen = steps["all"], steps["seen"]
    assert [i for i, _, _ in seen] == list(range(len(ids) - 1))  # every token once: the prompt's, then each new one
    L, H = run.config.model.n_layer, run.config.model.n_head
    for i, offset, w in seen:
        assert offset == max(0, i + 1 - window)  # the window that ends at token i, as `sample` slides it
        with torch.no_grad():
            maps = capture_attention(run.model.float(), torch.tensor([ids[offset : i + 1]]), run.tokenizer)
        want = torch.stack([m[0, :, -1] for m in maps.layers])  # (L, H, i - offset + 1): token i's row
        assert (torch.tensor(w).view(L, H, -1) - want).abs().max() < 1e-4, i


@pytest.mark.slow
def test_the_page_streams_shows_distributions_and_attention_offline_and_in_chinese(trained, open_page, tmp_path):
    from tests.serve.test_page import blank

    r = cli("export", "page", str(trained), str(tmp_path / "demo.html"))
    assert r.returncode == 0 and "MB" in r.stdout, r.stderr
    page = open_page(tmp_path / "demo.html")
    expect = pytest.importorskip("playwright.sync_api").expect
    page.fill("#prompt", "ROMEO:")
    page.fill("#tokens", "60")
    page.fill("#temperature", "0")
    page.click("#go")
    expect(page.locator("#output .tok.gen")).to_have_count(60, timeout=60_000)
    expect(page.locator("#speed")).to_have_attribute("data-tokens-per-s", re.compile(r"^[\d.]+$"))
    assert page.inner_text("#output").startswith("ROMEO:")
    page.locator("#output .tok.gen").nth(10).click()  # token 16
    assert page.locator("#grid .cell").count() == 1 * 2  # 1 layer x 2 heads
    assert "token 16" in page.inner_text("#att-title")
    assert page.locator("#dist .dist-row").count() == 20
    assert page.locator("#dist .dist-row.cut").count() == 19  # temperature 0 keeps only the argmax
    assert page.locator("#dist .dist-row").first.get_attribute("class") == "dist-row chosen"
    for field, value, message in (
        ("#temperature", "-1", "temperature = -1 must be a number >= 0"),
        ("#prompt", "ROMEO: ☃", '1 character(s) outside the vocabulary: "☃"'),
    ):
        page.fill(field, value)
        page.click("#go")
        expect(page.locator("#error")).to_have_text(re.compile(re.escape(message)))
        page.fill("#temperature", "0")
        page.fill("#prompt", "ROMEO:")
    page.select_option("#lang", "zh")
    assert page.inner_text("#generate h2") == "生成" and "第 16 个词元" in page.inner_text("#att-title")
    shot = tmp_path / "page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert not blank(shot)
    assert page.errors == [] and page.elsewhere == []
