"""Export a run to ONNX, checked against onnxruntime before the command says it is done.

    tinyformer export onnx runs/demo out/                  # model.onnx: ids (B, T) -> logits (B, T, V)
    tinyformer export onnx runs/demo out/ --attention      # ... and attention (L, B, H, T, T)
    tinyformer export onnx runs/reverse out/               # encoder.onnx and decoder.onnx

A language model (MiniGPT) is one graph with a dynamic batch and sequence length (up to block_size with learned
positions). The reversal encoder-decoder is two: `encoder.onnx`, src (B, S) -> memory (B, S, D), run once per
input, and `decoder.onnx`, one step: (tgt_in (B, T), memory, src) -> the logits (B, V) of the token after
tgt_in, run once per output token (the whole prefix each time: no cache crosses the graph boundary). The run's
tokenizer.json is copied beside them.

Each export is checked where it is written: onnxruntime and PyTorch on fixed inputs (the largest |difference|
of every output, at most `TOLERANCE`), and greedy generation from the run's prompt (a language model) or on
fixed digit sequences (reversal) with both, which must give the same tokens. Needs the `onnx` extra
(onnx, onnxscript: PyTorch's exporter; onnxruntime: the check).
"""

from __future__ import annotations

import functools
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from tinyformer.errors import UserError
from tinyformer.extras import need
from tinyformer.files import staged_folder
from tinyformer.runfolder import TOKENIZER

TOLERANCE = 1e-4  # largest |onnxruntime - PyTorch| accepted on the fixed inputs
GREEDY_TOKENS = 100  # a language model's greedy tokens compared
OPSET = 18


@dataclass
class OnnxExport:
    folder: Path
    graphs: list[str]
    max_diff: float  # onnxruntime against PyTorch, fp32, over every output of the fixed inputs
    greedy: str  # what the greedy comparison found, one phrase
    files: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [
            f"wrote {', '.join(str(self.folder / g) for g in self.graphs + self.files)}",
            f"checked with onnxruntime: largest difference from PyTorch {self.max_diff:.2e} (at most {TOLERANCE:g}); "
            f"{self.greedy}",
        ]


class _LM(nn.Module):
    """ids (B, T) -> logits (B, T, V) [, attention (L, B, H, T, T)]."""

    def __init__(self, model: nn.Module, attention: bool) -> None:
        super().__init__()
        self.model, self.attention = model, attention

    def forward(self, ids: torch.Tensor):
        out = self.model(ids, need_weights=self.attention)
        return (out.logits, torch.stack(out.attentions)) if self.attention else out.logits


class _Encoder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.model.encode(src).memory  # (B, S, D)


class _DecoderStep(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tgt_in: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        src_valid = src != self.model.config.pad_id  # (B, S)
        return self.model.decode(tgt_in, memory, src_valid).logits[:, -1]  # (B, V)


def _export(module: nn.Module, args: tuple, path: Path, names: list[str], outputs: list[str], dims: dict) -> None:
    """torch.onnx's exporter (torch.export underneath) with named dynamic dimensions; quiet unless it fails."""
    import contextlib
    import io
    import logging
    import warnings

    shapes = {
        n: {axis: torch.export.Dim(name, min=lo, max=hi) for axis, (name, lo, hi) in d.items()} for n, d in dims.items()
    }
    printed = io.StringIO()
    log, level = logging.getLogger("torch.onnx"), logging.getLogger("torch.onnx").level
    with warnings.catch_warnings(), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        warnings.simplefilter("ignore")
        log.setLevel(logging.ERROR)  # "torchvision is not installed. Skipping ..." and the like
        try:
            torch.onnx.export(
                module,
                args,
                str(path),
                input_names=names,
                output_names=outputs,
                dynamic_shapes=shapes,
                opset_version=OPSET,
                dynamo=True,
                external_data=False,
            )
        except Exception as e:  # the exporter's own report is long: one line, and where the rest is
            raise UserError(
                f"the ONNX exporter failed on this model: {type(e).__name__}: {str(e).splitlines()[0]}"
            ) from e
        finally:
            log.setLevel(level)


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def export_onnx(run, out: str | Path, attention: bool = False, force: bool = False) -> OnnxExport:
    """Write `run` (a loaded `Run`) as ONNX graphs into the folder `out`, then check them with onnxruntime.

    The graphs are written and checked in a temp folder beside `out`, moved in only when the check passed: a
    refused, failed or interrupted export leaves nothing under `out`'s name, and an earlier export stays whole.
    """
    need("tinyformer export onnx", "onnx", "onnxscript", "onnxruntime")
    from tinyformer.export.hf import check_target
    from tinyformer.models.protocols import CausalLM, EncoderDecoder

    out = check_target(Path(out), force, run.path)
    model = run.model.float().cpu().eval()
    if isinstance(model, CausalLM):
        build = functools.partial(_language_model, model, run, attention=attention)  # (folder) -> OnnxExport
    elif isinstance(model, EncoderDecoder) and run.config.task == "reverse":
        if attention:
            raise UserError("--attention is for a language model's graph; the reversal graphs give logits")
        build = functools.partial(_reversal, model, run)
    else:
        raise UserError(f"export onnx takes gpt and reverse runs; this one is a {run.config.task!r} run")
    tokenizer = Path(run.path) / TOKENIZER
    with staged_folder(out) as folder:
        result = build(folder)
        if tokenizer.is_file():  # beside the graphs under the same name
            shutil.copyfile(tokenizer, folder / TOKENIZER)
            result.files.append(TOKENIZER)
    result.folder = out
    return result


def _language_model(model, run, out: Path, attention: bool) -> OnnxExport:
    from tinyformer.generate.sampling import generate

    c, path = model.config, out / "model.onnx"
    longest = model.max_context or 4 * c.block_size  # positions other than learned: any length; checked to 4x
    outputs = ["logits", "attention"] if attention else ["logits"]
    example = torch.zeros(1, min(8, longest), dtype=torch.long)
    dims = {"ids": {0: ("batch", 1, 1024), 1: ("sequence", 1, longest)}}
    with torch.no_grad():
        _export(_LM(model, attention), (example,), path, ["ids"], outputs, dims)
    session = _session(path)
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for B, T in ((1, 1), (2, 7), (1, min(longest, c.block_size)), (1, longest)):
        ids = torch.randint(0, c.vocab_size, (B, T), generator=g)
        got = session.run(None, {"ids": ids.numpy()})
        with torch.no_grad():
            want = _LM(model, attention)(ids)
        want = want if isinstance(want, tuple) else (want,)
        worst = max(worst, *(float(abs(torch.from_numpy(a) - w).max()) for a, w in zip(got, want, strict=True)))
    if worst > TOLERANCE:
        raise UserError(
            f"onnxruntime's logits differ from PyTorch's by {worst:.2e} (> {TOLERANCE:g}): {path.name} is wrong"
        )
    prompt = torch.tensor([run.tokenizer.encode(run.config.sample.prompt) or [0]])  # (1, T0)
    with torch.no_grad():
        ours = generate(model, prompt, GREEDY_TOKENS, temperature=0)[0].tolist()
    theirs = onnx_greedy(session, prompt[0].tolist(), GREEDY_TOKENS, c.block_size)
    if theirs != ours:
        first = next(i for i, (a, b) in enumerate(zip(theirs, ours, strict=True)) if a != b)
        raise UserError(f"onnxruntime's greedy text leaves PyTorch's at token {first}: {path.name} is wrong")
    return OnnxExport(out, ["model.onnx"], worst, f"{GREEDY_TOKENS} greedy tokens identical")


def onnx_greedy(session, ids: list[int], n: int, window: int) -> list[int]:
    """`n` greedy tokens after `ids` with the model graph: each step runs the last `window` ids (no cache)."""
    import numpy as np

    ids = list(ids)
    for _ in range(n):
        logits = session.run(["logits"], {"ids": np.array([ids[-window:]], dtype=np.int64)})[0]  # (1, T, V)
        ids.append(int(logits[0, -1].argmax()))
    return ids


def _reversal(model, run, out: Path) -> OnnxExport:
    from tinyformer.data.reversal import BOS, EOS, PAD, make_split
    from tinyformer.tasks.reverse import decode

    c, d = model.config, run.config.data
    src, tgt = make_split(8, d.min_len, d.longest, seed=12345, variant=d.variant, width=d.longest)  # (8, S) each
    longest = c.block_size
    with torch.no_grad():
        memory = model.encode(src).memory
        dims = {"src": {0: ("batch", 1, 1024), 1: ("source", 1, longest)}}
        _export(_Encoder(model), (src,), out / "encoder.onnx", ["src"], ["memory"], dims)
        dims = {
            "tgt_in": {0: ("batch", 1, 1024), 1: ("target", 1, longest)},
            "memory": {0: ("batch", 1, 1024), 1: ("source", 1, longest)},
            "src": {0: ("batch", 1, 1024), 1: ("source", 1, longest)},
        }
        _export(_DecoderStep(model), (tgt[:, :3], memory, src), out / "decoder.onnx", list(dims), ["logits"], dims)
    encoder, decoder = _session(out / "encoder.onnx"), _session(out / "decoder.onnx")
    worst = 0.0
    with torch.no_grad():
        for B, T in ((8, 1), (8, 5), (3, tgt.size(1))):
            got_memory = encoder.run(None, {"src": src[:B].numpy()})[0]
            worst = max(worst, float(abs(torch.from_numpy(got_memory) - memory[:B]).max()))
            feed = {"tgt_in": tgt[:B, :T].numpy(), "memory": memory[:B].numpy(), "src": src[:B].numpy()}
            want = _DecoderStep(model)(tgt[:B, :T], memory[:B], src[:B])
            worst = max(worst, float(abs(torch.from_numpy(decoder.run(None, feed)[0]) - want).max()))
        ours = decode(model, src)  # (8, L) greedy, EOS then padding
    if worst > TOLERANCE:
        raise UserError(f"onnxruntime differs from PyTorch by {worst:.2e} (> {TOLERANCE:g}): the graphs are wrong")
    theirs = reversal_greedy(encoder, decoder, src, BOS, EOS, PAD, ours.size(1))
    if not torch.equal(theirs, ours):
        raise UserError("onnxruntime's greedy outputs differ from PyTorch's on fixed inputs: the graphs are wrong")
    return OnnxExport(out, ["encoder.onnx", "decoder.onnx"], worst, f"greedy outputs identical on {len(src)} inputs")


def reversal_greedy(encoder, decoder, src: torch.Tensor, bos: int, eos: int, pad: int, steps: int) -> torch.Tensor:
    """Greedy decoding with the two graphs: the encoder once, the decoder step per token -> (B, steps) ids."""
    import numpy as np

    s = src.numpy()
    memory = encoder.run(None, {"src": s})[0]
    seq = np.full((len(s), 1), bos, dtype=np.int64)
    done = np.zeros(len(s), dtype=bool)
    for _ in range(steps):
        logits = decoder.run(None, {"tgt_in": seq, "memory": memory, "src": s})[0]  # (B, V)
        nxt = np.where(done, pad, logits.argmax(-1))
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
        done |= nxt == eos
        if done.all():
            break
    return torch.from_numpy(seq[:, 1:])


def tokens_per_second(run, n: int = 200, repeats: int = 3) -> dict[str, float]:
    """Greedy tokens a second from the run's prompt: onnxruntime with the model graph (the window re-run each step)
    against tinyformer's own KV-cached generation, in turn, medians of `repeats` (for the notes and figures)."""
    import statistics
    import tempfile

    from tinyformer.generate.sampling import generate

    model = run.model.float().cpu().eval()
    prompt = torch.tensor([run.tokenizer.encode(run.config.sample.prompt) or [0]])
    longest = model.max_context or 4096
    example = torch.zeros(1, min(8, longest), dtype=torch.long)  # not 1: torch.export would fix a length of 1
    dims = {"ids": {0: ("batch", 1, 1024), 1: ("sequence", 1, longest)}}
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        _export(_LM(model, False), (example,), Path(tmp) / "m.onnx", ["ids"], ["logits"], dims)
        session = _session(Path(tmp) / "m.onnx")
        times = {"onnxruntime": [], "tinyformer": []}
        for _ in range(repeats):
            t = time.perf_counter()
            onnx_greedy(session, prompt[0].tolist(), n, model.config.block_size)
            times["onnxruntime"].append(time.perf_counter() - t)
            t = time.perf_counter()
            generate(model, prompt, n, temperature=0)
            times["tinyformer"].append(time.perf_counter() - t)
    return {k: n / statistics.median(v) for k, v in times.items()}
