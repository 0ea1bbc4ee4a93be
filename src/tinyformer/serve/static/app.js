// The tinyformer playground: draws what /api answers, and nothing else. Each view a run declares
// (/api/runs: "generate", "predict", "attention") has one drawing here; no task is named.
"use strict";

// The views a run may declare (tinyformer.tasks.base.VIEWS; a test keeps them equal): each is a section of the page.
const VIEWS = ["generate", "predict", "attention"];

const $ = (id) => document.getElementById(id);
const state = { run: null, ids: [], labels: [], dists: [], promptLength: 0, abort: null, selected: null };

// ---- talking to the API --------------------------------------------------------------------------
async function api(path, body) {
  const init = body === undefined ? {} :
    { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const r = await fetch(path, init);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function showError(e) {
  const p = $("error");
  p.textContent = e ? String(e.message || e) : "";
  p.hidden = !e;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k === "style") e.style.cssText = v; // through the CSSOM: the page's CSP allows no inline style attribute
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// A token as it can be seen: spaces and newlines made visible.
const shown = (t) => t.replace(/\n/g, "⏎\n").replace(/ /g, "␣") || "∅";

// ---- runs and the side panel --------------------------------------------------------------------
async function loadRuns() {
  const data = await api("/api/runs");
  const select = $("run");
  const bad = (data.unreadable || []).map((r) =>
    el("option", { value: "", disabled: "", title: r.error, text: `${r.name} (cannot be read: ${r.error})` }));
  select.replaceChildren(...data.runs.map((r) => el("option", { value: r.name, text: `${r.name} (${r.task})` })), ...bad);
  if (!data.runs.length) showError(`no finished runs under ${data.root} yet`);
  const wanted = new URLSearchParams(location.search).get("run");
  if (wanted && data.runs.some((r) => r.name === wanted)) select.value = wanted;
  select.onchange = () => openRun(select.value);
  if (select.value) await openRun(select.value);
}

async function openRun(name) {
  showError(null);
  const run = await api(`/api/run?run=${encodeURIComponent(name)}`);
  state.run = run;
  $("task").textContent = `${run.task} run, step ${run.step} of ${run.max_iters}`;
  $("info").textContent = run.info;
  $("page-link").hidden = !run.views.includes("generate") || run.page !== null;
  $("page-link").href = `/api/page?run=${encodeURIComponent(name)}`;
  drawCurve(run.metrics);
  for (const view of VIEWS) $(view).hidden = !run.views.includes(view);
  $("att-text").hidden = run.views.includes("generate");
  $("grid").replaceChildren(); $("att-tokens").replaceChildren(); $("att-title").textContent = "";
  if (run.views.includes("generate")) setUpGenerate(run);
  if (run.views.includes("predict")) setUpPredict(run);
}

function drawCurve(metrics) {
  const svg = $("curve"), W = 300, H = 160, pad = 28;
  const all = [...metrics.train, ...metrics.val];
  svg.replaceChildren();
  if (!all.length) return;
  const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs) || 1, Math.min(...ys), Math.max(...ys)];
  const sx = (x) => pad + ((x - x0) / (x1 - x0 || 1)) * (W - pad - 6);
  const sy = (y) => 6 + ((y1 - y) / (y1 - y0 || 1)) * (H - pad - 6);
  const ns = "http://www.w3.org/2000/svg";
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  for (const [split, colour] of [["train", "#94a3b8"], ["val", "#2563eb"]]) {
    const pts = metrics[split].map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    if (pts) add("polyline", { points: pts, fill: "none", stroke: colour, "stroke-width": 1.5 });
  }
  add("text", { x: 2, y: 12, "font-size": 10 }, y1.toFixed(2));
  add("text", { x: 2, y: H - pad, "font-size": 10 }, y0.toFixed(2));
  add("text", { x: pad, y: H - 8, "font-size": 10 }, `step ${x0}`);
  add("text", { x: W - 60, y: H - 8, "font-size": 10 }, `${x1}`);
  add("text", { x: W - 110, y: 12, "font-size": 10, fill: "#2563eb" }, "val");
  add("text", { x: W - 80, y: 12, "font-size": 10, fill: "#94a3b8" }, "train");
}

// ---- generate: stream tokens, the distribution of each step ----------------------------------------
function setUpGenerate(run) {
  const s = run.sample;
  $("prompt").value = s.prompt;
  for (const k of ["tokens", "temperature", "top_k", "top_p", "seed"]) $(k).value = s[k];
  state.ids = []; state.labels = []; state.dists = []; state.promptLength = 0;
  $("output").replaceChildren(); $("dist").replaceChildren(); $("speed").textContent = "";
}

function settings() {
  const num = (id) => Number($(id).value);
  return {
    run: state.run.name, prompt: $("prompt").value, tokens: num("tokens"), temperature: num("temperature"),
    top_k: num("top_k"), top_p: num("top_p"), seed: num("seed"),
  };
}

function startOutput(promptIds, promptTokens) {
  state.ids = [...promptIds]; state.labels = [...promptTokens]; state.dists = promptIds.map(() => null);
  state.promptLength = promptIds.length;
  $("output").replaceChildren(...promptTokens.map((t, i) => tokenSpan(t, i, "prompt")));
}

function addToken(step) {
  const i = state.ids.length;
  const dist = step.distribution;  // columns: id, token, p, p_temp, kept, p_final
  state.ids.push(step.id); state.labels.push(dist.token[dist.id.indexOf(step.id)] ?? step.text);
  state.dists.push(dist);
  $("output").append(tokenSpan(state.labels[i], i, "gen"));
  drawDistribution(i);
}

function tokenSpan(text, i, kind) {
  const span = el("span", { class: `tok ${kind}`, "data-i": i, text });
  span.onclick = () => selectToken(i);
  return span;
}

async function generate() {
  showError(null);
  const controller = new AbortController();
  state.abort = controller;
  $("go").disabled = $("step").disabled = true; $("stop").disabled = false;
  try {
    const r = await fetch("/api/generate", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...settings(), stream: true }), signal: controller.signal,
    });
    if (!r.ok) throw new Error((await r.json()).error);
    const reader = r.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        onEvent(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") showError(e);
  } finally {
    $("go").disabled = $("step").disabled = false; $("stop").disabled = true; state.abort = null;
  }
}

function onEvent(block) {
  const kind = /^event: (.*)$/m.exec(block)?.[1], data = JSON.parse(/^data: (.*)$/m.exec(block)[1]);
  if (kind === "start") startOutput(data.prompt_ids, data.prompt_tokens);
  else if (kind === "token") addToken(data);
  else if (kind === "done") $("speed").textContent = `${data.ms_per_token.toFixed(1)} ms per token`;
  else if (kind === "error") showError(data.error);
}

async function step() {
  showError(null);
  const s = settings();
  const prompt = state.ids.length ? $("output").textContent : s.prompt;
  try {
    const out = await api("/api/generate", { ...s, prompt, tokens: 1, seed: s.seed + state.ids.length });
    if (!state.ids.length) startOutput(out.prompt_ids, out.prompt_tokens);
    addToken(out.steps[0]);
  } catch (e) { showError(e); }
}

function drawDistribution(i) {
  const dist = state.dists[i];
  $("dist-step").textContent = dist ? `before token ${i} (“${shown(state.labels[i])}”)` : "";
  if (!dist) return $("dist").replaceChildren(el("p", { class: "muted", text: "a prompt token: nothing was drawn" }));
  const rows = dist.id.map((id, k) => ({ id, token: dist.token[k], p: dist.p[k], kept: dist.kept[k], p_final: dist.p_final[k] }));
  const top = Math.max(...rows.map((d) => Math.max(d.p, d.p_final)));
  $("dist").replaceChildren(...rows.map((d) => {
    const row = el("div", { class: `dist-row${d.kept ? "" : " cut"}${d.id === state.ids[i] ? " chosen" : ""}` });
    const bars = el("div", { class: "bars" },
      el("div", { class: "bar raw", style: `width:${(100 * d.p) / top}%` }),
      el("div", { class: "bar final", style: `width:${(100 * d.p_final) / top}%` }));
    row.append(el("span", { class: "label", text: shown(d.token) }), bars,
      el("span", { text: `${d.p.toFixed(3)} → ${d.p_final.toFixed(3)}` }));
    return row;
  }));
}

async function selectToken(i) {
  document.querySelectorAll(".tok.selected").forEach((t) => t.classList.remove("selected"));
  document.querySelectorAll(`#output .tok[data-i="${i}"], #att-tokens .tok[data-i="${i}"]`)
    .forEach((t) => t.classList.add("selected"));
  state.selected = i;
  if (state.run.views.includes("generate")) {
    drawDistribution(i);
    await showAttention({ ids: state.ids, query: i });
  } else {
    await showAttention({ text: $("att-input").value, query: i, part: $("att-part").value || null });
  }
}

// ---- attention: every layer x head, from one token ----------------------------------------------
async function showAttention(request) {
  try {
    const a = await api("/api/attention", { run: state.run.name, ...request });
    drawAttention(a);
  } catch (e) { showError(e); }
}

function drawAttention(a) {
  const q = a.query - a.offset;
  $("att-title").textContent = `from “${shown(a.queries[q])}” (token ${a.query}), ${a.part} attention`;
  if (!state.run.views.includes("generate")) {
    $("att-tokens").replaceChildren(...a.queries.map((t, i) => tokenSpan(t, i, "gen")));
    $("att-tokens").querySelector(`[data-i="${q}"]`)?.classList.add("selected");
    $("att-part-label").hidden = a.parts.length < 2;
    $("att-part").replaceChildren(...a.parts.map((p) => el("option", { value: p, text: p })));
    $("att-part").value = a.part;
  }
  const L = a.weights.length, H = a.weights[0].length;
  const grid = $("grid");
  grid.style.gridTemplateColumns = `4em repeat(${H}, minmax(0, 1fr))`;
  const cells = [el("span"), ...Array.from({ length: H }, (_, h) => el("span", { class: "rowhead", text: `head ${h}` }))];
  for (let l = 0; l < L; l++) {
    cells.push(el("span", { class: "rowhead", text: `layer ${l}` }));
    for (let h = 0; h < H; h++) cells.push(headCell(a, l, h));
  }
  grid.replaceChildren(...cells);
}

function headCell(a, l, h) {
  const w = a.weights[l][h], S = w.length;
  const canvas = el("canvas", { width: S, height: 1, title: "keys left to right; darker = more weight" });
  const ctx = canvas.getContext("2d");
  const max = Math.max(...w) || 1;
  w.forEach((x, s) => {
    ctx.fillStyle = `rgba(37, 99, 235, ${x / max})`;
    ctx.fillRect(s, 0, 1, 1);
  });
  const top = w.map((x, s) => [x, s]).sort((u, v) => v[0] - u[0]).slice(0, 3)
    .map(([x, s]) => `${shown(a.keys[s])} ${x.toFixed(2)}`).join("  ");
  const role = a.roles.dominant[l][h], score = a.roles.scores[role]?.[l]?.[h];
  const roleText = score === undefined || score === null ? role : `${role} ${score.toFixed(2)}`;
  return el("div", { class: "cell", "data-layer": l, "data-head": h },
    canvas, el("div", { class: "role", text: roleText }), el("div", { class: "top", text: top }));
}

// ---- predict: a form from the task's inputs, panels from its answer ---------------------------------
function setUpPredict(run) {
  const form = $("form");
  form.replaceChildren(...run.inputs.map((f) => {
    const input = f.type === "switch" ? el("input", { type: "checkbox", name: f.name })
      : f.type === "text" ? el("textarea", { name: f.name, rows: 2 })
      : el("input", { type: "number", name: f.name, step: f.type === "number" ? "any" : "1" });
    return el("label", {}, `${f.name}${f.required ? "" : " (optional)"} `, input, el("span", { class: "muted", text: ` ${f.help}` }));
  }), el("button", { type: "submit", text: "Run" }));
  form.onsubmit = async (event) => {
    event.preventDefault();
    showError(null);
    const inputs = {};
    for (const f of run.inputs) {
      const input = form.elements[f.name];
      if (f.type === "switch") { if (input.checked) inputs[f.name] = true; }
      else if (input.value !== "") inputs[f.name] = f.type === "text" ? input.value : Number(input.value);
    }
    try {
      const out = await api("/api/predict", { run: run.name, inputs });
      $("panels").replaceChildren(...out.panels.map(drawPanel));
      const text = run.inputs.find((f) => f.type === "text");
      if (text && run.views.includes("attention")) {
        $("att-input").value = inputs[text.name] || "";
        await showAttention({ text: $("att-input").value });
      }
    } catch (e) { showError(e); }
  };
  $("panels").replaceChildren();
}

// One drawing per panel kind that `Task.play` may return (tinyformer.tasks.base.PANELS; a test keeps them equal).
const PANELS = {
  text: (box, p) => box.append(el("pre", { text: p.text })),
  bars: (box, p) => {
    const top = Math.max(...p.values) || 1;
    p.labels.forEach((label, i) => box.append(el("div", { class: "dist-row" }, el("span", { class: "label", text: label }),
      el("div", { class: "bars" }, el("div", { class: "bar final", style: `width:${(100 * p.values[i]) / top}%` })),
      el("span", { text: p.values[i].toFixed(4) }))));
  },
  tags: (box, p) => p.words.forEach((w, i) => box.append(el("span", { class: "tagged" }, w, el("b", { text: p.tags[i] })))),
  span: (box, p) => box.append(el("p", {}, p.text.slice(0, p.start), el("mark", { text: p.text.slice(p.start, p.end) }), p.text.slice(p.end))),
  matrix: (box, p) => {
    const table = el("table", { class: "matrix" }, el("tr", {}, el("th"), ...p.cols.map((c) => el("th", { text: c }))));
    p.rows.forEach((r, i) => table.append(el("tr", {}, el("th", { text: r }), ...p.values[i].map((x) =>
      el("td", { style: `background: rgba(37, 99, 235, ${x}); color: ${x > 0.5 ? "#fff" : "#111"}`, text: x.toFixed(2) })))));
    box.append(table);
  },
};

function drawPanel(p) {
  const box = el("div", { class: "panel" }, el("h3", { text: p.title }));
  PANELS[p.kind](box, p);
  if (p.note) box.append(el("p", { class: "note", text: p.note }));
  return box;
}

// ---- start -------------------------------------------------------------------------------------
$("go").onclick = generate;
$("step").onclick = step;
$("stop").onclick = () => state.abort?.abort();
$("att-go").onclick = () => showAttention({ text: $("att-input").value, part: $("att-part").value || null });
$("att-part").onchange = () => showAttention({ text: $("att-input").value, part: $("att-part").value, query: state.selected });
loadRuns().catch(showError);
