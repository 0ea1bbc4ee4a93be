"""A self-contained interactive attention explorer: one HTML file, no network (in the spirit of bertviz).

`write_explorer(maps, path)` inlines one batch row of `AttentionMaps` (weights rounded to
`DIGITS` decimals) and its head-role scores as JSON, plus plain JavaScript that draws the
selected head (or the mean of all heads) as a heatmap on a <canvas>: query tokens down the
side, key tokens across the top. Hovering a cell shows both tokens and the weight; the role
table lists every head's scores and dominant role, and clicking a row selects that head.
The file opens from file:// with the network off: no URL of any kind is referenced, and a
Content-Security-Policy forbids loading anything.

Stable element ids: #layer, #head (value "mean" = all heads), #heatmap (the canvas),
#hover-info (with #hover-query, #hover-key, #hover-weight), #selection, #roles (the table),
#explorer-data (the JSON).
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import make_dir, write_text
from tinyformer.viz.capture import AttentionMaps
from tinyformer.viz.roles import ROLES, HeadRoles, head_roles

DIGITS = 4  # decimals kept for weights (and shown on hover)
ROLE_DIGITS = 3  # decimals kept for role scores


def write_explorer(
    maps: AttentionMaps, path: str | Path, *, roles: HeadRoles | None = None, row: int = 0, title: str = ""
) -> Path:
    """Write the explorer for batch row `row` to `path` (parents created); return the path."""
    batch = len(maps.query_tokens)
    if not 0 <= row < batch:
        raise UserError(f"row={row} is out of range: the attention maps hold {batch} batch rows (0-{batch - 1})")
    roles = roles if roles is not None else head_roles(maps, row)
    title = title or f"Attention explorer: {maps.model_name or 'model'} ({maps.kind})"
    fills = {"TITLE": html.escape(title), "DATA": _script_json(payload(maps, roles, row))}
    page = re.sub(r"%%(TITLE|DATA)%%", lambda m: fills[m.group(1)], _PAGE)  # one pass: no fill is re-read
    make_dir(Path(path).parent)
    return write_text(Path(path), page)


def payload(maps: AttentionMaps, roles: HeadRoles, row: int = 0) -> dict:
    """The JSON-ready data the page embeds: tokens, rounded (L, H, T, S) weights, role scores."""
    w = maps.stacked(row)  # (L, H, T, S)
    L, H = w.shape[:2]
    if roles.scores["self"].shape != (L, H):
        raise ValueError(f"roles are for {tuple(roles.scores['self'].shape)} heads, the maps have {(L, H)}")
    return {
        "model": maps.model_name,
        "kind": maps.kind,
        "queries": list(maps.query_tokens[row]),
        "keys": list(maps.key_tokens[row]),
        "digits": DIGITS,
        "weights": _rounded(w, DIGITS),
        "roles": {
            "names": list(ROLES),
            "scores": {r: _rounded(roles.scores[r], ROLE_DIGITS) for r in ROLES},
            "dominant": roles.dominant,
        },
    }


def _rounded(t: torch.Tensor, digits: int) -> list:
    """Nested lists of floats rounded to `digits` decimals; NaN becomes None (JSON null)."""
    scale = 10.0**digits
    values = (torch.round(t.double() * scale) / scale).tolist()  # k / 10**d prints as its short decimal

    def clean(x):
        return [clean(v) for v in x] if isinstance(x, list) else (None if math.isnan(x) else x + 0.0)

    return clean(values)


def _script_json(obj: dict) -> str:
    """Compact JSON that is safe inside <script>: no '<', '>' or '&' survive literally."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>%%TITLE%%</title>
<style>
  body { font: 14px system-ui, "Noto Sans", "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif;
         margin: 1.2em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .3em; }
  .muted { color: #666; }
  .controls { margin: .6em 0; display: flex; gap: 1.2em; align-items: center; flex-wrap: wrap; }
  #heatmap-wrap { position: relative; display: inline-block; }
  #overlay { position: absolute; left: 0; top: 0; }
  #hover-info { min-height: 1.5em; margin: .4em 0 1em; font-variant-numeric: tabular-nums; }
  #hover-weight { font-weight: bold; }
  .tok { background: #eef; padding: 0 .25em; border-radius: 3px; white-space: pre; }
  #roles-box { max-height: 28em; overflow: auto; display: inline-block; border: 1px solid #ccc; }
  #roles { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  #roles th, #roles td { padding: .15em .5em; text-align: right; }
  #roles th { position: sticky; top: 0; background: #f4f4f4; }
  #roles tbody tr { cursor: pointer; }
  #roles tbody tr:hover { outline: 1px solid #999; }
  #roles tr.selected { outline: 2px solid #d33; }
  #roles td.dominant { font-weight: bold; text-align: left; }
</style>
</head>
<body>
<h1 id="title">%%TITLE%%</h1>
<div id="meta" class="muted"></div>
<div class="controls">
  <label>Layer <select id="layer"></select></label>
  <label>Head <select id="head"></select></label>
  <span id="selection" class="muted"></span>
</div>
<div id="heatmap-wrap"><canvas id="heatmap"></canvas><canvas id="overlay"></canvas></div>
<div id="hover-info">Hover over a cell: query <span id="hover-query" class="tok"></span>
  attends to key <span id="hover-key" class="tok"></span> with weight <span id="hover-weight"></span></div>
<h2>Head roles</h2>
<p class="muted">Mean attention mass on itself / the previous / the next token / the start / the end token,
  and broadness (normalised entropy). Click a row to show that head.</p>
<div id="roles-box"><table id="roles"><thead></thead><tbody></tbody></table></div>
<script type="application/json" id="explorer-data">%%DATA%%</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
const L = DATA.weights.length, H = DATA.weights[0].length;
const T = DATA.queries.length, S = DATA.keys.length;
const FONT_FAMILY = 'system-ui, "Noto Sans", "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif';
const $ = (id) => document.getElementById(id);
const state = { layer: 0, head: 0, matrix: null };  // head is an index or "mean"; matrix is (T, S)
let geom = null;  // heatmap layout in CSS pixels, computed once (labels never change)

// ---- data ------------------------------------------------------------------------
function currentMatrix() {  // (T, S) weights of the selected head, or the mean of all heads
  const heads = DATA.weights[state.layer];
  if (state.head !== "mean") return heads[state.head];
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((s, h) => s + h[i][j], 0) / H));
}
function shortLabel(s) { return s.length > 14 ? s.slice(0, 13) + "\\u2026" : s; }

// ---- heatmap -----------------------------------------------------------------------
function layout() {  // cell size and label margins, from the widest token labels
  const cell = Math.max(4, Math.min(30, Math.floor(640 / Math.max(T, S))));
  const fontPx = Math.min(13, cell - 2), labels = cell >= 9;
  const ctx = $("heatmap").getContext("2d");
  ctx.font = fontPx + "px " + FONT_FAMILY;
  const widest = (toks) => labels ? Math.max(...toks.map((t) => ctx.measureText(shortLabel(t)).width)) : 0;
  const left = Math.ceil(widest(DATA.queries)) + 8, top = Math.ceil(widest(DATA.keys)) + 8;
  return { cell, fontPx, labels, left, top, width: left + S * cell + 2, height: top + T * cell + 2 };
}
function sizeCanvas(canvas) {  // backing store at device resolution, drawn in CSS pixels
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(geom.width * dpr); canvas.height = Math.round(geom.height * dpr);
  canvas.style.width = geom.width + "px"; canvas.style.height = geom.height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}
function colour(w) {  // white (0) to dark blue (1), linear in the weight
  const c = (a, b) => Math.round(a + (b - a) * Math.max(0, Math.min(1, w)));
  return "rgb(" + c(255, 8) + "," + c(255, 48) + "," + c(255, 107) + ")";
}
function drawHeatmap() {
  const ctx = sizeCanvas($("heatmap")), m = state.matrix, g = geom;
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, g.width, g.height);
  for (let i = 0; i < T; i++) for (let j = 0; j < S; j++) {
    ctx.fillStyle = colour(m[i][j]);
    ctx.fillRect(g.left + j * g.cell, g.top + i * g.cell, g.cell, g.cell);
  }
  if (!g.labels) return;
  ctx.fillStyle = "#222"; ctx.font = g.fontPx + "px " + FONT_FAMILY; ctx.textBaseline = "middle";
  ctx.textAlign = "right";  // query tokens down the side
  DATA.queries.forEach((t, i) => ctx.fillText(shortLabel(t), g.left - 4, g.top + (i + 0.5) * g.cell));
  ctx.textAlign = "left";  // key tokens across the top, written upwards
  DATA.keys.forEach((t, j) => {
    ctx.save(); ctx.translate(g.left + (j + 0.5) * g.cell, g.top - 4); ctx.rotate(-Math.PI / 2);
    ctx.fillText(shortLabel(t), 0, 0); ctx.restore();
  });
}
function cellCenter(i, j) {  // CSS pixels from the canvas's top-left corner (used by tests, too)
  return { x: geom.left + (j + 0.5) * geom.cell, y: geom.top + (i + 0.5) * geom.cell };
}
function cellAt(x, y) {  // [query, key] under a point in CSS pixels, or null
  const i = Math.floor((y - geom.top) / geom.cell), j = Math.floor((x - geom.left) / geom.cell);
  return i >= 0 && i < T && j >= 0 && j < S ? [i, j] : null;
}

// ---- hover -------------------------------------------------------------------------
function showHover(hit) {  // outline the cell on the overlay and fill #hover-info (textContent only)
  const ctx = sizeCanvas($("overlay")), g = geom;
  ctx.clearRect(0, 0, g.width, g.height);
  if (!hit) {
    for (const id of ["hover-query", "hover-key", "hover-weight"]) $(id).textContent = "";
    return;
  }
  const [i, j] = hit;
  ctx.fillStyle = "rgba(255, 200, 0, 0.12)";  // faint bands along the row and the column
  ctx.fillRect(g.left, g.top + i * g.cell, S * g.cell, g.cell);
  ctx.fillRect(g.left + j * g.cell, g.top, g.cell, T * g.cell);
  ctx.strokeStyle = "#d33"; ctx.lineWidth = 2;
  ctx.strokeRect(g.left + j * g.cell, g.top + i * g.cell, g.cell, g.cell);
  $("hover-query").textContent = DATA.queries[i] + " (" + i + ")";
  $("hover-key").textContent = DATA.keys[j] + " (" + j + ")";
  $("hover-weight").textContent = state.matrix[i][j].toFixed(DATA.digits);
}
function onMouseMove(ev) {
  const box = $("heatmap").getBoundingClientRect();
  showHover(cellAt(ev.clientX - box.left, ev.clientY - box.top));
}

// ---- roles table -------------------------------------------------------------------
function buildRoles() {
  const R = DATA.roles, head = document.createElement("tr");
  ["layer", "head", ...R.names, "dominant"].forEach((name) => {
    const th = document.createElement("th"); th.textContent = name; head.appendChild(th);
  });
  $("roles").tHead.appendChild(head);
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
    const tr = document.createElement("tr");
    tr.dataset.layer = l; tr.dataset.head = h;
    const cell = (text, shade) => {
      const td = document.createElement("td"); td.textContent = text;
      if (shade !== undefined) td.style.background = "rgba(8, 48, 107, " + (0.45 * shade).toFixed(3) + ")";
      tr.appendChild(td); return td;
    };
    cell(l); cell(h);
    R.names.forEach((r) => {
      const s = R.scores[r][l][h];
      s === null ? cell("\\u2013") : cell(s.toFixed(3), s);
    });
    cell(R.dominant[l][h]).className = "dominant";
    tr.addEventListener("click", () => select(l, h));
    $("roles").tBodies[0].appendChild(tr);
  }
}

// ---- selection ---------------------------------------------------------------------
function select(layer, head) {
  state.layer = layer; state.head = head; state.matrix = currentMatrix();
  $("layer").value = String(layer); $("head").value = String(head);
  for (const tr of $("roles").tBodies[0].rows) {
    tr.classList.toggle("selected", +tr.dataset.layer === layer && +tr.dataset.head === head);
  }
  $("selection").textContent = head === "mean" ? "mean of all " + H + " heads of layer " + layer
    : "layer " + layer + ", head " + head + ": dominant role " + DATA.roles.dominant[layer][head];
  drawHeatmap(); showHover(null);
}
function fillSelect(sel, n, what) {
  for (let k = 0; k < n; k++) sel.add(new Option(what + " " + k, String(k)));
}
function init() {
  $("meta").textContent = (DATA.model || "model") + " \\u00b7 " + DATA.kind + " attention \\u00b7 "
    + T + " queries \\u00d7 " + S + " keys \\u00b7 " + L + " layers \\u00d7 " + H + " heads"
    + " \\u00b7 colour: weight 0 (white) to 1 (dark blue)";
  fillSelect($("layer"), L, "layer"); fillSelect($("head"), H, "head");
  $("head").add(new Option("all heads (mean)", "mean"));
  const headValue = () => $("head").value === "mean" ? "mean" : +$("head").value;
  $("layer").addEventListener("change", () => select(+$("layer").value, headValue()));
  $("head").addEventListener("change", () => select(state.layer, headValue()));
  $("heatmap-wrap").addEventListener("mousemove", onMouseMove);
  $("heatmap-wrap").addEventListener("mouseleave", () => showHover(null));
  buildRoles();
  geom = layout();
  select(0, 0);
}
window.explorer = { cellCenter, select, state };
init();
</script>
</body>
</html>
"""
