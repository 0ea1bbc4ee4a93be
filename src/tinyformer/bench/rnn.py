"""Recurrent cells: torch's fused nn.RNN / nn.LSTM / nn.GRU vs the scratch loop of `models/rnn_cells.py`.

Both sides are an `RNNEncoder` (embedding, then the recurrent layer; the feature is the final h) with the
same weights (the scratch one loads the torch one's state dict), in training mode with dropout 0, on the
same batch of full-length rows (every token real, so tokens/s counts real tokens): forward + backward of
a sum of squares of the feature, no optimizer step. One layer, unidirectional.

Single steps alternate (torch, scratch, torch, ...) in one process so that noise on a shared machine hits
both alike. Per measurement: each side's median over `iters` steps (after one untimed step each) ->
tokens per second. Reported per cell and width: the median over `repeats` measurements of each side's
tokens/s and their ratio torch / scratch (how many times faster the fused kernel is).

    tinyformer bench rnn [--iters 5] [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import statistics
import time

import torch

from tinyformer.models.rnn import CELLS, RNNEncoder

HIDDENS = (128, 512)
SHAPE = dict(batch=32, length=128, n_embd=128)  # the batch (B, T) and the embedding width
VOCAB = 256


def build(cell: str, hidden: int, n_embd: int, device: torch.device) -> dict[str, RNNEncoder]:
    """{"torch": ..., "scratch": ...}: one-layer unidirectional encoders with the same weights, training mode."""
    torch.manual_seed(0)
    models = {impl: RNNEncoder(VOCAB, n_embd, hidden, 1, cell, dropout=0.0, impl=impl) for impl in ("torch", "scratch")}
    models["scratch"].load_state_dict(models["torch"].state_dict(), strict=True)
    return {impl: m.to(device).train() for impl, m in models.items()}


def one_step(model: RNNEncoder, ids: torch.Tensor, mask: torch.Tensor) -> float:
    """Seconds of one forward + backward on ids, mask (B, T)."""
    model.zero_grad(set_to_none=True)
    _sync(ids.device)
    t0 = time.perf_counter()
    model(ids, mask).pow(2).sum().backward()
    _sync(ids.device)
    return time.perf_counter() - t0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(cell: str, hidden: int, iters: int, repeats: int, device: torch.device, shape: dict) -> dict:
    """Alternating single steps of both sides -> the row of the table for one cell and width."""
    B, T = shape["batch"], shape["length"]
    models = build(cell, hidden, shape["n_embd"], device)
    ids = torch.randint(1, VOCAB, (B, T), generator=torch.Generator().manual_seed(0)).to(device)  # (B, T)
    mask = torch.ones_like(ids)  # (B, T): every token real
    for model in models.values():
        one_step(model, ids, mask)  # untimed: first-call allocations
    rates = {impl: [] for impl in models}
    for _ in range(repeats):
        times = {impl: [] for impl in models}
        for _ in range(iters):  # single steps alternate, so a burst of load hits both alike
            for impl, model in models.items():
                times[impl].append(one_step(model, ids, mask))
        for impl in models:
            rates[impl].append(B * T / statistics.median(times[impl]))
    fused, loop = statistics.median(rates["torch"]), statistics.median(rates["scratch"])
    return dict(
        cell=cell,
        hidden=hidden,
        torch_tokens_per_s=fused,
        scratch_tokens_per_s=loop,
        ratio=fused / loop,
        measurements=rates,  # tokens/s of each side, one per repeat
    )


def table(rows: list[dict]) -> str:
    lines = [f"{'cell':<5}{'hidden':>7}{'torch tok/s':>14}{'scratch tok/s':>15}{'torch/scratch':>15}"]
    for r in rows:
        lines.append(
            f"{r['cell']:<5}{r['hidden']:>7}{r['torch_tokens_per_s']:>14,.0f}{r['scratch_tokens_per_s']:>15,.0f}"
            f"{r['ratio']:>14.2f}x"
        )
    return "\n".join(lines)


def run_rnn_benchmark(
    iters: int = 5,
    repeats: int = 3,
    device: str = "cpu",
    hiddens: tuple[int, ...] = HIDDENS,
    cells: tuple[str, ...] = CELLS,
    shape: dict | None = None,
) -> dict:
    """Every cell at every width: print the table, return the figures (`shape` shrinks the batch for tests)."""
    from tinyformer.bench.workers import machine_line

    dev, shape = torch.device(device), shape or SHAPE
    print(
        f"recurrent encoders, 1 layer, unidirectional, embedding {shape['n_embd']}, batch {shape['batch']} x "
        f"{shape['length']} tokens (all real), forward + backward, on {dev.type}; torch's fused layer (packed) vs "
        f"the scratch loop, same weights; median of {repeats} alternating measurement(s) of {iters} step(s)"
    )
    print(machine_line())
    rows = []
    for cell in cells:
        for hidden in hiddens:
            rows.append(measure(cell, hidden, iters, repeats, dev, shape))
            r = rows[-1]
            print(f"  {cell} {hidden}: torch {r['torch_tokens_per_s']:,.0f} tokens/s, scratch "
                  f"{r['scratch_tokens_per_s']:,.0f} tokens/s", flush=True)  # fmt: skip
    print(table(rows))
    return {"layers": 1, "bidirectional": False, **shape, "iters": iters, "repeats": repeats, "rows": rows}
