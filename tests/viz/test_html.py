"""The HTML attention explorer: one self-contained file (no URL, data inlined and faithful), driven
in a real headless Chromium from file:// with the network blocked."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from tinyformer.errors import UserError
from tinyformer.viz.capture import AttentionMaps
from tinyformer.viz.html import DIGITS, write_explorer
from tinyformer.viz.roles import ROLES, head_roles

TOKENS = ["[CLS]", "the", "鸟", "<&>", 'say "hi"', "[SEP]"]
TITLE = "Tiny <b>test</b> & 'quotes'"


def random_maps(layers: int = 3, heads: int = 4, tokens: list[str] = TOKENS, seed: int = 0) -> AttentionMaps:
    """Softmax-normalised random self-attention, one batch row."""
    g = torch.Generator().manual_seed(seed)
    T = len(tokens)
    weights = [torch.softmax(2.0 * torch.randn(1, heads, T, T, generator=g), dim=-1) for _ in range(layers)]
    return AttentionMaps(weights, [list(tokens)], [list(tokens)], "self", "random", {"cls": "[CLS]", "end": "[SEP]"})


def embedded(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', text, re.S)
    assert found, "no inlined data block"
    return json.loads(found.group(1))


@pytest.fixture
def explorer(tmp_path: Path) -> tuple[AttentionMaps, Path]:
    maps = random_maps()
    return maps, write_explorer(maps, tmp_path / "sub" / "explorer.html", title=TITLE)


def test_file_is_self_contained_and_inlines_the_data(explorer) -> None:
    maps, path = explorer
    text = path.read_text(encoding="utf-8")
    for ref in ("http://", "https://", "//cdn", "src=", "href=", "@import", "url("):
        assert ref not in text, f"external reference {ref!r} in the page"
    assert "<&>" not in text and "<b>test" not in text  # tokens and title are escaped
    data = embedded(path)
    assert data["queries"] == TOKENS and data["keys"] == TOKENS
    got = torch.tensor(data["weights"], dtype=torch.float64)  # (L, H, T, S)
    want = maps.stacked(0).double()
    assert got.shape == want.shape
    assert (got - want).abs().max() <= 0.5 * 10**-DIGITS + 1e-9
    roles = head_roles(maps)
    for r in ROLES:
        assert torch.allclose(
            torch.tensor(data["roles"]["scores"][r], dtype=torch.float64), roles.scores[r].double(), atol=6e-4
        )
    assert data["roles"]["dominant"] == roles.dominant


def test_size_of_a_bert_sized_page(tmp_path: Path) -> None:
    tokens = ["[CLS]"] + [f"tok{i}" for i in range(18)] + ["[SEP]"]
    path = write_explorer(random_maps(12, 12, tokens), tmp_path / "bert.html")
    assert path.stat().st_size < 1_000_000


def test_nan_roles_cross_attention_and_bad_row(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    w = [torch.softmax(torch.randn(2, 2, 3, 5, generator=g), -1)]
    maps = AttentionMaps(w, [["a", "b", "c"]] * 2, [list("vwxyz")] * 2, "cross")  # no [CLS]/[SEP]: NaN scores
    data = embedded(write_explorer(maps, tmp_path / "cross.html", row=1))
    assert data["roles"]["scores"]["self"] == [[None, None]]
    assert torch.allclose(torch.tensor(data["weights"][0], dtype=torch.float64), w[0][1].double(), atol=1e-4)
    with pytest.raises(UserError, match="row=2 is out of range"):
        write_explorer(maps, tmp_path / "bad.html", row=2)


# ---- the page in a real browser ------------------------------------------------------------


@dataclass
class Opened:
    page: object  # playwright Page
    attempted: list[str] = field(default_factory=list)  # every non-file URL the page tried to load
    errors: list[str] = field(default_factory=list)  # console errors (CSP violations too) and JS exceptions

    def clean(self) -> bool:
        return self.attempted == [] and self.errors == []


@pytest.fixture
def opened(browser, explorer):
    """The explorer opened from file://; every non-file request is aborted and recorded."""
    _, path = explorer
    context = browser.new_context(offline=True)
    ui = Opened(context.new_page())

    def block(route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            ui.attempted.append(route.request.url)
            route.abort()

    context.route("**/*", block)
    ui.page.on("request", lambda r: None if r.url.startswith("file://") else ui.attempted.append(r.url))
    ui.page.on("console", lambda m: ui.errors.append(m.text) if m.type == "error" else None)
    ui.page.on("pageerror", lambda e: ui.errors.append(str(e)))
    ui.page.goto(path.resolve().as_uri())
    yield ui
    context.close()


def canvas(page) -> str:
    return page.eval_on_selector("#heatmap", "c => c.toDataURL()")


def hover(page, i: int, j: int) -> dict[str, str]:
    """Move the real mouse over cell (query i, key j) and read the hover display."""
    box = page.locator("#heatmap").bounding_box()
    at = page.evaluate("([i, j]) => window.explorer.cellCenter(i, j)", [i, j])
    page.mouse.move(box["x"] + at["x"], box["y"] + at["y"])
    return {k: page.inner_text(f"#hover-{k}") for k in ("query", "key", "weight")}


def test_selectors_redraw_the_heatmap(opened) -> None:
    page = opened.page
    assert page.title() == TITLE and page.inner_text("#title") == TITLE
    first = canvas(page)
    page.select_option("#layer", "2")
    after_layer = canvas(page)
    page.select_option("#head", "3")
    after_head = canvas(page)
    page.select_option("#head", "mean")
    after_mean = canvas(page)
    assert len({first, after_layer, after_head, after_mean}) == 4
    page.select_option("#layer", "0")
    page.select_option("#head", "0")
    assert canvas(page) == first  # same head, same picture
    assert opened.clean(), (opened.attempted, opened.errors)


def test_hover_shows_both_tokens_and_the_weight(opened, explorer) -> None:
    page = opened.page
    maps, _ = explorer
    page.select_option("#layer", "1")
    page.select_option("#head", "2")
    for i, j in [(2, 3), (4, 0), (5, 5)]:
        shown = hover(page, i, j)
        assert TOKENS[i] in shown["query"] and TOKENS[j] in shown["key"]
        assert re.fullmatch(rf"[01]\.\d{{{DIGITS}}}", shown["weight"]), shown["weight"]
        assert abs(float(shown["weight"]) - float(maps.head(1, 2)[i, j])) <= 0.5 * 10**-DIGITS + 1e-7
    page.select_option("#head", "mean")
    shown = hover(page, 2, 3)
    mean = float(maps.layers[1][0, :, 2, 3].mean())
    assert abs(float(shown["weight"]) - mean) <= 10**-DIGITS
    assert opened.clean(), (opened.attempted, opened.errors)


def test_roles_table_lists_every_head_and_selects_on_click(opened, explorer) -> None:
    page = opened.page
    maps, _ = explorer
    rows = page.locator("#roles tbody tr")
    assert rows.count() == maps.n_layers * maps.n_heads
    roles = head_roles(maps)
    cells = rows.nth(2 * maps.n_heads + 1).locator("td").all_inner_texts()  # layer 2, head 1
    assert cells[:2] == ["2", "1"] and cells[-1] == roles.dominant[2][1]
    assert float(cells[2 + ROLES.index("cls")]) == pytest.approx(float(roles.scores["cls"][2, 1]), abs=6e-4)
    before = canvas(page)
    rows.nth(2 * maps.n_heads + 1).click()
    assert page.input_value("#layer") == "2" and page.input_value("#head") == "1"
    assert canvas(page) != before
    assert opened.clean(), (opened.attempted, opened.errors)
