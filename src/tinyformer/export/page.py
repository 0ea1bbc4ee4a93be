"""Export a MiniGPT run to one HTML file that runs it in any browser: no server, no network, no install.

    tinyformer export page runs/demo demo.html             # fp16 weights (the default)
    tinyformer export page runs/demo demo.html --precision int8

The file holds the weights (base64 in a JSON block), the tokenizer, and the engine and page from `page/`:
`engine.js` runs MiniGPT one token at a time with a KV cache (learned, sinusoidal or rotary positions;
GELU, GELU-tanh, ReLU, ReLU² or SwiGLU; grouped-query attention, qk-norm, a logit soft cap, a tied head)
and samples with temperature, top-k, top-p and a seed; `page.js` draws the playground's generate view,
each token's distribution and the attention from any token in every layer and head, in English or Chinese.
Its Content-Security-Policy allows exactly its own inline script and style (by hash), and WebAssembly that
the script compiles ('wasm-unsafe-eval': engine.js assembles its 438-byte matrix-product function itself);
no fetch, no other script, no JavaScript eval.

Precision (`--precision`): the matrices are stored in fp32 (4 bytes a weight), fp16 (2) or int8 (1, with one
fp32 scale per row: the row's largest |w| / 127); vectors (norms, biases) stay fp32. `export_page` measures
what the stored weights cost against the run's fp32 model, in PyTorch, on the run's own prompt: the largest
logit difference and how many greedy tokens agree. Why an engine of our own and not a library: a MiniGPT
step is under a million multiply-adds; the engine is ~450 readable lines of JavaScript, where a runtime such as
onnxruntime-web is megabytes in every page. Past the window every token re-runs the whole window (as
`tinyformer sample` does), which plain JavaScript loops do at ~20 tokens a second for the demo model; the
matrix products are therefore one small WebAssembly SIMD function, with the plain loops as the fallback.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from tinyformer.data.bpe import BPETokenizer
from tinyformer.data.tokenizers import CharTokenizer
from tinyformer.errors import UserError
from tinyformer.files import atomic_write, new_folders, not_in_run, output_path
from tinyformer.models.gpt import MiniGPT

PAGE = Path(__file__).parent / "page"
PRECISIONS = ("fp16", "fp32", "int8")  # --precision; the first is the default
PROBE_TOKENS = 200  # greedy tokens compared between the run and what the page stores


@dataclass
class PageExport:
    path: Path
    bytes: int
    precision: str
    parameters: int
    max_logit_error: float  # largest |logit difference| against the run in fp32, over a window of the probe
    greedy_same: int  # greedy tokens after the prompt that equal `tinyformer sample`'s, of `greedy_of`
    greedy_of: int

    def lines(self) -> list[str]:
        mb = self.bytes / 1e6
        agree = "all" if self.greedy_same == self.greedy_of else f"the first {self.greedy_same}"
        return [
            f"wrote {self.path}: {mb:.2f} MB, {self.parameters:,} parameters in {self.precision}",
            f"{self.precision} weights against the run's fp32: largest logit difference {self.max_logit_error:.2e}",
            f"greedy, {self.greedy_of} tokens from the run's prompt: {agree} identical to "
            "`tinyformer sample --temperature 0`",
            "open it in any browser (offline works); its console has window.tinyformer.generate(prompt, options)",
        ]


def check_exportable(model) -> None:
    """A UserError naming what the page's engine does not run."""
    if not isinstance(model, MiniGPT):
        raise UserError(f"export page runs MiniGPT language models; this run's model is {type(model).__name__}")
    c = model.config
    if c.attention != "softmax":
        raise UserError(f"export page runs softmax attention; this run has model.attention={c.attention!r}")
    if not c.causal:
        raise UserError("export page runs causal models; this run was trained with model.causal=false")


def spec(model: MiniGPT) -> dict:
    """What engine.js needs to know of the architecture (the tensors' names say the rest)."""
    c = model.config
    return {
        "vocab_size": c.vocab_size,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_kv_head": c.kv_heads,
        "n_embd": c.n_embd,
        "d_ff": c.d_ff,
        "ffn": c.ffn,
        "positions": c.positions,
        "rope_base": c.rope_base,
        "pe_scale": model.pe_scale,
        "qk_norm": c.qk_norm,
        "tie_weights": c.tie_weights,
        "logit_softcap": c.logit_softcap,
        "norm": c.norm,  # layernorm or rmsnorm; a missing bias tensor is a zero one
        "norm_eps": c.norm_eps,
        "window": c.block_size,  # the sliding window of `tinyformer sample`
    }


def tensors(model: MiniGPT) -> dict[str, torch.Tensor]:
    """The model's weights by their state-dict names, fp32 on the CPU; a tied head is stored once."""
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    if model.config.tie_weights:
        state.pop("head.weight")
    return state


def stored(x: torch.Tensor, precision: str) -> tuple[str, bytes, torch.Tensor | None]:
    """How one tensor is stored: (dtype tag, its bytes, the int8 row scales or None)."""
    if x.dim() < 2 or precision == "fp32":
        return "f32", x.contiguous().numpy().tobytes(), None
    if precision == "fp16":
        return "f16", x.half().contiguous().numpy().tobytes(), None
    rows = x.reshape(x.size(0), -1)
    scale = (rows.abs().amax(1) / 127).clamp_min(1e-30)  # (rows,)
    q = torch.round(rows / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return "i8", q.contiguous().numpy().tobytes(), scale


def as_read(x: torch.Tensor, precision: str) -> torch.Tensor:
    """The tensor the page reads back from `stored`: what its engine computes with."""
    tag, raw, scale = stored(x, precision)
    if tag == "f32":
        return x.clone()
    if tag == "f16":
        return x.half().float()
    q = torch.frombuffer(bytearray(raw), dtype=torch.int8).float().view(x.size(0), -1)
    return (q * scale[:, None]).view_as(x)


def pack(state: dict[str, torch.Tensor], precision: str) -> tuple[dict, bytes]:
    """The tensors as one blob: a header {name: shape, dtype, offset (and the int8 scales' offset)} and the bytes,
    each piece at a multiple of 4 bytes."""
    header, blob = {}, bytearray()

    def put(raw: bytes) -> int:
        at = len(blob)
        blob.extend(raw + b"\0" * (-len(raw) % 4))
        return at

    for name, x in state.items():
        tag, raw, scale = stored(x, precision)
        header[name] = {"shape": list(x.shape), "dtype": tag, "offset": put(raw)}
        if scale is not None:
            header[name]["scales"] = put(scale.numpy().astype("<f4").tobytes())
    return header, bytes(blob)


def tokenizer_data(tokenizer) -> dict:
    """The tokenizer as engine.js reads it: the characters, or a byte-level BPE's vocabulary and merges."""
    if isinstance(tokenizer, CharTokenizer):
        return {"type": "char", "chars": tokenizer.chars}
    if isinstance(tokenizer, BPETokenizer):
        data = json.loads(tokenizer.hf.to_str())
        pre = data.get("pre_tokenizer") or {}
        if data["model"].get("type") != "BPE" or pre.get("type") != "ByteLevel" or pre.get("add_prefix_space"):
            raise UserError("export page reads byte-level BPE tokenizers as GPT-2 splits them; this one is another")
        specials = [t["content"] for t in data.get("added_tokens", [])]
        return {"type": "bpe", "vocab": data["model"]["vocab"], "merges": data["model"]["merges"], "specials": specials}
    raise UserError(f"export page reads character and byte-level BPE tokenizers, not {type(tokenizer).__name__}")


def render(data: dict) -> str:
    """The HTML file: the page's template with its style, the model's JSON and the script inlined, and a CSP that
    allows those two inline blocks by their sha256 and nothing else."""
    playground = PAGE.parent.parent / "serve" / "static" / "style.css"  # a file it shares, not an import
    style = playground.read_text(encoding="utf-8") + (PAGE / "page.css").read_text(encoding="utf-8")
    script = (PAGE / "engine.js").read_text(encoding="utf-8") + "\n" + (PAGE / "page.js").read_text(encoding="utf-8")
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")  # no tag inside

    def digest(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"

    csp = (  # 'wasm-unsafe-eval': the script may compile WebAssembly (its matrix products); no JavaScript eval
        f"default-src 'none'; script-src {digest(script)} 'wasm-unsafe-eval'; style-src {digest(style)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    html = (PAGE / "page.html").read_text(encoding="utf-8")
    title = str(data["name"]).replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
    values = {"CSP": csp, "TITLE": title, "STYLE": style, "DATA": body, "SCRIPT": script}
    # one pass over the template: a value (a run's name, its prompt) holding "{{SCRIPT}}" is text, never a slot
    return re.sub(r"\{\{(CSP|TITLE|STYLE|DATA|SCRIPT)\}\}", lambda m: values[m[1]], html)


def page_html(run, precision: str = "fp16") -> str:
    """The page of a loaded gpt `Run`, as text (what `export_page` writes, without measuring its cost)."""
    from tinyformer.info import describe

    s = run.config.sample
    sample = {"prompt": s.prompt, "tokens": s.tokens, "temperature": s.temperature, "top_k": s.top_k}
    sample |= {"top_p": s.top_p, "seed": s.seed}
    return render(page_data(run.model, run.tokenizer, precision, Path(run.path).name, sample, describe(run)))


def page_data(model: MiniGPT, tokenizer, precision: str, name: str, sample: dict, info: str = "") -> dict:
    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    check_exportable(model)
    header, blob = pack(tensors(model), precision)
    return {
        "name": name,
        "precision": precision,
        "spec": spec(model),
        "tensors": header,
        "blob": base64.b64encode(blob).decode(),
        "tokenizer": tokenizer_data(tokenizer),
        "sample": sample,
        "info": info,
    }


def stored_model(model: MiniGPT, precision: str) -> MiniGPT:
    """A copy of `model` in fp32 with the weights the page reads (rounded to fp16, or int8 times the row scale)."""
    twin = copy.deepcopy(model).float().cpu().eval()
    with torch.no_grad():
        for name, x in twin.state_dict(keep_vars=True).items():
            if name in tensors(model):
                x.copy_(as_read(x.detach(), precision))
    return twin


def cost(run, precision: str, n: int = PROBE_TOKENS) -> tuple[float, int]:
    """What storing in `precision` costs, in PyTorch: (largest |logit difference| against the run's fp32 model over
    the last window of its greedy text from the run's prompt; how many of `n` greedy tokens of the stored weights
    in fp32, the page's arithmetic, equal `tinyformer sample --temperature 0`'s, also fp32 on a CPU)."""
    from tinyformer.generate.sampling import generate

    model, tokenizer = run.model, run.tokenizer
    base = copy.deepcopy(model).float().cpu().eval()
    twin = stored_model(model, precision)
    idx = torch.tensor([tokenizer.encode(run.config.sample.prompt) or [0]])  # (1, T0)
    with torch.no_grad():
        with run.autocast():  # as `tinyformer sample` runs it
            sampled = generate(model, idx.to(next(model.parameters()).device), n, temperature=0)[0].cpu()
        page = generate(twin, idx, n, temperature=0)[0]
        probe = page[-base.config.block_size :][None]  # (1, window)
        error = (base(probe).logits - twin(probe).logits).abs().max().item()
    differ = (sampled[idx.size(1) :] != page[idx.size(1) :]).nonzero()
    return error, int(differ[0, 0]) if len(differ) else n


def export_page(run, out: str | Path, precision: str = "fp16", force: bool = False) -> PageExport:
    """Write `run` (a loaded gpt `Run`) as one HTML file at `out` -> what was written and what it cost. The file
    is written whole after its cost is measured (`atomic_write`): a refused or interrupted export leaves nothing
    at `out`, nor a folder it made; never a file in the run's own folder."""
    out = check_page_target(out, force, run.path)
    html = page_html(run, precision).encode("utf-8")
    error, same = cost(run, precision)
    with new_folders(out.parent):
        atomic_write(out, lambda tmp: Path(tmp).write_bytes(html))
    n = sum(p.numel() for p in run.model.parameters())
    return PageExport(out, len(html), precision, n, error, same, PROBE_TOKENS)


def check_page_target(out: str | Path, force: bool, run_dir: str | Path | None = None) -> Path:
    """The file to write: not a folder, not in the run folder exported (`run_dir`), nothing at its name (a file,
    a link) unless `force`, which replaces it (a link too, never written through)."""
    out = not_in_run(output_path(Path(out)), run_dir)
    if os.path.lexists(out) and not force:
        raise UserError(f"{str(out)!r} exists; give a new file, or --force to overwrite it")
    return out
