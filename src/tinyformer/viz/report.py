"""A markdown report on one sentence's attention: every figure, the head-role table, and
short answers to the seed lab's questions, each backed by a number from the role scores.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from tinyformer.files import write_text
from tinyformer.viz import heatmaps as hm
from tinyformer.viz.capture import AttentionMaps
from tinyformer.viz.roles import FOCUS, FOCUSED, ROLES, HeadRoles


def _heads_with(roles: HeadRoles, names: tuple[str, ...]) -> list[str]:
    out = []
    for l, layer in enumerate(roles.dominant):
        for h, role in enumerate(layer):
            if role in names:
                out.append(f"L{l}H{h} ({role} {float(roles.scores[role][l, h]):.2f})")
    return out


def _strongest(roles: HeadRoles, role: str) -> str:
    s = roles.scores[role]
    if torch.isnan(s).all():
        return f"the model has no {role} token"
    flat = int(torch.nan_to_num(s, nan=-1.0).argmax())
    l, h = divmod(flat, s.shape[1])
    return f"the strongest is L{l}H{h} with {float(s[l, h]):.2f}"


def _listing(roles: HeadRoles, names: tuple[str, ...], what: str, probe: str) -> str:
    heads = _heads_with(roles, names)
    if heads:
        return f"- **{what}** ({len(heads)} of {_total(roles)} heads): {', '.join(heads)}."
    return f"- **{what}**: none reaches {FOCUS}; {_strongest(roles, probe)}."


def _total(roles: HeadRoles) -> int:
    return len(roles.dominant) * len(roles.dominant[0])


def _layer_means(roles: HeadRoles, role: str) -> list[float]:
    return [float(torch.nan_to_num(roles.scores[role][l]).mean()) for l in range(len(roles.dominant))]


def answers(roles: HeadRoles) -> list[str]:
    """The seed's questions answered from the role scores."""
    L = len(roles.dominant)
    lines = [
        _listing(roles, ("self",), "Diagonal heads (attend to themselves)", "self"),
        _listing(roles, ("prev", "next"), "Neighbour heads (previous / next token)", "prev"),
        _listing(roles, ("cls", "end"), "Heads that collapse onto [CLS] / [SEP]", "cls"),
    ]
    broad, special = (
        _layer_means(roles, "broad"),
        [a + b for a, b in zip(_layer_means(roles, "cls"), _layer_means(roles, "end"), strict=True)],
    )
    neigh = [a + b for a, b in zip(_layer_means(roles, "prev"), _layer_means(roles, "next"), strict=True)]
    lines.append(
        f"- **Shallow vs deep**: mean broadness goes {broad[0]:.2f} (layer 0) -> {broad[-1]:.2f} (layer {L - 1}); "
        f"mean weight on [CLS]+[SEP] {special[0]:.2f} -> {special[-1]:.2f}; on the previous+next token "
        f"{neigh[0]:.2f} -> {neigh[-1]:.2f}. Per layer, broadness: {', '.join(f'{b:.2f}' for b in broad)}."
    )
    focused = sum(r in FOCUSED for layer in roles.dominant for r in layer)
    kinds = sorted({r for layer in roles.dominant for r in layer})
    spread = max(float(torch.nan_to_num(roles.scores[r]).std(dim=1).mean()) for r in FOCUSED)
    lines.append(
        f"- **Do heads specialise?** {focused} of {_total(roles)} heads have a focused role (a score >= {FOCUS}); "
        f"dominant roles seen: {', '.join(kinds)}; heads of one layer differ by up to {spread:.2f} "
        "(mean within-layer standard deviation of a role score)."
    )
    return lines


def _cell(x: torch.Tensor) -> str:
    return "-" if math.isnan(float(x)) else f"{float(x):.3f}"


def roles_markdown(roles: HeadRoles) -> str:
    rows = ["| layer | head | " + " | ".join(ROLES) + " | dominant |", "|" + "---|" * (len(ROLES) + 3)]
    for l, layer in enumerate(roles.dominant):
        for h, dom in enumerate(layer):
            cells = " | ".join(_cell(roles.scores[r][l, h]) for r in ROLES)
            rows.append(f"| {l} | {h} | {cells} | {dom} |")
    return "\n".join(rows)


def default_flow_token(maps: AttentionMaps, row: int = 0) -> str:
    """The non-special token that receives the most attention overall."""
    keys = maps.key_tokens[row]
    received = maps.stacked(row).mean(dim=(0, 1, 2))  # (S,)
    specials = set(maps.special.values())
    order = [i for i in received.argsort(descending=True).tolist() if keys[i] not in specials]
    return keys[order[0]] if order else keys[0]


def write_report(maps: AttentionMaps, roles: HeadRoles, out: Path, flow_token: str | None = None) -> Path:
    out = Path(out)
    token = flow_token or default_flow_token(maps)
    last = maps.n_layers - 1
    figs = [
        ("One head (layer 0, head 0)", hm.plot_head(maps, 0, 0, out / "head-L0-H0")[0]),
        ("All heads, first layer", hm.plot_layer(maps, 0, out / "layer-0")[0]),
        (f"All heads, last layer ({last})", hm.plot_layer(maps, last, out / f"layer-{last}")[0]),
        (f"Attention flowing to {token!r}", hm.plot_flow_to(maps, token, out / "flow-to")[0]),
        ("Head roles", hm.plot_roles(roles, out / "roles", maps.model_name)[0]),
    ]
    sentence = " ".join(maps.query_tokens[0])
    parts = [
        f"# Attention report: {maps.model_name}",
        "",
        f"Tokens: `{sentence}`",
        "",
        f"{maps.n_layers} layers x {maps.n_heads} heads, {maps.kind} attention.",
        "",
        "## Answers",
        "",
        *answers(roles),
        "",
        "## Figures",
        "",
    ]
    parts += [f"### {title}\n\n![{title}]({p.name})\n" for title, p in figs]
    parts += ["## Head roles", "", "Scores are defined in `tinyformer/viz/roles.py`.", "", roles_markdown(roles), ""]
    return write_text(out / "report.md", "\n".join(parts))
