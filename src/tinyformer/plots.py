"""Plots that are not attention views: loss curves (loss.png), a confusion matrix (confusion.png) and
named curves on one axis (the experiments' figures). matplotlib is imported only when one is drawn.

A bottom-layer module: tasks, the trainer and experiments all draw through it; it imports nothing of theirs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tinyformer.files import atomic_write
from tinyformer.fonts import use_fonts_for


def pyplot():
    """matplotlib.pyplot on the Agg backend (no screen needed), or on Jupyter's inline backend when a notebook
    chose it: every figure here is saved and closed, and the learner's own plots still show inline."""
    import matplotlib

    if "inline" not in str(dict.get(matplotlib.rcParams, "backend")):  # read as set: a lookup would resolve it
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_losses(rows: list[dict], png: Path, title: str = "") -> None:
    """The loss curves of metrics.jsonl `rows`, to `png`, each saying what it is: the training steps' losses (the
    logged means, dropout on), and each evaluation's (eval mode) of the val split, and of the train split where
    the evaluation scores it too (`train_loss`: `train.eval_batches=fresh`, whose batches are new each time)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    evals = [r for r in rows if r.get("split") == "val"]
    fresh = any("train_loss" in r for r in evals)
    drawn = "new batches each time" if fresh else "the same data each time"
    curves = (
        ("train", "loss", "-", "train steps (mean of the logged steps, dropout on)"),
        ("val", "train_loss", "s-", f"train, evaluated (eval mode, {drawn})"),
        ("val", "loss", "o-", f"val, evaluated (eval mode, {drawn})"),
    )
    for split, key, style, label in curves:
        pts = [(r["step"], r[key]) for r in rows if r.get("split") == split and key in r]
        if pts:
            ax.plot(*zip(*pts), style, label=label, markersize=4, linewidth=1.2)
    val = [r["loss"] for r in rows if r.get("split") == "val"]
    if val:
        ax.axhline(min(val), color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(f"{title}  (best val {min(val):.4f})".strip())
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.grid(alpha=0.3)
    if rows:
        ax.legend()
    fig.tight_layout()
    atomic_write(Path(png), lambda t: fig.savefig(t, format="png"))
    plt.close(fig)


def plot_confusion(confusion: torch.Tensor, labels: list[str], png: Path, title: str = "") -> Path:
    """confusion (C, C): rows = true class, columns = predicted. Colour = share of the row (recall per class)."""
    plt = pyplot()
    use_fonts_for(labels)
    C = len(labels)
    shares = confusion.float() / confusion.sum(1, keepdim=True).clamp(min=1)  # (C, C), rows sum to 1
    size = 2.2 + 0.75 * C
    fig, ax = plt.subplots(figsize=(size + 1.2, size), dpi=110)
    im = ax.imshow(shares.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
    for i in range(C):
        for j in range(C):
            colour = "white" if shares[i, j] > 0.6 else "black"
            ax.text(
                j, i, f"{int(confusion[i, j])}\n{shares[i, j]:.0%}", ha="center", va="center", fontsize=8, color=colour
            )
    ax.set_xticks(range(C), labels, rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(C), labels, fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    correct = int(confusion.diag().sum())
    total = int(confusion.sum())
    ax.set_title(f"{title}\naccuracy {correct}/{total} = {correct / max(total, 1):.1%}".strip(), fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    fig.tight_layout()
    atomic_write(Path(png), lambda t: fig.savefig(t, format="png"))
    plt.close(fig)
    return Path(png)


def plot_series(
    curves: dict[str, list[tuple[float, float]]],
    png: Path,
    xlabel: str,
    ylabel: str,
    title: str,
    logy: bool = False,
    target: float | None = None,
) -> Path:
    """Several named curves on one plot (the shared plot of a study); `logy` for values spanning decades; `target`
    draws the value the curves race to as a dashed line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 4.8), dpi=110)
    colours = plt.get_cmap("tab20").colors
    for i, (name, pts) in enumerate(curves.items()):
        if pts:
            style = ("o-", "s--", "^-.")[i % 3]  # colour and line style both vary: no two curves look alike
            ax.plot(
                *zip(*pts, strict=True),
                style,
                color=colours[(2 * i) % 20 + (i // 10)],
                label=name,
                markersize=3,
                linewidth=1.2,
            )
    if target is not None:
        ax.axhline(target, color="0.3", linestyle=":", linewidth=1.2, label=f"target {target:g}")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    atomic_write(Path(png), lambda t: fig.savefig(t, format="png"))
    plt.close(fig)
    return png


def plot_span_probabilities(
    tokens: list[str], start: list[float], end: list[float], gold: tuple[int, int], png: Path, title: str = ""
) -> Path:
    """Extractive QA: P(start) and P(end) at each token of one window, the gold span shaded (none when (0, 0))."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 0.14 * len(tokens)), 4.2), dpi=110)
    x = range(len(tokens))
    ax.bar([i - 0.2 for i in x], start, width=0.4, label="P(start)", color="tab:blue")
    ax.bar([i + 0.2 for i in x], end, width=0.4, label="P(end)", color="tab:orange")
    if gold != (0, 0):
        ax.axvspan(gold[0] - 0.5, gold[1] + 0.5, color="tab:green", alpha=0.2, label="gold answer")
    ax.set_xticks(list(x), tokens, rotation=90, fontsize=6)
    ax.set_xlim(-0.5, len(tokens) - 0.5)
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    atomic_write(Path(png), lambda t: fig.savefig(t, format="png"))
    plt.close(fig)
    return Path(png)
