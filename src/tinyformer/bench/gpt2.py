"""Fine-tuning speed: MiniGPT in GPT-2 small's configuration vs transformers' GPT2LMHeadModel, same batch.

GPT-2 small: 12 layers, 12 heads, 768 wide, 50,257 tokens, 1,024 positions, tied head, tanh GELU (124M
parameters). Both models hold the same weights (ours imported from theirs with `import_gpt2`), run in
training mode with dropout 0 so they compute the same function (the losses are printed side by side), and
take the same batch of token ids: forward + backward, no optimizer step (AdamW would be the same code for
both). Hugging Face's attention is its default ("sdpa"), ours is ours ("sdpa" backend).

Single steps alternate (theirs, ours, theirs, ...) in one process so that noise on a shared machine hits both
alike. Per pair of measurements: each model's median step over `iters` steps (after one untimed step each at
the start) -> tokens per second. Reported: each pair's ratio (ours / theirs tokens/s) and the median ratio.

    tinyformer bench gpt2 [--iters 3] [--repeats 5] [--device cpu]
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from tinyformer.models import count_parameters

SMALL = dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)


def build(device: torch.device, size: dict | None = None) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(ours, theirs) with the same weights, in training mode, dropout 0; random init (no download)."""
    import transformers

    from tinyformer.models.gpt import GPTConfig, MiniGPT
    from tinyformer.models.gpt2 import config_from_gpt2, import_gpt2

    config = transformers.GPT2Config(**(size or SMALL), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    theirs = transformers.GPT2LMHeadModel(config).to(device).train()
    ours = MiniGPT(GPTConfig(dropout=0.0, **config_from_gpt2(config.to_dict())))
    import_gpt2(ours, {k: v.detach().cpu() for k, v in theirs.state_dict().items()})
    return ours.to(device).train(), theirs


def one_step(model: torch.nn.Module, ids: torch.Tensor, hf: bool) -> tuple[float, float]:
    """-> (seconds of one forward + backward on ids (B, T + 1), the loss)."""
    model.zero_grad(set_to_none=True)
    _sync(ids.device)
    t0 = time.perf_counter()
    if hf:  # the same T positions and the same loss as ours (labels= would run T + 1 positions)
        loss = F.cross_entropy(model(ids[:, :-1]).logits.flatten(0, 1), ids[:, 1:].flatten())
    else:
        loss = model(ids[:, :-1], ids[:, 1:]).loss
    loss.backward()
    _sync(ids.device)
    return time.perf_counter() - t0, loss.item()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_gpt2_benchmark(iters: int, repeats: int, device: str = "cpu", size: dict | None = None) -> dict:
    """Alternating measurements of both; prints a table and returns the figures."""
    dev = torch.device(device)
    B, T = (8, 512) if dev.type == "cuda" else (2, 128)
    ours, theirs = build(dev, size)
    n_params = count_parameters(ours)
    ids = torch.randint(0, theirs.config.vocab_size, (B, T + 1), generator=torch.Generator().manual_seed(0)).to(dev)
    print(f"GPT-2 config, {n_params:,} parameters, batch {B} x {T} tokens, forward + backward, on {dev.type}")
    pairs, loss = [], {}
    one_step(theirs, ids, True), one_step(ours, ids, False)  # untimed: first-call allocations
    for r in range(repeats):
        times = {"theirs": [], "ours": []}
        for _ in range(iters):  # single steps alternate, so a burst of load hits both alike
            for name, model in (("theirs", theirs), ("ours", ours)):
                seconds, loss[name] = one_step(model, ids, name == "theirs")
                times[name].append(seconds)
        pairs.append((B * T / statistics.median(times["ours"]), B * T / statistics.median(times["theirs"])))
        print(f"  pair {r + 1}: ours {pairs[-1][0]:,.0f} tokens/s, transformers {pairs[-1][1]:,.0f} tokens/s, "
              f"ratio {pairs[-1][0] / pairs[-1][1]:.3f}")  # fmt: skip
    ratios = [a / b for a, b in pairs]
    figures = {
        "batch": [B, T],
        "parameters": n_params,
        "ours_tokens_per_s": statistics.median(a for a, _ in pairs),
        "transformers_tokens_per_s": statistics.median(b for _, b in pairs),
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
        "loss": loss,
    }
    print(
        f"median: ours {figures['ours_tokens_per_s']:,.0f} tokens/s, transformers "
        f"{figures['transformers_tokens_per_s']:,.0f} tokens/s; ratio ours/transformers {figures['ratio_median']:.3f} "
        f"(pairs {min(ratios):.3f}-{max(ratios):.3f}); same loss on the batch: ours {loss['ours']:.5f}, "
        f"transformers {loss['theirs']:.5f}"
    )
    return figures
