"""loss.png: train and validation loss against optimizer step, read from metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

from tinyformer.train.checkpoint import atomic_write


def read_metrics(path: Path) -> list[dict]:
    if not Path(path).is_file():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_losses(metrics: Path, png: Path, title: str = "") -> None:
    """Write the train curve (logged means) and the val curve (each evaluation) to `png`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for split, style in (("train", "-"), ("val", "o-")):
        pts = [(r["step"], r["loss"]) for r in rows if r.get("split") == split]
        if pts:
            ax.plot(*zip(*pts), style, label=f"{split} loss", markersize=4, linewidth=1.2)
    val = [r["loss"] for r in rows if r.get("split") == "val"]
    if val:
        ax.axhline(min(val), color="grey", linewidth=0.6, linestyle=":")
        ax.set_title(f"{title}  (best val {min(val):.4f})".strip())
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    atomic_write(Path(png), lambda t: fig.savefig(t, format="png"))
    plt.close(fig)
