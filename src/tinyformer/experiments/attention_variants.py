"""Attention variants side by side: what linear, grouped-query and multi-query attention cost and buy.

1. Quality: MiniGPT with softmax, linear (Katharopoulos et al., 2020), grouped-query with 2 KV heads (Ainslie
   et al., 2023) and multi-query attention (Shazeer, 2019), trained with the same recipe and steps on Tiny
   Shakespeare (the CPU preset of `experiment ablation`). Fewer KV heads means a smaller QKV projection; the
   feed-forward is widened by the parameters saved, so every cell has (nearly) the same parameter count.
2. Speed and memory against context length: one training step and one generated token for softmax through
   SDPA, softmax written out ("manual") and linear attention, L = 256 .. 16,384, each case in a fresh process
   (`tinyformer.experiments.context`); where linear attention starts to win.
3. What generation keeps per token: KV-cache bytes for MHA, GQA and MQA, and linear attention's fixed state.

    tinyformer experiment attention-variants [--quick] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

from tinyformer.device import pick_device
from tinyformer.experiments.context import KINDS, case_config, in_fresh_process, predicted_gib
from tinyformer.experiments.gpt_studies import best_val, params, run_study, sample_text
from tinyformer.experiments.report import figure, markdown_table, write_report
from tinyformer.experiments.runner import Cell, CellResult
from tinyformer.models.gpt import GPTConfig, MiniGPT
from tinyformer.plots import plot_series

LENGTHS, QUICK_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384), (32,)
MEMORY_BUDGET_GIB = 6.0  # a case predicted to need more is skipped, not run into the swap
SEED_WIDTH = dict(n_embd=128, n_head=4)  # the base config's, for the matched feed-forward and the cache bytes


def matched_mlp_ratio(n_embd: int, n_head: int, n_kv_head: int) -> float:
    """The feed-forward ratio that spends on hidden units (2D + 1 parameters each) what n_kv_head < n_head saves
    in the key/value projections (2 (D - Dkv) D), rounded to a whole hidden unit."""
    D, Dkv = n_embd, n_kv_head * (n_embd // n_head)
    return (4 * D + round(2 * (D - Dkv) * D / (2 * D + 1))) / D


def cells(n_embd: int, n_head: int) -> list[Cell]:
    def grouped(k: int) -> list[str]:
        return [f"model.n_kv_head={k}", f"model.mlp_ratio={matched_mlp_ratio(n_embd, n_head, k)!r}"]

    return [
        Cell("softmax", [], f"softmax multi-head attention, {n_head} heads (the base)"),
        Cell("linear", ["model.attention=linear"], "linear attention, elu(x)+1 feature map"),
        Cell("gqa-2", grouped(2), "grouped-query: 2 KV heads, feed-forward widened to match"),
        Cell("mqa", grouped(1), "multi-query: 1 KV head, feed-forward widened to match"),
    ]


def quality(out: Path | None, quick: bool, data: str | None) -> tuple[Path, list[CellResult], str]:
    width = dict(n_embd=32, n_head=4) if quick else SEED_WIDTH  # --quick trains at width 32
    folder, results = run_study("attention-variants", cells(**width), out, quick, data)
    rows = [[r.cell.name, r.cell.about, params(r), best_val(r), f"{r.run.state.train_seconds:.0f}"] for r in results]
    table = markdown_table(["cell", "what changes", "parameters", "best val loss", "train s"], rows)
    samples = "\n\n".join(f"**{r.cell.name}**\n\n```\n{sample_text(r, 200)}\n```" for r in results)
    curves = {r.cell.name: r.series("val", "loss") for r in results}
    plot_series(curves, folder / "val_loss.png", "step", "val loss", "Attention variants: val loss")
    note = (
        "One seed each: differences of about 0.01 are within what another seed moves. `train s` is the wall "
        "time of each run, trained one after another on a shared machine: section 2 measures speed side by side."
    )
    curve = figure("val_loss.png", "val loss")
    return folder, results, f"{table}\n\n{note}\n\n{curve}\n\n### A sample from each (seeded)\n\n{samples}"


def speed(lengths: tuple[int, ...], quick: bool, device: str) -> dict[str, dict[str, list]]:
    """{what: {kind: [(L, case result or None if skipped)]}} for what in train, generate."""
    out: dict[str, dict[str, list]] = {}
    for what in ("train", "generate"):
        out[what] = {}
        for kind in KINDS:
            row = []
            for L in lengths:
                gib = predicted_gib(kind, L, what, case_config(kind, L, quick))
                if gib > MEMORY_BUDGET_GIB:
                    row.append((L, {"error": f"skipped: needs ~{gib:.0f} GiB"}))
                    continue
                r = in_fresh_process(kind, L, what, 1 if quick else 3, quick, device)
                print(
                    f"  {what:8} {kind:6} L={L:6}: " + (r.get("error") or f"{r['ms']:.2f} ms, {r['peak_mib']:.0f} MiB")
                )
                row.append((L, r))
            out[what][kind] = row
    return out


def crossover(rows: dict[str, list], against: str) -> int | None:
    """The shortest measured L from which linear attention is faster than `against` at every longer L."""
    theirs = {L: r.get("ms") for L, r in rows[against]}
    won = [L for L, r in rows["linear"] if "ms" in r and (theirs.get(L) is None or r["ms"] < theirs[L])]
    lengths = [L for L, _ in rows["linear"]]
    for i, L in enumerate(lengths):
        if all(x in won for x in lengths[i:]):
            return L
    return None


def speed_tables(figures: dict, folder: Path) -> tuple[str, dict]:
    """-> (the markdown of both tables, {what: {kind: crossover length}})."""
    parts, crossovers = [], {}
    for what, label in (("train", "one training step (forward + backward), ms"), ("generate", "one token, ms")):
        rows = figures[what]
        lengths = [L for L, _ in rows["linear"]]

        def cell(r: dict) -> str:
            return r.get("error") or f"{r['ms']:.2f} ms / {r['peak_mib']:.0f} MiB"

        table = markdown_table(["L", *rows], [[L, *(cell(dict(rows[k])[L]) for k in rows)] for L in lengths])
        cross = {k: crossover(rows, k) for k in ("sdpa", "manual")}
        curves = {k: [(L, r["ms"]) for L, r in v if "ms" in r] for k, v in rows.items()}
        plot_series(curves, folder / f"{what}_vs_length.png", "context length L", label, label, logy=True)
        said = ", ".join(f"from L = {v:,}" if v else "at no measured L" for v in cross.values())
        parts += [
            f"### {label} (time / peak memory above the built model)",
            "",
            table,
            "",
            f"Linear attention is faster than SDPA and than manual softmax: {said} respectively.",
            "",
            figure(f"{what}_vs_length.png", what),
            "",
        ]
        crossovers[what] = cross
    return "\n".join(parts), crossovers


def cache_bytes(quick: bool) -> tuple[str, dict]:
    """Bytes generation keeps per token (softmax) or in all (linear), for the base width, 4 layers, fp32."""
    width = dict(n_embd=32, n_head=4) if quick else SEED_WIDTH
    rows, figures = [], {}
    for name, kw in (
        ("MHA", {}),
        ("GQA-2", {"n_kv_head": 2}),
        ("MQA", {"n_kv_head": 1}),
        ("linear", {"attention": "linear"}),
    ):
        model = MiniGPT(GPTConfig(vocab_size=65, block_size=1024, positions="none", **width, **kw))
        state = model.new_cache(1, 1024)
        if name == "linear":
            total = sum(s.nbytes() for s in state)
            rows.append([name, "0 (fixed size)", f"{total:,} in all, whatever the length"])
            figures[name] = {"bytes_total": total}
        else:
            per = sum(c.k.nbytes + c.v.nbytes for c in state) // 1024
            rows.append([name, f"{per:,}", f"{per * 1024:,} at L = 1,024"])
            figures[name] = {"bytes_per_token": per}
    mha = figures["MHA"]["bytes_per_token"]
    even = figures["linear"]["bytes_total"] / mha
    text = markdown_table(["attention", "bytes per token", "bytes held"], rows)
    return f"{text}\n\nThe linear state equals the MHA cache at L = {even:,.0f} tokens and is smaller past it.", figures


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    folder, results, quality_text = quality(out, quick, data)
    device = pick_device("auto").type
    figures = {"speed": speed(QUICK_LENGTHS if quick else LENGTHS, quick, device)}
    speed_text, figures["crossover"] = speed_tables(figures["speed"], folder)
    bytes_text, figures["cache_bytes"] = cache_bytes(quick)
    figures["quality"] = {r.cell.name: {"params": params(r), "best_val": best_val(r)} for r in results}
    parts = [
        "## 1. Quality at the same parameters and steps",
        "",
        quality_text,
        "",
        "## 2. Speed and memory against context length",
        "",
        "MiniGPT, 2 layers, width 128, 4 heads, no position table, batch 1, random weights; each case in a fresh "
        f"process. Cases predicted to need more than {MEMORY_BUDGET_GIB:.0f} GiB are skipped.",
        "",
        speed_text,
        "## 3. What generation keeps",
        "",
        bytes_text,
    ]
    title = "Attention variants: linear, grouped-query, multi-query"
    return write_report(folder, title, quick, parts, figures=figures, device=device, from_runs=False)
