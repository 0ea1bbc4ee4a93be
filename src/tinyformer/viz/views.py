"""The attention views, registered by name: `tinyformer viz` draws the ones its flags ask for and
`tinyformer bench viz` times every one, from the same table.

A view takes captured `AttentionMaps` and a `ViewRequest` and returns the files it wrote. Adding a view
is a function here, one line in `VIEWS`, and its flag in `tinyformer.cli.viz`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tinyformer.viz import heatmaps as hm
from tinyformer.viz.capture import AttentionMaps
from tinyformer.viz.roles import HeadRoles, head_roles


@dataclass
class ViewRequest:
    out: Path  # folder for the PNG/SVG figures
    stem: str  # file-name prefix: the model or run name (and the attention part)
    layer: int = 0  # the layer `head` and `heads` draw
    head: int = 0  # the head `head` draws
    flow_to: str | None = None  # the token `flow` (and the report) follow
    html: Path | None = None  # where `html` writes the explorer
    report: Path | None = None  # the folder `report` writes report.md into
    roles: HeadRoles | None = None  # head-role scores, computed once by `check`

    def check(self, maps: AttentionMaps) -> ViewRequest:
        """Validate the request against `maps` before anything is drawn; fill in the head roles."""
        hm.check_index("layer", self.layer, maps.n_layers)
        hm.check_index("head", self.head, maps.n_heads)
        if self.flow_to is not None:
            hm.flow_to(maps, self.flow_to)  # an unknown token fails here
        self.roles = self.roles or head_roles(maps)
        return self


def head(maps: AttentionMaps, r: ViewRequest) -> list[Path]:
    return hm.plot_head(maps, r.layer, r.head, r.out / f"{r.stem}-L{r.layer}-H{r.head}")


def heads(maps: AttentionMaps, r: ViewRequest) -> list[Path]:
    return hm.plot_layer(maps, r.layer, r.out / f"{r.stem}-L{r.layer}-heads")


def flow(maps: AttentionMaps, r: ViewRequest) -> list[Path]:
    return hm.plot_flow_to(maps, r.flow_to, r.out / f"{r.stem}-flow-{r.flow_to}")


def roles(maps: AttentionMaps, r: ViewRequest) -> list[Path]:
    return hm.plot_roles(r.roles, r.out / f"{r.stem}-roles", maps.model_name)


def explorer(maps: AttentionMaps, r: ViewRequest) -> list[Path]:
    from tinyformer.viz.html import write_explorer

    return [write_explorer(maps, r.html, roles=r.roles, title=maps.model_name)]


def report(maps: AttentionMaps, r: ViewRequest) -> list[Path]:
    from tinyformer.viz.report import write_report

    return [write_report(maps, r.roles, Path(r.report), r.flow_to)]


VIEWS: dict[str, Callable[[AttentionMaps, ViewRequest], list[Path]]] = {
    "head": head,  # one head: query tokens down, key tokens across
    "heads": heads,  # every head of one layer in a grid
    "flow": flow,  # layers x heads: mean weight all queries give one token
    "roles": roles,  # layers x heads: each head's dominant role and its score
    "html": explorer,  # the self-contained interactive explorer
    "report": report,  # report.md with every figure and the role table
}
