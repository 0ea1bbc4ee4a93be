"""Static attention figures (PNG and SVG) drawn from `AttentionMaps`, for any model.

1. `plot_head`    one head: query tokens down, key tokens across
2. `plot_layer`   every head of one layer in a grid that adapts to the head count
3. `plot_flow_to` layers x heads: mean weight all queries give to one token
4. `plot_roles`   layers x heads: the dominant role of each head and its score
Each writes `<stem>.png` and `<stem>.svg` and returns both paths.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import atomic_write, make_dir
from tinyformer.fonts import use_fonts_for
from tinyformer.plots import pyplot
from tinyformer.viz.capture import AttentionMaps
from tinyformer.viz.roles import HeadRoles


def _save(fig, stem: Path) -> list[Path]:
    stem = Path(stem)
    make_dir(stem.parent)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for p in paths:
        kw = dict(format=p.suffix[1:], dpi=130 if p.suffix == ".png" else None, bbox_inches="tight")
        atomic_write(p, lambda t, kw=kw: fig.savefig(t, **kw))
        fig.set_layout_engine("none")  # the layout is settled: don't solve it again for the SVG
    pyplot().close(fig)
    return paths


def check_index(what: str, value: int, count: int) -> None:
    if not 0 <= value < count:
        raise UserError(
            f"--{what} {value} is out of range: the model has {count} {what}{'s' if count != 1 else ''} (0-{count - 1})"
        )


def _matrix(ax, w: torch.Tensor, rows: list[str], cols: list[str], small: bool = False):
    im = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    size = 6 if small else 9
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=size)
    ax.set_yticks(range(len(rows)), rows, fontsize=size)
    return im


def plot_head(maps: AttentionMaps, layer: int, head: int, stem: Path, row: int = 0, title: str = "") -> list[Path]:
    check_index("layer", layer, maps.n_layers)
    check_index("head", head, maps.n_heads)
    q, k = maps.query_tokens[row], maps.key_tokens[row]
    use_fonts_for(q + k)
    plt = pyplot()
    side = max(4.0, 0.32 * max(len(q), len(k)) + 2)
    fig, ax = plt.subplots(figsize=(side + 1, side))
    im = _matrix(ax, maps.head(layer, head, row), q, k)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title or f"{maps.model_name}: {maps.kind} attention, layer {layer}, head {head}")
    fig.colorbar(im, ax=ax, label="attention weight")
    return _save(fig, stem)


def grid_shape(n: int) -> tuple[int, int]:
    """Rows x columns for n panels, as square as possible (12 -> 3x4, 4 -> 2x2, 6 -> 2x3)."""
    cols = math.ceil(math.sqrt(n))
    return math.ceil(n / cols), cols


def plot_layer(maps: AttentionMaps, layer: int, stem: Path, row: int = 0) -> list[Path]:
    check_index("layer", layer, maps.n_layers)
    q, k = maps.query_tokens[row], maps.key_tokens[row]
    use_fonts_for(q + k)
    plt = pyplot()
    rows, cols = grid_shape(maps.n_heads)
    cell = max(2.6, 0.16 * max(len(q), len(k)) + 1.2)
    size = (cell * cols + 1, cell * rows + 0.6)
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False, layout="constrained")
    w = maps.layers[layer][row]  # (H, T, S)
    for h, ax in enumerate(axes.flat):
        if h >= maps.n_heads:
            ax.axis("off")
            continue
        im = ax.imshow(w[h].numpy(), cmap="viridis", vmin=0.0, vmax=float(w.max()), aspect="auto")
        ax.set_title(f"head {h}", fontsize=9)
        bottom, left = h + cols >= maps.n_heads, h % cols == 0  # label only the outer edges
        ax.set_xticks(range(len(k)), k if bottom else [], rotation=90, fontsize=6)
        ax.set_yticks(range(len(q)), q if left else [], fontsize=6)
    fig.suptitle(f"{maps.model_name}: {maps.kind} attention, layer {layer}, all {maps.n_heads} heads")
    fig.colorbar(im, ax=axes.ravel().tolist(), label="attention weight", shrink=0.8)
    return _save(fig, stem)


def flow_to(maps: AttentionMaps, token: str, row: int = 0) -> torch.Tensor:
    """(L, H): mean over queries of the weight given to `token` (summed over its occurrences)."""
    keys = maps.key_tokens[row]
    pos = [i for i, t in enumerate(keys) if t == token]
    if not pos:
        raise UserError(f"token {token!r} is not in the sentence; its tokens are: {' '.join(keys)}")
    return maps.stacked(row)[..., pos].sum(-1).mean(-1)  # (L, H)


def _layer_head_axes(ax, L: int, H: int) -> None:
    ax.set_xticks(range(H), [str(h) for h in range(H)])
    ax.set_yticks(range(L), [str(l) for l in range(L)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")


def plot_flow_to(maps: AttentionMaps, token: str, stem: Path, row: int = 0) -> list[Path]:
    m = flow_to(maps, token, row)
    use_fonts_for([token])
    plt = pyplot()
    L, H = m.shape
    fig, ax = plt.subplots(figsize=(0.55 * H + 2.5, 0.45 * L + 1.8))
    im = ax.imshow(m.numpy(), cmap="magma", vmin=0.0, aspect="auto")
    for l in range(L):
        for h in range(H):
            ax.text(
                h,
                l,
                f"{float(m[l, h]):.2f}",
                ha="center",
                va="center",
                fontsize=6,
                color="white" if m[l, h] < 0.6 * float(m.max()) else "black",
            )
    _layer_head_axes(ax, L, H)
    ax.set_title(f"{maps.model_name}: mean attention flowing to {token!r}")
    fig.colorbar(im, ax=ax, label="mean weight from all queries")
    return _save(fig, stem)


ROLE_COLOURS = {
    "self": "#4c72b0",
    "prev": "#55a868",
    "next": "#8fd17f",
    "cls": "#c44e52",
    "end": "#dd8452",
    "broad": "#bbbbbb",
    "mixed": "#ffffff",
}


def plot_roles(roles: HeadRoles, stem: Path, title: str = "") -> list[Path]:
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    plt = pyplot()
    names = list(ROLE_COLOURS)
    L, H = len(roles.dominant), len(roles.dominant[0])
    idx = torch.tensor([[names.index(r) for r in layer] for layer in roles.dominant])
    fig, ax = plt.subplots(figsize=(0.7 * H + 3.2, 0.5 * L + 1.8))
    ax.imshow(idx.numpy(), cmap=ListedColormap(list(ROLE_COLOURS.values())), vmin=0, vmax=len(names) - 1)
    for l in range(L):
        for h in range(H):
            role = roles.dominant[l][h]
            score = roles.scores[role][l, h] if role in roles.scores else float("nan")
            ax.text(
                h,
                l,
                f"{role}\n{float(score):.2f}" if role != "mixed" else "mixed",
                ha="center",
                va="center",
                fontsize=6,
            )
    _layer_head_axes(ax, L, H)
    ax.legend(
        handles=[Patch(color=c, label=n) for n, c in ROLE_COLOURS.items()],
        bbox_to_anchor=(1.02, 1),
        loc="upper left",
        fontsize=7,
        title="dominant role",
    )
    ax.set_title(f"{title}: head roles (score of the dominant role)".strip(": "))
    return _save(fig, stem)
