// tinyformer's inference engine for one exported MiniGPT, in plain JavaScript over typed arrays.
// No DOM here: page.js draws; this file turns text into ids, runs the model one token at a time with a KV
// cache, and samples. The math is MiniGPT's (src/tinyformer/models/gpt.py), written out for one position:
//
//   x = tok_emb[id] (+ pos_emb[p] | + scale * sinusoid(p))
//   per block:  x += proj(attention(LN1(x)))        queries/keys rotated by position for RoPE
//               x += mlp(LN2(x))                     GELU / GELU-tanh / ReLU / ReLU² MLP, or SwiGLU
//   logits = head(LN_f(x))  (cap * tanh(logits / cap) with a soft cap)
//
// Sums run in doubles (JavaScript's numbers) over float32 weights: the logits agree with PyTorch's float32
// to about 1e-5. Sampling (temperature, top-k, top-p) is tinyformer's `filter_logits` and `next_token`; the
// seeded draws come from this file's own generator, so a seed here is not the same text as in Python, but
// greedy decoding (temperature 0) is the same text.
"use strict";

// ---- weights: base64 -> typed arrays ---------------------------------------------------------------
function bytesOf(base64) {
  const s = atob(base64), out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

let HALF = null; // float16 bit pattern -> float32, all 65,536 of them (made once)
function halfTable() {
  if (HALF) return HALF;
  HALF = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    HALF[h] = e === 0 ? sign * m * 2 ** -24 : e === 31 ? (m ? NaN : sign * Infinity) : sign * (1 + m / 1024) * 2 ** (e - 15);
  }
  return HALF;
}

// Every tensor as a Float32Array: "f32" as stored, "f16" through the table, "i8" rows times their scale.
function readTensors(header, bytes) {
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    const buf = bytes.buffer, at = bytes.byteOffset + t.offset;
    let x;
    if (t.dtype === "f32") x = new Float32Array(buf.slice(at, at + 4 * n));
    else if (t.dtype === "f16") {
      const h = new Uint16Array(buf.slice(at, at + 2 * n)), table = halfTable();
      x = new Float32Array(n);
      for (let i = 0; i < n; i++) x[i] = table[h[i]];
    } else if (t.dtype === "i8") {
      const q = new Int8Array(buf.slice(at, at + n));
      const s = new Float32Array(buf.slice(bytes.byteOffset + t.scales, bytes.byteOffset + t.scales + 4 * t.shape[0]));
      const cols = n / t.shape[0];
      x = new Float32Array(n);
      for (let r = 0; r < t.shape[0]; r++) for (let c = 0; c < cols; c++) x[r * cols + c] = q[r * cols + c] * s[r];
    } else throw new Error(`tensor ${name}: unknown dtype ${t.dtype}`);
    out[name] = x;
  }
  return out;
}

// ---- the matrix products: WebAssembly SIMD where the browser has it, plain JavaScript otherwise ------
// Y (T x rows) = X (T x cols) @ W^T (+ b), W in PyTorch's Linear layout (rows x cols). Nearly all of a step's
// work is here, and past the window every new token re-runs the whole window (as `tinyformer sample` does),
// so this is what sets the speed. A 438-byte WebAssembly function, assembled below from its instructions,
// multiplies four floats at a time (f32x4) for four tokens at once; measured on a 2-core Xeon in Node, it does
// 12.7 billion multiply-adds a second against 1.4 for the best plain-JavaScript loop (`linearJS`).
function linear(W, b, X, T, rows, cols) {
  const Y = SIMD && cols % 4 === 0 ? simdLinear(W, X, T, rows, cols) : linearJS(W, X, T, rows, cols);
  if (b) for (let t = 0; t < T; t++) for (let r = 0; r < rows; r++) Y[t * rows + r] += b[r];
  return Y;
}

// The WebAssembly module, byte by byte: one exported function gemm(w, x, y, T4, rows, cols) over one exported
// memory, Y[t * rows + r] = sum over c of W[r * cols + c] * X[t * cols + c] (byte offsets w, x, y; T4 a multiple
// of 4 tokens, cols a multiple of 4). Per weight row, per 4 tokens: four f32x4 sums over the columns, each
// 16-byte load of weights used four times, then each sum's four lanes added.
function gemmModule() {
  const leb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };
  const vec = (items) => [...leb(items.length), ...items.flat()];
  const section = (id, bytes) => [id, ...leb(bytes.length), ...bytes];
  const name = (s) => vec([...s].map((ch) => ch.charCodeAt(0)));
  const get = (i) => [0x20, i], set = (i) => [0x21, i], tee = (i) => [0x22, i], i32 = (n) => [0x41, n];
  const [add, mul, ltU, loop, end, again, load] = [[0x6a], [0x6c], [0x49], [0x03, 0x40], [0x0b], [0x0d, 0], [0xfd, 0x00, 0x02, 0x00]];
  const [zero, vAdd, vMul, fAdd, fStore] = [[0x43, 0, 0, 0, 0, 0xfd, 0x13], [0xfd, 0xe4, 0x01], [0xfd, 0xe6, 0x01], [0x92], [0x38, 0x02, 0x00]];
  const lane = (k) => [0xfd, 0x1f, k];
  const [w, x, y, T, rows, cols, r, t, c, wp, x0, x1, x2, x3, cb] = Array.from({ length: 15 }, (_, i) => i); // i32
  const [a0, a1, a2, a3, wv] = [15, 16, 17, 18, 19]; // v128
  const sum = (a, xp) => [...get(a), ...get(wv), ...get(xp), ...get(c), ...add, ...load, ...vMul, ...vAdd, ...set(a)];
  const lanes = (a) => [...get(a), ...lane(0), ...get(a), ...lane(1), ...fAdd, ...get(a), ...lane(2), ...get(a), ...lane(3), ...fAdd, ...fAdd];
  const store = (k, a) => [...get(y), ...get(t), ...i32(k), ...add, ...get(rows), ...mul, ...get(r), ...add, ...i32(4), ...mul, ...add, ...lanes(a), ...fStore];
  const code = [
    ...get(cols), ...i32(4), ...mul, ...set(cb), ...i32(0), ...set(r),
    ...loop, // each weight row r
    ...get(w), ...get(r), ...get(cb), ...mul, ...add, ...set(wp), ...i32(0), ...set(t),
    ...loop, // each 4 tokens t .. t + 3
    ...get(x), ...get(t), ...get(cb), ...mul, ...add, ...tee(x0), ...get(cb), ...add, ...tee(x1), ...get(cb), ...add, ...tee(x2),
    ...get(cb), ...add, ...set(x3), ...zero, ...tee(a0), ...tee(a1), ...tee(a2), ...set(a3), ...i32(0), ...set(c),
    ...loop, // each 4 columns (16 bytes)
    ...get(wp), ...get(c), ...add, ...load, ...set(wv), ...sum(a0, x0), ...sum(a1, x1), ...sum(a2, x2), ...sum(a3, x3),
    ...get(c), ...i32(16), ...add, ...tee(c), ...get(cb), ...ltU, ...again, ...end,
    ...store(0, a0), ...store(1, a1), ...store(2, a2), ...store(3, a3),
    ...get(t), ...i32(4), ...add, ...tee(t), ...get(T), ...ltU, ...again, ...end,
    ...get(r), ...i32(1), ...add, ...tee(r), ...get(rows), ...ltU, ...again, ...end,
    ...end,
  ];
  const body = [...vec([[9, 0x7f], [5, 0x7b]]), ...code]; // locals: 9 more i32, 5 v128
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // "\0asm", version 1
    ...section(1, vec([[0x60, ...vec([0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f]), 0]])), // type: six i32 -> nothing
    ...section(3, vec([[0]])), // one function, of that type
    ...section(5, vec([[0x00, 1]])), // one memory of at least one 64 KiB page
    ...section(7, vec([[...name("gemm"), 0x00, 0], [...name("mem"), 0x02, 0]])), // exported
    ...section(10, vec([[...leb(body.length), ...body]])),
  ]);
}

let SIMD = null; // { gemm, mem, at: weight array -> its byte offset, scratch: first free byte }

// Copy the weight matrices into WebAssembly's memory once; null where WebAssembly SIMD is not there.
function setUpSimd(tensors) {
  try {
    const { exports } = new WebAssembly.Instance(new WebAssembly.Module(gemmModule()));
    const matrices = Object.values(tensors).filter((x) => x.length % 4 === 0 && x.length > 1024);
    const bytes = matrices.reduce((n, x) => n + 4 * x.length, 0);
    exports.mem.grow(Math.ceil(bytes / 65536));
    const at = new Map();
    let next = 0;
    for (const x of matrices) { new Float32Array(exports.mem.buffer, next, x.length).set(x); at.set(x, next); next += 4 * x.length; }
    return { gemm: exports.gemm, mem: exports.mem, at, scratch: next };
  } catch (e) {
    return null; // no WebAssembly (or no SIMD): plain JavaScript computes the same products
  }
}

// W a weight matrix already in WebAssembly's memory, or any other matrix, copied in first (attention's keys)
function simdLinear(W, X, T, rows, cols) {
  const T4 = Math.ceil(T / 4) * 4, kept = SIMD.at.get(W), wAt = SIMD.scratch, xAt = wAt + (kept === undefined ? 4 * rows * cols : 0);
  const yAt = xAt + 4 * T4 * cols, end = yAt + 4 * T4 * rows;
  if (end > SIMD.mem.buffer.byteLength) SIMD.mem.grow(Math.ceil((end - SIMD.mem.buffer.byteLength) / 65536));
  if (kept === undefined) new Float32Array(SIMD.mem.buffer, wAt, rows * cols).set(W);
  const xs = new Float32Array(SIMD.mem.buffer, xAt, T4 * cols);
  xs.set(X);
  xs.fill(0, T * cols); // the tokens that pad T up to a multiple of 4
  SIMD.gemm(kept ?? wAt, xAt, yAt, T4, rows, cols);
  return new Float32Array(SIMD.mem.buffer, yAt, T * rows).slice(); // a copy: the memory is reused
}

// The same product in plain JavaScript, in tiles of 4 weight rows x 4 tokens: 16 independent sums, each weight
// and input read once per 4 products (1.7x the speed of one row at a time).
function linearJS(W, X, T, rows, cols) {
  const Y = new Float64Array(T * rows);
  const R4 = rows - (rows % 4), T4 = T - (T % 4);
  for (let r = 0; r < R4; r += 4) {
    const a0 = r * cols, a1 = a0 + cols, a2 = a1 + cols, a3 = a2 + cols;
    for (let t = 0; t < T4; t += 4) {
      const x0 = t * cols, x1 = x0 + cols, x2 = x1 + cols, x3 = x2 + cols;
      let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
      let s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
      for (let c = 0; c < cols; c++) {
        const w0 = W[a0 + c], w1 = W[a1 + c], w2 = W[a2 + c], w3 = W[a3 + c];
        const v0 = X[x0 + c], v1 = X[x1 + c], v2 = X[x2 + c], v3 = X[x3 + c];
        s00 += w0 * v0; s01 += w0 * v1; s02 += w0 * v2; s03 += w0 * v3;
        s10 += w1 * v0; s11 += w1 * v1; s12 += w1 * v2; s13 += w1 * v3;
        s20 += w2 * v0; s21 += w2 * v1; s22 += w2 * v2; s23 += w2 * v3;
        s30 += w3 * v0; s31 += w3 * v1; s32 += w3 * v2; s33 += w3 * v3;
      }
      const y0 = t * rows + r, y1 = y0 + rows, y2 = y1 + rows, y3 = y2 + rows;
      Y[y0] = s00; Y[y1] = s01; Y[y2] = s02; Y[y3] = s03;
      Y[y0 + 1] = s10; Y[y1 + 1] = s11; Y[y2 + 1] = s12; Y[y3 + 1] = s13;
      Y[y0 + 2] = s20; Y[y1 + 2] = s21; Y[y2 + 2] = s22; Y[y3 + 2] = s23;
      Y[y0 + 3] = s30; Y[y1 + 3] = s31; Y[y2 + 3] = s32; Y[y3 + 3] = s33;
    }
  }
  for (let r = 0; r < rows; r++) { // what the tiles left: the last rows % 4 rows, the last T % 4 tokens
    for (let t = r < R4 ? T4 : 0; t < T; t++) {
      let s = 0;
      for (let c = 0, at = r * cols, x0 = t * cols; c < cols; c++) s += W[at + c] * X[x0 + c];
      Y[t * rows + r] = s;
    }
  }
  return Y;
}

// each row of X (T x n) normalised, then scaled (and shifted, where the norm has a bias): LayerNorm, or RMSNorm
// (rms true: no mean taken out, no bias; the Llama family's)
function norm(X, w, b, n, eps, rms) {
  const Y = new Float32Array(X.length); // the next matrix product reads it as float32
  for (let at = 0; at < X.length; at += n) {
    let mean = 0;
    if (!rms) {
      for (let i = 0; i < n; i++) mean += X[at + i];
      mean /= n;
    }
    let v = 0;
    for (let i = 0; i < n; i++) v += (X[at + i] - mean) ** 2;
    const inv = 1 / Math.sqrt(v / n + eps);
    for (let i = 0; i < n; i++) Y[at + i] = (X[at + i] - mean) * inv * w[i] + (b ? b[i] : 0);
  }
  return Y;
}

// RMS normalisation without a gain, each head's slice on its own (qk_norm; F.rms_norm's float32 eps)
function rmsHeads(x, dh) {
  for (let at = 0; at < x.length; at += dh) {
    let s = 0;
    for (let i = 0; i < dh; i++) s += x[at + i] ** 2;
    const inv = 1 / Math.sqrt(s / dh + 1.1920928955078125e-7);
    for (let i = 0; i < dh; i++) x[at + i] *= inv;
  }
}

// Rotary positions, "rotate half" pairs (i, i + dh/2) turned by position * base^(-2i/dh), every head of x
function rotate(x, dh, pos, base) {
  const half = dh / 2;
  for (let i = 0; i < half; i++) {
    const angle = Math.fround(pos * Math.fround(base ** (-(2 * i) / dh)));
    const c = Math.cos(angle), s = Math.sin(angle);
    for (let at = 0; at < x.length; at += dh) {
      const a = x[at + i], b = x[at + i + half];
      x[at + i] = a * c - b * s;
      x[at + i + half] = a * s + b * c;
    }
  }
}

// The exact GELU, x * Φ(x) (Φ the normal distribution's CDF, as PyTorch's erf form), through a table: Φ and its
// slope at x = -8 + k/64, made once from a series, and a cubic (Hermite) between two knots: error below 1e-9, under
// float32's own precision; past ±8, Φ is 0 or 1 to float32's. An erf through Math.exp per value took half
// of a prefill's time in V8 (Math has no erf).
const GELU_TABLE = (() => {
  const n = 1025, value = new Float64Array(n), slope = new Float64Array(n);
  for (let k = 0; k < n; k++) {
    const x = -8 + k / 64, z = Math.abs(x) / Math.SQRT2;
    let term = z, sum = z; // erf(z) = 2/√π e^(-z²) Σ (2z²)^i z / (1·3·…·(2i+1)): positive terms, no cancellation
    for (let i = 1; term > 1e-17 * sum; i++) { term *= (2 * z * z) / (2 * i + 1); sum += term; }
    const erf = (2 / Math.sqrt(Math.PI)) * Math.exp(-z * z) * sum;
    value[k] = 0.5 * (1 + Math.sign(x) * erf);
    slope[k] = Math.exp((-x * x) / 2) / Math.sqrt(2 * Math.PI) / 64; // dΦ/dk: the slope over one knot's step
  }
  return { value, slope };
})();

function gelu(x) {
  if (x <= -8) return 0;
  if (x >= 8) return x; // (NaN falls through both and stays NaN)
  const u = (x + 8) * 64, k = Math.floor(u), t = u - k, t2 = t * t, t3 = t2 * t;
  const { value: v, slope: m } = GELU_TABLE;
  return x * ((2 * t3 - 3 * t2 + 1) * v[k] + (t3 - 2 * t2 + t) * m[k] + (3 * t2 - 2 * t3) * v[k + 1] + (t3 - t2) * m[k + 1]);
}

const ACTIVATIONS = {
  gelu,
  gelu_tanh: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))),
  relu: (x) => Math.max(0, x),
  relu2: (x) => Math.max(0, x) ** 2,
};
const silu = (x) => x / (1 + Math.exp(-x));

function sinusoid(pos, d) { // Vaswani's table row, sin and cos interleaved (tinyformer's layout)
  const row = new Float64Array(d);
  for (let i = 0; i < d; i += 2) {
    const angle = Math.fround(pos * Math.fround(Math.exp(i * (-Math.log(10000) / d))));
    row[i] = Math.sin(angle);
    row[i + 1] = Math.cos(angle);
  }
  return row;
}

// ---- the model ----------------------------------------------------------------------------------
class Model {
  constructor(spec, weights) {
    this.spec = spec;
    this.w = weights;
    const c = spec;
    this.D = c.n_embd; this.H = c.n_head; this.Hkv = c.n_kv_head; this.dh = c.n_embd / c.n_head;
    this.F = c.d_ff; this.V = c.vocab_size; this.L = c.n_layer;
    this.act = ACTIVATIONS[c.ffn];
    if (!this.act && c.ffn !== "swiglu") throw new Error(`feed-forward ${c.ffn} is not one this engine runs`);
  }

  // An empty KV cache for up to `capacity` positions: per layer, keys and values (position, KV head, dh).
  newCache(capacity) {
    const width = this.Hkv * this.dh;
    return Array.from({ length: this.L }, () => ({ k: new Float32Array(capacity * width), v: new Float32Array(capacity * width) }));
  }

  // Attention of T queries at positions start .. start + T - 1 (in qkv: (T, D + 2 width)) over the cached keys and
  // values up to each one's own position, into `out` (T, D); `weightsOf(t)` -> where query t's (H, start + t + 1)
  // weights go, or null. One query at a time, in plain JavaScript:
  attendEach(qkv, layer, T, start, weightsOf, out) {
    const { D, H, Hkv, dh } = this;
    const width = Hkv * dh, group = H / Hkv, scale = 1 / Math.sqrt(dh), qw = D + 2 * width;
    const K = layer.k, Vc = layer.v, p = new Float64Array(start + T);
    for (let t = 0; t < T; t++) { // query t sees positions 0 .. start + t (the causal mask)
      const S = start + t + 1, qa0 = t * qw, oa0 = t * D, w = weightsOf && weightsOf(t);
      for (let hh = 0; hh < H; hh++) {
        const kv = Math.floor(hh / group) * dh, qa = qa0 + hh * dh;
        let max = -Infinity;
        for (let s = 0; s < S; s++) {
          let dot = 0;
          for (let i = 0, ka = s * width + kv; i < dh; i++) dot += qkv[qa + i] * K[ka + i];
          p[s] = dot * scale;
          if (p[s] > max) max = p[s];
        }
        let sum = 0;
        for (let s = 0; s < S; s++) { p[s] = Math.exp(p[s] - max); sum += p[s]; }
        const oa = oa0 + hh * dh;
        for (let s = 0; s < S; s++) {
          const ps = p[s] / sum;
          if (w) w[hh * S + s] = ps;
          for (let i = 0, va = s * width + kv; i < dh; i++) out[oa + i] += ps * Vc[va + i];
        }
      }
    }
  }

  // ... or all T queries of a head at once, as two matrix products in WebAssembly (a prefill: scores = Q K^T,
  // then out = P V), the keys and values of the head copied out of the cache first
  attendMany(qkv, layer, T, start, weightsOf, out) {
    const { D, H, Hkv, dh } = this;
    const width = Hkv * dh, group = H / Hkv, scale = 1 / Math.sqrt(dh), qw = D + 2 * width;
    const S = start + T, S4 = Math.ceil(S / 4) * 4;
    const Kh = new Float32Array(S * dh), VhT = new Float32Array(dh * S4), Qh = new Float32Array(T * dh);
    const P = new Float32Array(T * S4);
    for (let hh = 0; hh < H; hh++) {
      const kv = Math.floor(hh / group) * dh;
      if (hh % group === 0) { // a new key/value head: its keys (S, dh) and its values transposed (dh, S4)
        for (let s = 0; s < S; s++) {
          Kh.set(layer.k.subarray(s * width + kv, s * width + kv + dh), s * dh);
          for (let i = 0; i < dh; i++) VhT[i * S4 + s] = layer.v[s * width + kv + i];
        }
      }
      for (let t = 0; t < T; t++) Qh.set(qkv.subarray(t * qw + hh * dh, t * qw + hh * dh + dh), t * dh);
      const scores = linear(Kh, null, Qh, T, S, dh); // (T, S): every query against every key
      P.fill(0);
      for (let t = 0; t < T; t++) { // softmax over the keys up to its own position, start + t
        const n = start + t + 1, row = t * S;
        let max = -Infinity;
        for (let s = 0; s < n; s++) max = Math.max(max, scores[row + s] * scale);
        let sum = 0;
        for (let s = 0; s < n; s++) { const e = Math.exp(scores[row + s] * scale - max); P[t * S4 + s] = e; sum += e; }
        const w = weightsOf && weightsOf(t);
        for (let s = 0; s < n; s++) { P[t * S4 + s] /= sum; if (w) w[hh * n + s] = P[t * S4 + s]; }
      }
      const y = linear(VhT, null, P, T, dh, S4); // (T, dh)
      for (let t = 0; t < T; t++) for (let i = 0; i < dh; i++) out[t * D + hh * dh + i] = y[t * dh + i];
    }
  }

  // the norm named `name` (ln1, ln2 of a block, ln_f) over each row of X
  norm(X, name) {
    const { w, spec } = this;
    return norm(X, w[name + ".weight"], w[name + ".bias"], this.D, spec.norm_eps, spec.norm === "rmsnorm");
  }

  // Tokens `ids` at positions start, start+1, ..., their keys and values written into `cache` -> the logits
  // after the last one (Float64Array V) and, for the tokens from index `weightsFrom` on (none where it is null),
  // each one's attention over the positions up to its own: per token a Float32Array (L, H, its position + 1),
  // null before `weightsFrom`. The last layer runs only the rows something reads: the last token's (the logits)
  // and those whose weights are asked for; every row's keys and values still go into the cache.
  forward(ids, start, cache, weightsFrom = null) {
    const { D, H, Hkv, dh, F, V, L, w, spec } = this;
    const T = ids.length, width = Hkv * dh, wanted = weightsFrom ?? T;
    const weights = weightsFrom === null ? null : ids.map((_, t) => (t >= wanted ? new Float32Array(L * H * (start + t + 1)) : null));
    let x = new Float64Array(T * D);
    const emb = w["tok_emb.weight"];
    for (let t = 0; t < T; t++) {
      const pos = start + t, row = x.subarray(t * D, (t + 1) * D);
      for (let i = 0; i < D; i++) row[i] = emb[ids[t] * D + i];
      if (spec.positions === "learned") {
        const pe = w["pos_emb.weight"];
        for (let i = 0; i < D; i++) row[i] += pe[pos * D + i];
      } else if (spec.positions === "sinusoidal") {
        const table = sinusoid(pos, D);
        for (let i = 0; i < D; i++) row[i] += spec.pe_scale * table[i];
      }
    }
    const qw = D + 2 * width;
    let n = T, first = 0; // the rows this layer runs: tokens first .. T - 1 (n of them)
    for (let l = 0; l < L; l++) {
      const b = `blocks.${l}.`;
      const h = this.norm(x, b + "ln1");
      const qkv = linear(w[b + "attn.qkv.weight"], w[b + "attn.qkv.bias"], h, T, qw, D); // (T, D + 2 width)
      const K = cache[l].k, Vc = cache[l].v;
      for (let t = 0; t < T; t++) {
        const q = qkv.subarray(t * qw, t * qw + D), k = qkv.subarray(t * qw + D, t * qw + D + width);
        if (spec.qk_norm) { rmsHeads(q, dh); rmsHeads(k, dh); }
        if (spec.positions === "rope") { rotate(q, dh, start + t, spec.rope_base); rotate(k, dh, start + t, spec.rope_base); }
        K.set(k, (start + t) * width);
        Vc.set(qkv.subarray(t * qw + D + width, (t + 1) * qw), (start + t) * width);
      }
      if (l === L - 1 && Math.min(wanted, T - 1) > 0) { // the last layer: only the rows read after it
        first = Math.min(wanted, T - 1);
        n = T - first;
        x = x.subarray(first * D);
      }
      const out = new Float32Array(n * D), at = (t) => first + t; // row t of this layer is token first + t
      const attend = SIMD && n >= 4 && dh % 4 === 0 ? this.attendMany : this.attendEach;
      const weightsOf = weights && ((t) => weights[at(t)] && weights[at(t)].subarray(l * H * (start + at(t) + 1)));
      attend.call(this, qkv.subarray(first * qw), cache[l], n, start + first, weightsOf, out);
      const a = linear(w[b + "attn.proj.weight"], w[b + "attn.proj.bias"], out, n, D, D);
      for (let i = 0; i < x.length; i++) x[i] += a[i];
      const h2 = this.norm(x, b + "ln2");
      let m;
      if (spec.ffn === "swiglu") {
        const g = linear(w[b + "mlp.gate.weight"], null, h2, n, F, D), u = linear(w[b + "mlp.up.weight"], null, h2, n, F, D);
        for (let i = 0; i < g.length; i++) g[i] = silu(g[i]) * u[i];
        m = linear(w[b + "mlp.proj.weight"], null, g, n, D, F);
      } else {
        const f = linear(w[b + "mlp.fc.weight"], w[b + "mlp.fc.bias"], h2, n, F, D);
        const act = this.act;
        for (let i = 0; i < f.length; i++) f[i] = act(f[i]);
        m = linear(w[b + "mlp.proj.weight"], w[b + "mlp.proj.bias"], f, n, D, F);
      }
      for (let i = 0; i < x.length; i++) x[i] += m[i];
    }
    const last = this.norm(x.subarray((n - 1) * D), "ln_f");
    const logits = linear(spec.tie_weights ? emb : w["head.weight"], null, last, 1, V, D);
    if (spec.logit_softcap) for (let i = 0; i < V; i++) logits[i] = spec.logit_softcap * Math.tanh(logits[i] / spec.logit_softcap);
    return { logits, weights };
  }
}

// ---- tokenizers: characters, or GPT-2's byte-level BPE --------------------------------------------
class CharTokenizer {
  constructor(chars) { this.chars = chars; this.ids = new Map(chars.map((c, i) => [c, i])); }
  encode(text) {
    const unknown = [...new Set([...text].filter((c) => !this.ids.has(c)))];
    if (unknown.length) throw new Error(`${unknown.length} character(s) outside the vocabulary: ${unknown.map((c) => JSON.stringify(c)).join(" ")}`);
    return [...text].map((c) => this.ids.get(c));
  }
  decode(ids) { return ids.map((i) => this.chars[i]).join(""); }
  token(id) { return this.chars[id]; }
}

// GPT-2's printable stand-in for each byte (bytes that print as themselves keep their code point)
function byteChars() {
  const keep = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const map = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) map[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + extra++);
  return map;
}

// GPT-2's split (Hugging Face's ByteLevel pre-tokenizer), spelled with the run's white space: its regex engine
// (Oniguruma) counts U+0085 as white space and U+FEFF as not, where JavaScript's \s does the opposite
const SPACE = "\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const SPLIT = new RegExp(
  `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${SPACE}\\p{L}\\p{N}]+|[${SPACE}]+(?![^${SPACE}])|[${SPACE}]+`, "gu");

class ByteBPE {
  constructor(vocab, merges, specials) {
    this.vocab = new Map(Object.entries(vocab));
    this.pieces = [];
    for (const [piece, id] of this.vocab) this.pieces[id] = piece;
    this.rank = new Map(merges.map((m, i) => [Array.isArray(m) ? m.join(" ") : m, i]));
    this.specials = specials;
    this.toChar = byteChars();
    this.toByte = new Map(this.toChar.map((c, b) => [c, b]));
    this.split = SPLIT;
  }
  word(w) { // the merges of lowest rank first, until none applies
    let parts = [...w];
    for (;;) {
      let best = -1, at = -1;
      for (let i = 0; i + 1 < parts.length; i++) {
        const r = this.rank.get(parts[i] + " " + parts[i + 1]);
        if (r !== undefined && (best < 0 || r < best)) { best = r; at = i; }
      }
      if (best < 0) return parts;
      const merged = parts[at] + parts[at + 1], next = [];
      for (let i = 0; i < parts.length; i++) {
        if (i + 1 < parts.length && parts[i] + parts[i + 1] === merged && this.rank.get(parts[i] + " " + parts[i + 1]) === best) { next.push(merged); i++; }
        else next.push(parts[i]);
      }
      parts = next;
    }
  }
  encode(text) {
    const ids = [], bytes = new TextEncoder();
    const pattern = this.specials.length ? new RegExp(`(${this.specials.map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`) : null;
    for (const chunk of pattern ? text.split(pattern) : [text]) {
      if (!chunk) continue;
      if (this.specials.includes(chunk)) { ids.push(this.vocab.get(chunk)); continue; }
      for (const m of chunk.matchAll(this.split)) {
        const mapped = [...bytes.encode(m[0])].map((b) => this.toChar[b]).join("");
        for (const piece of this.word(mapped)) ids.push(this.vocab.get(piece));
      }
    }
    return ids;
  }
  decode(ids) {
    const out = [];
    for (const id of ids) {
      const piece = this.pieces[id];
      if (this.specials.includes(piece)) { out.push(...new TextEncoder().encode(piece)); continue; }
      for (const c of piece) out.push(this.toByte.get(c));
    }
    return new TextDecoder().decode(new Uint8Array(out));
  }
  token(id) { return this.decode([id]); }
}

// ---- sampling ------------------------------------------------------------------------------------
function softmax(x, temperature = 1) {
  let max = -Infinity;
  for (const v of x) if (v / temperature > max) max = v / temperature;
  const e = x.map((v) => (v === -Infinity ? 0 : Math.exp(v / temperature - max)));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / sum);
}

// tinyformer's filter_logits: outside the top k, or past the top-p mass of strictly likelier tokens, -> -inf
function filterLogits(logits, topK, topP) {
  let x = Array.from(logits);
  if (topK > 0 && topK < x.length) {
    const kth = [...x].sort((a, b) => b - a)[topK - 1];
    x = x.map((v) => (v < kth ? -Infinity : v));
  }
  if (topP < 1) {
    const order = x.map((_, i) => i).sort((a, b) => x[b] - x[a] || a - b), p = softmax(order.map((i) => x[i]));
    let before = 0;
    const cut = new Set();
    order.forEach((i, r) => { if (before >= topP) cut.add(i); before += p[r]; });
    x = x.map((v, i) => (cut.has(i) ? -Infinity : v));
  }
  return x;
}

function argmax(x) { // the first of equal maxima, as torch.argmax
  let best = 0;
  for (let i = 1; i < x.length; i++) if (x[i] > x[best]) best = i;
  return best;
}

function generator(seed) { // mulberry32: a uniform draw in [0, 1) per call, from a 32-bit seed
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The sampling options as tinyformer's SampleConfig checks them; a bad one is an Error naming it.
function checkOptions(o) {
  const whole = (x) => Number.isInteger(x);
  const rules = [
    ["tokens", whole(o.tokens) && o.tokens >= 1, "a whole number >= 1"],
    ["temperature", Number.isFinite(o.temperature) && o.temperature >= 0, "a number >= 0 (0 = greedy)"],
    ["top_k", whole(o.top_k) && o.top_k >= 0, "a whole number >= 0 (0 = off)"],
    ["top_p", o.top_p > 0 && o.top_p <= 1, "in (0, 1] (1 = off)"],
    ["seed", whole(o.seed) && o.seed >= 0, "a whole number >= 0"],
  ];
  for (const [name, ok, rule] of rules) if (!ok) throw new Error(`${name} = ${o[name]} must be ${rule}`);
  return o;
}

// One step's distribution: the 20 likeliest tokens, the probability each is drawn with, the one drawn.
function draw(logits, o, random) {
  const p = softmax(Array.from(logits));
  let final;
  if (o.temperature === 0) { final = p.map(() => 0); final[argmax(logits)] = 1; }
  else final = softmax(filterLogits(Array.from(logits, (v) => v / o.temperature), o.top_k, o.top_p));
  let id;
  if (o.temperature === 0) id = argmax(logits);
  else {
    let u = random(), acc = 0;
    id = final.findIndex((f) => (acc += f) > u && f > 0);
    if (id < 0) id = argmax(final);
  }
  const top = p.map((v, i) => i).sort((a, b) => p[b] - p[a] || a - b).slice(0, 20);
  return { id, top: top.map((i) => ({ id: i, p: p[i], p_final: final[i] })) };
}

// ---- a session: ids in, tokens out, the KV cache and the sliding window as tinyformer's `generate` ----
// While the text fits the window (the block size), each step runs the newest token only; once it is full,
// the window moves by one and the cache is rebuilt from its tokens (with absolute positions every position
// shifted), exactly as `tinyformer.generate.sampling._cached_steps` does.
class Session {
  constructor(model, window) { this.model = model; this.window = window; this.cache = model.newCache(window); this.seen = 0; }
  // the logits after `ids` (which grew by one since the last call, or is new); `onWeights(i, offset, w)` gets
  // the attention of each token not seen before, over the window that starts at token `offset`
  next(ids, withWeights, onWeights) {
    const n = ids.length, w = this.window;
    const usual = this.seen && n - this.seen === 1 && n <= w; // one new token at position n - 1
    const first = usual ? n - 1 : Math.max(0, n - w), start = usual ? n - 1 : 0;
    const from = withWeights ? Math.min(n - 1 - first, Math.max(0, this.seen - first)) : null; // the new tokens
    const out = this.model.forward(ids.slice(first), start, this.cache, from);
    if (onWeights && out.weights) out.weights.forEach((weights, t) => { if (weights) onWeights(first + t, first - start, weights); });
    this.seen = n;
    return out.logits;
  }
}

// The model and tokenizer of the page's data; `simd` false: plain JavaScript only (the page's "#js" address).
function load(data, simd = true) {
  const bytes = bytesOf(data.blob);
  const tensors = readTensors(data.tensors, bytes);
  SIMD = simd ? setUpSimd(tensors) : null;
  const model = new Model(data.spec, tensors);
  const t = data.tokenizer;
  const tokenizer = t.type === "char" ? new CharTokenizer(t.chars) : new ByteBPE(t.vocab, t.merges, t.specials || []);
  return { model, tokenizer };
}

const engine = { load, simd: () => SIMD !== null, Session, draw, checkOptions, generator, argmax, filterLogits, softmax, gelu };
