"""The playground page in a real headless Chromium (Debian's /usr/bin/chromium, driven by playwright): it loads
only from the server, streams tokens, shows the attention grid of a clicked token and the distribution it was
drawn from, and draws an encoder task's panels. A screenshot of it is not blank."""

from __future__ import annotations

import re

import pytest

from tests.serve.test_api import serving

pytest.importorskip("fastapi")
expect = pytest.importorskip("playwright.sync_api").expect
pytestmark = pytest.mark.slow  # a real browser: the full suite, not the fast tier


@pytest.fixture(scope="module")
def url(runs_root):
    with serving(runs_root) as address:
        yield address


@pytest.fixture
def page(browser, url):
    """A page of the playground; every request that leaves the server, and every console error, is recorded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    p = context.new_page()
    p.elsewhere, p.errors = [], []
    p.on("request", lambda r: None if r.url.startswith(url) else p.elsewhere.append(r.url))
    p.on("console", lambda m: p.errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    yield p
    context.close()


def test_type_a_prompt_see_tokens_stream_click_one_see_the_attention_grid(page, url, tmp_path):
    page.goto(f"{url}/?run=gpt")
    page.wait_for_selector("#generate:not([hidden])")
    assert page.input_value("#run") == "gpt"
    page.fill("#prompt", "ROMEO:")
    page.fill("#tokens", "40")
    page.fill("#temperature", "0")  # greedy: the token drawn is the first of its distribution
    page.click("#go")
    expect(page.locator("#output .tok.gen")).to_have_count(40, timeout=60_000)  # (the page's CSP forbids eval)
    expect(page.locator("#speed")).to_have_text(re.compile(r"^[\d.]+ ms per token$"))  # the stream's last event
    text = page.inner_text("#output")
    assert text.startswith("ROMEO:") and len(page.locator("#output .tok").all()) == 46
    page.locator("#output .tok.gen").nth(10).click()  # token 16
    page.wait_for_selector("#grid .cell")
    assert page.locator("#grid .cell").count() == 1 * 2  # 1 layer x 2 heads
    assert "token 16" in page.inner_text("#att-title")
    assert page.locator("#grid .cell .role").first.inner_text()  # the head's role and score
    assert page.locator("#dist .dist-row").count() == 20
    assert page.locator("#dist .dist-row").first.get_attribute("class") == "dist-row chosen"
    assert page.locator("#dist .dist-row.cut").count() == 19  # temperature 0 keeps only the argmax
    assert "before token 16" in page.inner_text("#dist-step")
    shot = tmp_path / "playground.png"
    page.screenshot(path=str(shot), full_page=True)
    assert not blank(shot)
    assert page.elsewhere == [] and page.errors == [], (page.elsewhere, page.errors)


def test_step_adds_one_token_and_the_side_panel_shows_the_run(page, url):
    page.goto(f"{url}/?run=gpt")
    page.wait_for_selector("#generate:not([hidden])")
    page.click("#step")
    expect(page.locator("#output .tok.gen")).to_have_count(1)
    page.click("#step")
    expect(page.locator("#output .tok.gen")).to_have_count(2)
    assert page.locator("#curve polyline").count() == 2  # train and val
    assert "task gpt" in page.inner_text("#info")
    assert page.elsewhere == [] and page.errors == []


def test_an_encoder_task_gets_its_form_panels_and_attention(page, url):
    page.goto(f"{url}/?run=classify")
    page.wait_for_selector("#predict:not([hidden])")
    assert page.is_hidden("#generate")
    page.fill("#form textarea[name=text]", "ship sail wave")
    page.click("#form button[type=submit]")
    page.wait_for_selector("#panels .dist-row")
    assert page.locator("#panels .dist-row").count() == 3
    page.wait_for_selector("#att-tokens .tok")
    assert page.locator("#att-tokens .tok").first.inner_text() == "[CLS]"
    page.locator("#att-tokens .tok").nth(1).click()
    expect(page.locator("#att-title")).to_contain_text("token 1)")
    page.select_option("#run", "nested/reverse")
    expect(page.locator("#task")).to_contain_text("reverse run")
    page.fill("#form textarea[name=text]", "3 1 4")
    page.click("#form button[type=submit]")
    page.wait_for_selector("#panels table.matrix")
    assert "alignment" in page.inner_text("#panels")
    assert page.elsewhere == [] and page.errors == []


def test_bad_input_shows_the_servers_one_line(page, url):
    page.goto(f"{url}/?run=gpt")
    page.wait_for_selector("#generate:not([hidden])")
    page.fill("#prompt", "é")
    page.click("#go")
    page.wait_for_selector("#error:not([hidden])")
    assert "outside the vocabulary" in page.inner_text("#error")


def blank(png) -> bool:
    """Every pixel the same colour."""
    from PIL import Image

    return Image.open(png).convert("RGB").getcolors(maxcolors=1) is not None
