// The exported page: the playground's generate and attention views for one run, drawn from engine.js in this
// file's own window (no server, no network). window.tinyformer is the engine for the console and for tests:
//   await tinyformer.ready
//   await tinyformer.generate("ROMEO:", { tokens: 200, temperature: 0 })   // the prompt and its continuation
//   tinyformer.logits([ids])                                               // the last position's logits
"use strict";

const $ = (id) => document.getElementById(id);
const TEXT = {
  en: {
    generate: "Generate", stop: "Stop", tokens: "tokens", temperature: "temperature", seed: "seed",
    showAttention: "attention while generating", hint: "Click any token to see the attention from it and the distribution it was drawn from.",
    distribution: "Next-token distribution", legendRaw: "the model's probability",
    legendFinal: "what it is drawn with (temperature, top-k, top-p); struck out: cut",
    attention: "Attention", run: "Run", layer: "layer", head: "head", loading: "loading the weights…",
    speed: (n, s, first) => `${n} tokens in ${s.toFixed(2)} s: ${(n / s).toFixed(0)} tokens/s; first token after ${first.toFixed(0)} ms`,
    promptToken: "a prompt token: nothing was drawn", before: (i, t) => `before token ${i} (“${t}”)`,
    from: (t, i) => `from “${t}” (token ${i}), every layer × head`, offline: "runs in this page: no server, no network",
    keys: "keys left to right; darker = more weight",
  },
  zh: {
    generate: "生成", stop: "停止", tokens: "词元数", temperature: "温度", seed: "随机种子",
    showAttention: "生成时显示注意力", hint: "点击任一词元，查看从它出发的注意力和它被抽取时的分布。",
    distribution: "下一个词元的分布", legendRaw: "模型给出的概率",
    legendFinal: "实际抽样用的概率（温度、top-k、top-p 之后）；划掉的被截去",
    attention: "注意力", run: "运行", layer: "层", head: "头", loading: "正在载入权重……",
    speed: (n, s, first) => `${n} 个词元，用时 ${s.toFixed(2)} 秒：每秒 ${(n / s).toFixed(0)} 个；第一个词元在 ${first.toFixed(0)} 毫秒后`,
    promptToken: "提示中的词元：不是抽样得到的", before: (i, t) => `第 ${i} 个词元（“${t}”）之前`,
    from: (t, i) => `从“${t}”（第 ${i} 个词元）出发，每层 × 每头`, offline: "在本页面内运行：无需服务器，无需网络",
    keys: "从左到右是各个键；颜色越深，权重越大",
  },
};
let lang = (navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
const t = (key, ...args) => (typeof TEXT[lang][key] === "function" ? TEXT[lang][key](...args) : TEXT[lang][key]);

const shown = (s) => s.replace(/\n/g, "⏎\n").replace(/ /g, "␣") || "∅";
const data = JSON.parse($("tf-model").textContent);
const state = { speed: null, ids: [], promptLength: 0, dists: [], attention: [], stop: false, busy: false, selected: null };
let model = null, tokenizer = null;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function showError(e) { $("error").textContent = e ? String(e.message || e) : ""; $("error").hidden = !e; }

function translate() {
  document.documentElement.lang = lang;
  for (const node of document.querySelectorAll("[data-t]")) node.textContent = t(node.dataset.t);
  $("lang").value = lang;
  if (state.speed) $("speed").textContent = t("speed", ...state.speed);
}

// A yield to the browser that is not throttled like setTimeout: the page paints between slices of tokens.
const channel = new MessageChannel(), waiting = [];
channel.port1.onmessage = () => waiting.shift()();
const pause = () => new Promise((resolve) => { waiting.push(resolve); channel.port2.postMessage(0); });

// ---- generation --------------------------------------------------------------------------------
// Generate `o.tokens` tokens after `prompt`; `draw` true: the page shows them as they come, in slices of ~50 ms.
async function run(prompt, o, drawing) {
  engine.checkOptions(o);
  const ids = tokenizer.encode(prompt);
  if (!ids.length) throw new Error("the prompt is empty: give at least one character");
  const session = new engine.Session(model, data.spec.window), random = engine.generator(o.seed ?? 1);
  const wantWeights = drawing;
  const started = performance.now();
  let firstAt = null, sliceStart = performance.now(), drawnAt = 0;
  if (drawing) startOutput(ids);
  const all = [...ids];
  for (let n = 0; n < o.tokens && !state.stop; n++) {
    const logits = session.next(all, wantWeights, (i, offset, w) => { if (drawing) state.attention[i] = { offset, w }; });
    const step = engine.draw(logits, o, random);
    all.push(step.id);
    if (firstAt === null) firstAt = performance.now();
    if (drawing) addToken(step);
    if (performance.now() - sliceStart > 50) {
      if (drawing && $("live").checked && performance.now() - drawnAt > 250) { // the grid 4 times a second
        selectToken(all.length - 2, false);
        drawnAt = performance.now();
      }
      await pause();
      sliceStart = performance.now();
    }
  }
  const seconds = (performance.now() - started) / 1000;
  return { ids: all, text: tokenizer.decode(all), seconds, first: firstAt - started, made: all.length - ids.length };
}

function startOutput(ids) {
  state.ids = [...ids]; state.promptLength = ids.length; state.dists = ids.map(() => null); state.attention = [];
  $("output").replaceChildren(...ids.map((id, i) => tokenSpan(tokenizer.token(id), i, "prompt")));
}

function addToken(step) {
  const i = state.ids.length;
  state.ids.push(step.id); state.dists.push(step);
  $("output").append(tokenSpan(tokenizer.token(step.id), i, "gen"));
}

function tokenSpan(text, i, kind) {
  const span = el("span", { class: `tok ${kind}`, "data-i": i, text });
  span.onclick = () => selectToken(i, true);
  return span;
}

function options() {
  const num = (id) => Number($(id).value);
  return { tokens: num("tokens"), temperature: num("temperature"), top_k: num("top_k"), top_p: num("top_p"), seed: num("seed") };
}

async function onGenerate() {
  if (state.busy) return;
  showError(null);
  state.busy = true; state.stop = false;
  $("go").disabled = true; $("stop").disabled = false;
  try {
    const r = await run($("prompt").value, options(), true);
    state.speed = [r.made, r.seconds, r.first];
    $("speed").textContent = t("speed", ...state.speed);
    $("speed").dataset.tokensPerS = String(r.made / r.seconds);
    if (state.ids.length > state.promptLength) selectToken(state.ids.length - 1, false);
  } catch (e) { showError(e); }
  finally { state.busy = false; $("go").disabled = false; $("stop").disabled = true; }
}

// ---- the distribution and the attention of one token ---------------------------------------------
function selectToken(i, clicked) {
  state.selected = i;
  document.querySelectorAll(".tok.selected").forEach((s) => s.classList.remove("selected"));
  document.querySelector(`#output .tok[data-i="${i}"]`)?.classList.add("selected");
  drawDistribution(i);
  drawAttention(i);
  if (clicked) $("attention").scrollIntoView({ block: "nearest" });
}

function drawDistribution(i) {
  const step = state.dists[i];
  $("dist-step").textContent = step ? t("before", i, shown(tokenizer.token(state.ids[i]))) : "";
  if (!step) return $("dist").replaceChildren(el("p", { class: "muted", text: t("promptToken") }));
  const top = Math.max(...step.top.map((d) => Math.max(d.p, d.p_final)));
  $("dist").replaceChildren(...step.top.map((d) => {
    const raw = el("div", { class: "bar raw" }), final = el("div", { class: "bar final" });
    raw.style.width = `${(100 * d.p) / top}%`; final.style.width = `${(100 * d.p_final) / top}%`;
    return el("div", { class: `dist-row${d.p_final > 0 ? "" : " cut"}${d.id === state.ids[i] ? " chosen" : ""}` },
      el("span", { class: "label", text: shown(tokenizer.token(d.id)) }), el("div", { class: "bars" }, raw, final),
      el("span", { text: `${d.p.toFixed(3)} → ${d.p_final.toFixed(3)}` }));
  }));
}

function drawAttention(i) {
  const a = state.attention[i];
  if (!a) return;
  const L = model.L, H = model.H, S = a.w.length / (L * H);
  $("att-title").textContent = t("from", shown(tokenizer.token(state.ids[i])), i);
  const grid = $("grid");
  grid.style.gridTemplateColumns = `4em repeat(${H}, minmax(0, 1fr))`;
  const cells = [el("span"), ...Array.from({ length: H }, (_, h) => el("span", { class: "rowhead", text: `${t("head")} ${h}` }))];
  for (let l = 0; l < L; l++) {
    cells.push(el("span", { class: "rowhead", text: `${t("layer")} ${l}` }));
    for (let h = 0; h < H; h++) cells.push(headCell(a, a.w.subarray((l * H + h) * S, (l * H + h + 1) * S), l, h));
  }
  grid.replaceChildren(...cells);
}

function headCell(a, w, l, h) {
  const canvas = el("canvas", { width: w.length, height: 1, title: t("keys") });
  const ctx = canvas.getContext("2d"), pixels = ctx.createImageData(w.length, 1);
  let max = 0;
  for (const x of w) max = Math.max(max, x);
  w.forEach((x, s) => pixels.data.set([37, 99, 235, Math.round((255 * x) / (max || 1))], 4 * s)); // one blue, its alpha the weight
  ctx.putImageData(pixels, 0, 0); // every key in one call, not a fillRect each
  const top = Array.from(w, (x, s) => [x, s]).sort((u, v) => v[0] - u[0]).slice(0, 3)
    .map(([x, s]) => `${shown(tokenizer.token(state.ids[a.offset + s]))} ${x.toFixed(2)}`).join("  ");
  return el("div", { class: "cell", "data-layer": l, "data-head": h }, canvas, el("div", { class: "top", text: top }));
}

// ---- start ---------------------------------------------------------------------------------------
function setUp() {
  const s = data.sample;
  $("title").textContent = data.name;
  $("prompt").value = s.prompt;
  for (const k of ["tokens", "temperature", "top_k", "top_p", "seed"]) $(k).value = s[k];
  $("info").textContent = data.info;
  $("go").onclick = onGenerate;
  $("stop").onclick = () => { state.stop = true; };
  $("lang").onchange = () => { lang = $("lang").value; translate(); if (state.selected !== null) selectToken(state.selected, false); };
  translate();
}

setUp();
const ready = new Promise((resolve) => {
  // after the page has painted once, so the first thing a visitor sees is the page, not a blank tab
  requestAnimationFrame(() => setTimeout(() => {
    const started = performance.now();
    ({ model, tokenizer } = engine.load(data, location.hash !== "#js")); // "#js": no WebAssembly
    window.tinyformer.loadMs = performance.now() - started;
    $("status").textContent = t("offline");
    $("go").disabled = false;
    resolve();
  }, 0));
});

window.tinyformer = {
  ready,
  engine, // the pieces: Session, draw, filterLogits, softmax, generator, ...
  spec: data.spec,
  encode: (text) => tokenizer.encode(text),
  decode: (ids) => tokenizer.decode(ids),
  // the prompt and `tokens` tokens after it (temperature 0: greedy, as `tinyformer sample --temperature 0`)
  generate: async (prompt, o = {}) => {
    await ready;
    const opts = { tokens: 100, temperature: 1, top_k: 0, top_p: 1, seed: 1, ...o };
    return (await run(prompt, opts, false)).text;
  },
  // the logits after `ids` (one array of vocab_size numbers; of the last `spec.window` ids), from a fresh cache
  logits: (ids) => Array.from(new engine.Session(model, data.spec.window).next(ids, false)),
  // a generation as Generate runs it: `.next(ids, true, (i, offset, w) => ...)` -> the logits after `ids` (grown by
  // one since the last call), and the attention of each token not seen before: token i's, over ids[offset ..= i],
  // a Float32Array (layers, heads, i - offset + 1)
  session: () => new engine.Session(model, data.spec.window),
  // timings of a generation as the page shows it (for `scripts/page_figures.py`)
  timed: async (prompt, o = {}) => {
    await ready;
    const r = await run(prompt, { tokens: 100, temperature: 1, top_k: 0, top_p: 1, seed: 1, ...o }, false);
    return { seconds: r.seconds, first_ms: r.first, tokens: r.made };
  },
};
