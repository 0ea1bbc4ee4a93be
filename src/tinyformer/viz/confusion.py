"""confusion.png: which classes a classifier mistakes for which, counts and row shares in each cell."""

from __future__ import annotations

from pathlib import Path

import torch

from tinyformer.train.checkpoint import atomic_write
from tinyformer.viz.fonts import use_fonts_for


def plot_confusion(confusion: torch.Tensor, labels: list[str], png: Path, title: str = "") -> Path:
    """confusion (C, C): rows = true class, columns = predicted. Colour = share of the row (recall per class)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
