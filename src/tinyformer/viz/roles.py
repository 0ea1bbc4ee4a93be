"""Head roles: what each attention head mostly does, as numbers (cf. Clark et al., 2019,
"What Does BERT Look At?"; Kovaleva et al., 2019).

For one head with weights w (T queries x S keys, rows sum to 1), each score is a
mean over query rows i:

- self   w[i, i]                     attends to itself (the diagonal)
- prev   w[i, i-1]   (rows i >= 1)   attends to the previous token
- next   w[i, i+1]   (rows i < T-1)  attends to the next token
- cls    w[i, c]     c = positions of the start token ([CLS])
- end    sum of w[i, e] over e = positions of the end token ([SEP]); a model
         without one gets NaN, as cls does without a start token
- broad  entropy(w[i]) / log(keys row i may see)  (rows seeing >= 2 keys):
         1 = uniform over everything it may see, 0 = all weight on one key

The dominant role of a head is the largest of self/prev/next/cls/end when that
mass is at least `FOCUS` (0.4); otherwise "broad" when broad >= `BROAD` (0.7),
else "mixed". Self/prev/next need T == S (self-attention).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tinyformer.viz.capture import AttentionMaps

FOCUSED = ("self", "prev", "next", "cls", "end")
ROLES = (*FOCUSED, "broad")
FOCUS = 0.4
BROAD = 0.7


@dataclass
class HeadRoles:
    scores: dict[str, torch.Tensor]  # role -> (L, H) scores; NaN where the role does not apply
    dominant: list[list[str]]  # [layer][head] -> one of ROLES or "mixed"


def _positions(tokens: list[str], label: str | None) -> list[int]:
    return [i for i, t in enumerate(tokens) if label is not None and t == label]


def _diagonal_mean(w: torch.Tensor, offset: int) -> torch.Tensor:
    """Mean of w[..., i, i + offset] over valid i; w (..., T, T) -> (...)."""
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1).mean(-1)


def _broadness(w: torch.Tensor) -> torch.Tensor:
    """Mean normalised entropy per head; w (L, H, T, S) -> (L, H)."""
    allowed = (w > 0).sum(-1)  # (L, H, T): keys each row may see
    ent = -(w * w.clamp_min(1e-12).log()).sum(-1)  # (L, H, T)
    rows = allowed >= 2
    norm = ent / allowed.clamp_min(2).float().log()
    return (norm * rows).sum(-1) / rows.sum(-1).clamp_min(1)


def head_roles(maps: AttentionMaps, row: int = 0) -> HeadRoles:
    """Role scores for every layer and head of batch row `row`."""
    w = maps.stacked(row).float()  # (L, H, T, S)
    L, H, T, S = w.shape
    nan = torch.full((L, H), math.nan)
    keys = maps.key_tokens[row]
    scores = {}
    square = T == S and maps.kind != "cross"
    scores["self"] = _diagonal_mean(w, 0) if square else nan
    scores["prev"] = _diagonal_mean(w, -1) if square and T > 1 else nan
    scores["next"] = _diagonal_mean(w, 1) if square and T > 1 else nan
    for role in ("cls", "end"):
        pos = _positions(keys, maps.special.get(role))
        scores[role] = w[..., pos].sum(-1).mean(-1) if pos else nan  # (L, H)
    scores["broad"] = _broadness(w)
    return HeadRoles(scores, [[_dominant(scores, l, h) for h in range(H)] for l in range(L)])


def _dominant(scores: dict[str, torch.Tensor], l: int, h: int) -> str:
    focused = {r: float(scores[r][l, h]) for r in FOCUSED if not math.isnan(float(scores[r][l, h]))}
    best = max(focused, key=focused.get) if focused else None
    if best is not None and focused[best] >= FOCUS:
        return best
    return "broad" if float(scores["broad"][l, h]) >= BROAD else "mixed"


def roles_table(roles: HeadRoles) -> str:
    """A plain-text table: one line per head with every score and the dominant role."""
    L, H = roles.scores["self"].shape
    header = f"{'layer':>5} {'head':>4} " + " ".join(f"{r:>6}" for r in ROLES) + "  dominant"
    lines = [header]
    for l in range(L):
        for h in range(H):
            cells = " ".join(_fmt(float(roles.scores[r][l, h])) for r in ROLES)
            lines.append(f"{l:>5} {h:>4} {cells}  {roles.dominant[l][h]}")
    return "\n".join(lines)


def _fmt(x: float) -> str:
    return f"{'-':>6}" if math.isnan(x) else f"{x:6.3f}"
