"""The `tinyformer` command: a table of subcommands, each a thin function over the library.

A `UserError` (bad flag, missing file, unknown character, ...) ends in one line
on stderr and exit code 2; an interrupted training run exits with 130.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tinyformer import cli_nlp
from tinyformer.cli_viz import add_viz
from tinyformer.errors import UserError


# ---- train ------------------------------------------------------------------------
def add_train(p: argparse.ArgumentParser) -> None:
    from tinyformer.tasks import TASKS

    p.add_argument("task", choices=sorted(TASKS), help="what to train")
    p.add_argument("--config", help="TOML preset, e.g. configs/gpt_cpu_quick.toml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override, e.g. model.n_layer=1")
    p.add_argument("--out", help="new run folder (default: runs/<task>-<date>-<time>)")
    p.add_argument("--resume", metavar="RUN", help="continue the run in this folder exactly where it stopped")
    p.add_argument(
        "--data", help="text file to train on, or a .csv/.tsv/.jsonl table for classify (default: $TINYFORMER_DATA)"
    )
    p.add_argument("--text-col", help="classify: the table's text column (data.text_col, default text)")
    p.add_argument("--label-col", help="classify: the table's label column (data.label_col, default label)")
    p.add_argument("--device", help="auto, cpu, cuda or mps (train.device)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (train.compile)")
    p.add_argument("--tensorboard", action="store_true", help="write TensorBoard events to RUN/tb")


def _train_overrides(a: argparse.Namespace) -> list[str]:
    """`--set` values plus the shortcut flags, all as `section.key=value` overrides."""
    overrides = list(a.set)
    overrides += [f"data.path={json.dumps(str(Path(a.data).resolve()))}"] if a.data else []  # runnable from anywhere
    overrides += [f"data.text_col={json.dumps(a.text_col)}"] if a.text_col else []
    overrides += [f"data.label_col={json.dumps(a.label_col)}"] if a.label_col else []
    overrides += [f"train.device={json.dumps(a.device)}"] if a.device else []
    overrides += ["train.compile=true"] if a.compile else []
    overrides += ["train.tensorboard=true"] if a.tensorboard else []
    return overrides


def cmd_train(a: argparse.Namespace) -> int:
    from tinyformer import config as cfg
    from tinyformer.device import pick_device
    from tinyformer.runs import prepare_run, train_run
    from tinyformer.train import distributed

    if a.resume and (a.config or a.out):
        raise UserError("--resume continues a run with its saved config; drop --config/--out (--set still works)")
    layers = [cfg.load_toml(a.config)] if a.config else []
    config, task_cls, run_dir, tokenizer = prepare_run(a.task, layers, _train_overrides(a), a.out, a.resume)
    world = distributed.init(pick_device(config.train.device).type, config.train.dist_timeout)  # torchrun only
    run_dir = distributed.broadcast(run_dir, world)  # one folder name for every rank: rank 0's
    try:
        result, trainer = train_run(config, task_cls, run_dir, tokenizer, resume=bool(a.resume), world=world)
    finally:
        distributed.shutdown()
    if not world.main:
        return 130 if result.status == "interrupted" else 0
    if result.status == "interrupted":
        print(f"interrupted at step {result.step}; state saved. Resume: tinyformer train {a.task} --resume {run_dir}")
        return 130
    tps = trainer.tokens_seen / max(result.train_seconds, 1e-9)
    print(
        f"done: step {result.step}, best val {getattr(task_cls, 'select', 'loss')} {result.best_val:.4f}, "
        f"{result.train_seconds:.0f} s of training ({tps:,.0f} tokens/s); see {run_dir}/loss.png"
    )
    return 0


# ---- sample -----------------------------------------------------------------------
def add_sample(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder")
    p.add_argument("--prompt", help="text to continue (default: the run's sample.prompt)")
    p.add_argument("--tokens", type=int, help="how many new tokens (default 500)")
    p.add_argument("--temperature", type=float, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, help="keep the k most likely tokens; 0 = off (default 40)")
    p.add_argument("--top-p", type=float, help="nucleus sampling mass; 1 = off (default 1.0)")
    p.add_argument("--seed", type=int, help="sampling seed (default 1)")
    p.add_argument("--checkpoint", choices=("best", "latest"), default="best", help="which weights")
    p.add_argument(
        "--no-cache", action="store_true", help="re-run the whole context every step (the naive path, no KV cache)"
    )
    p.add_argument("--context", type=int, help="tokens the model sees per step (default: its block size)")
    p.add_argument("--ntk", action="store_true", help="RoPE runs: NTK-aware scaling for --context, no retraining")


def cmd_sample(a: argparse.Namespace) -> int:
    import dataclasses

    from tinyformer.config import SampleConfig
    from tinyformer.generate.sampling import generate_text
    from tinyformer.runs import load_run

    run = load_run(a.run, weights=a.checkpoint)
    if not getattr(run.task_cls, "generative", False):
        raise UserError(f"{a.run!r} is a {run.config.task!r} run; sample continues text from a `train gpt` run")
    given = {"prompt": a.prompt, "tokens": a.tokens, "temperature": a.temperature}
    given |= {"top_k": a.top_k, "top_p": a.top_p, "seed": a.seed}
    base = dataclasses.asdict(run.config.sample)
    s = SampleConfig(**(base | {k: v for k, v in given.items() if v is not None}))
    window = context_window(run, a.context, a.ntk)
    print(generate_text(run.model, run.tokenizer, s, use_cache=not a.no_cache, window=window))
    return 0


def context_window(run, context: int | None, ntk: bool) -> int:
    """The generation window; with `ntk`, scale the run's RoPE base for it (alpha = context / block_size)."""
    m = run.config.model
    window = m.block_size if context is None else context
    if window <= 0:
        raise UserError(f"--context {window} must be > 0")
    if m.positions == "learned" and window > m.block_size:
        raise UserError(f"--context {window}: learned positions stop at block_size={m.block_size}")
    if ntk:
        if m.positions != "rope":
            raise UserError(f"--ntk scales rotary positions; this run has model.positions={m.positions!r}")
        if window <= m.block_size:
            raise UserError(f"--ntk stretches RoPE past block_size={m.block_size}; give a longer --context")
        run.model.set_ntk(window)
    return window


# ---- info -------------------------------------------------------------------------
def add_info(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder")


def cmd_info(a: argparse.Namespace) -> int:
    from tinyformer import config as cfg
    from tinyformer.runs import best_val, load_run

    run = load_run(a.run, weights="latest")
    st = run.state
    counted = sum(p.numel() for p in run.model.parameters())
    print(f"run {run.path}: task {run.config.task}, step {st['step']}/{run.config.train.max_iters}")
    tps = st["tokens_seen"] / max(st["train_seconds"], 1e-9)
    seen = f"{st['tokens_seen']:,} tokens ({tps:,.0f}/s)"
    key = getattr(run.task_cls, "select", "loss")
    print(f"best val {key} {best_val(run):.4f}; {st['train_seconds']:.0f} s of training, {seen}")
    print("\n# resolved config")
    print(to_toml(cfg.to_dict(run.config)))
    breakdown = getattr(run.task_cls, "param_breakdown", None)
    if breakdown is not None:
        print(format_breakdown(breakdown(run.config.model), counted))
    else:
        print(f"parameters: {counted:,}")
    return 0


def to_toml(d: dict) -> str:
    """Flat sections of scalars as TOML (a preset can be copied from it)."""
    top = [f"{k} = {json.dumps(v)}" for k, v in d.items() if not isinstance(v, dict)]
    parts = ["\n".join(top)]
    for k, v in d.items():
        if isinstance(v, dict):
            body = "\n".join(f"{kk} = {json.dumps(vv, ensure_ascii=False)}" for kk, vv in v.items())
            parts.append(f"[{k}]\n{body}")
    return "\n\n".join(parts)


def format_breakdown(rows: list[tuple[str, str, int, int]], counted: int) -> str:
    total = sum(per * n for _, _, per, n in rows)
    lines = [f"# parameters: {total:,} by formula, {counted:,} counted" + ("" if total == counted else "  (MISMATCH)")]
    for name, formula, per, n in rows:
        times = f"{n} × {per:,}" if n > 1 else f"{per:,}"
        lines.append(f"  {name:<24} {formula:<20} {times:>16} = {per * n:>10,}")
    return "\n".join(lines)


# ---- bench ------------------------------------------------------------------------
def add_bench(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "what",
        choices=("train", "attention", "viz", "bert-parity", "all"),
        help="train: training tokens/s, peak memory and MFU vs a plain reference; "
        "attention: manual vs SDPA time, memory and agreement for L = 128 .. 2048; "
        "viz: time to render every attention view of a 12x12-head BERT; "
        "bert-parity: our BERT encoder vs Hugging Face's on the offline checkpoint; all: train + attention",
    )
    p.add_argument("--iters", type=int, default=40, help="timed steps per measurement")
    p.add_argument("--repeats", type=int, default=3, help="alternating measurements of each")
    p.add_argument("--data", help="text file (default: $TINYFORMER_DATA, then cache/download)")
    p.add_argument("--json", metavar="FILE", help="also write every figure, with the machine description, to FILE")


def cmd_bench(a: argparse.Namespace) -> int:
    if a.what == "bert-parity":
        from tinyformer.bench.parity import run_parity

        return run_parity()
    if a.what == "viz":
        from tinyformer.bench.viz import run_viz_benchmark

        return run_viz_benchmark(repeats=a.repeats)
    from tinyformer.bench.attention import run_attention_benchmark
    from tinyformer.bench.train import machine, run_benchmark

    figures: dict = {"machine": machine()}
    if a.what in ("train", "all"):
        figures["train"] = run_benchmark(iters=a.iters, repeats=a.repeats, data=a.data)
    if a.what in ("attention", "all"):
        figures["attention"] = run_attention_benchmark(repeats=max(a.repeats, 3))
    if a.json:
        from pathlib import Path

        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {a.json}")
    return 0


# ---- eval / translate (encoder-decoder runs) ----------------------------------------------
def add_eval(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder of `tinyformer train reverse`, `train mlm` or `train classify`")
    p.add_argument("--n", type=int, default=1000, help="reverse: held-out sequences to score (default 1000)")
    p.add_argument("--beam", type=int, default=1, help="reverse: beam width (1 = greedy)")


def _seq2seq_run(path: str):
    from tinyformer.runs import load_run

    run = load_run(path)
    if run.config.task != "reverse":
        raise UserError(f"{path!r} is a {run.config.task!r} run; this command needs a `train reverse` run")
    return run


def cmd_eval(a: argparse.Namespace) -> int:
    from tinyformer import cli_nlp
    from tinyformer.data.reversal import make_split
    from tinyformer.runs import load_run
    from tinyformer.tasks.reverse import evaluate_split

    if a.n <= 0 or a.beam <= 0:
        raise UserError(f"--n {a.n} and --beam {a.beam} must be > 0")
    run = load_run(a.run)
    if run.config.task in ("mlm", "classify"):
        getattr(cli_nlp, f"eval_{run.config.task}")(run)
        return 0
    run = _seq2seq_run(a.run)
    d = run.config.data
    src, tgt = make_split(a.n, d.min_len, d.val_max_len or d.max_len, d.seed + 1, d.variant, d.longest)
    r = evaluate_split(run.model, src, tgt, beam=a.beam)
    how = "greedy" if a.beam == 1 else f"beam {a.beam}"
    print(
        f"{a.n} held-out sequences, {how}: exact match {r['exact_match']:.4f}, "
        f"token accuracy {r['token_acc']:.4f}, loss {r['loss']:.4f}"
    )
    print("length  exact match")
    for n, acc in sorted(r["per_length"].items()):
        print(f"{n:>6}  {acc:.4f}")
    return 0


def add_translate(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder of `tinyformer train reverse`")
    p.add_argument("digits", help='input digits, e.g. "7 3 0 9 5"')
    p.add_argument("--beam", type=int, default=1, help="beam width (1 = greedy)")


def cmd_translate(a: argparse.Namespace) -> int:
    from tinyformer.generate.decoding import beam_search, greedy_decode

    if a.beam <= 0:
        raise UserError(f"--beam {a.beam} must be > 0")
    run = _seq2seq_run(a.run)
    src = run.tokenizer.encode_source(a.digits, run.config.data.longest)
    ids = dict(bos_id=1, eos_id=2, pad_id=0)
    out = greedy_decode(run.model, src, **ids) if a.beam == 1 else beam_search(run.model, src, beam=a.beam, **ids)
    print(run.tokenizer.decode(out[0]))
    return 0


# ---- export -------------------------------------------------------------------------
def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=("hf",), help="hf: a Hugging Face GPT-2 folder (config.json + model.safetensors)")
    p.add_argument("run", help="run folder of `tinyformer train gpt` (learned positions)")
    p.add_argument("out", help="folder to write")
    p.add_argument("--checkpoint", choices=("best", "latest"), default="best", help="which weights")


def cmd_export(a: argparse.Namespace) -> int:
    from tinyformer.export import export_hf
    from tinyformer.runs import load_run
    from tinyformer.train import checkpoint as ckpt

    run = load_run(a.run, weights=a.checkpoint)
    if run.config.task != "gpt":
        raise UserError(f"{a.run!r} is a {run.config.task!r} run; export hf writes GPT-2, from a `train gpt` run")
    out = export_hf(run.model, a.out, run.path / ckpt.TOKENIZER)
    print(f"wrote {out}/config.json and {out}/model.safetensors")
    print(f"load it with transformers.GPT2LMHeadModel.from_pretrained({str(out)!r})")
    return 0


# ---- experiments ----------------------------------------------------------------------
EXPERIMENTS = {  # name -> (module, function(out, quick=, data=) -> report path)
    "ablation": ("tinyformer.experiments.gpt_studies", "ablation"),
    "scale": ("tinyformer.experiments.gpt_studies", "scale"),
    "positions": ("tinyformer.experiments.gpt_studies", "positions"),
    "kv-cache": ("tinyformer.experiments.kv_cache", "run"),
    "reverse-ablation": ("tinyformer.experiments.reverse_ablation", "run"),
    "classifiers": ("tinyformer.experiments.classifiers", "run"),
}


def add_experiment(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=list(EXPERIMENTS), help="which study")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for CI): checks the pipeline, not the answer")
    p.add_argument("--out", help="experiment folder (default: runs/experiments/NAME); finished cells are reused")
    p.add_argument("--data", help="text file for the MiniGPT studies (default: $TINYFORMER_DATA, then cache/download)")


def cmd_experiment(a: argparse.Namespace) -> int:
    import importlib

    module, function = EXPERIMENTS[a.name]
    getattr(importlib.import_module(module), function)(a.out, quick=a.quick, data=a.data)
    return 0


COMMANDS = {
    "train": (add_train, cmd_train, "train a model (e.g. MiniGPT on Tiny Shakespeare)"),
    "sample": (add_sample, cmd_sample, "generate text from a run folder"),
    "info": (add_info, cmd_info, "show a run's config, parameter breakdown and progress"),
    "eval": (add_eval, cmd_eval, "score a run on held-out data (encoder-decoder, masked LM, classifier)"),
    "translate": (add_translate, cmd_translate, "run an encoder-decoder on one input (greedy or beam)"),
    "fill": (cli_nlp.add_fill, cli_nlp.cmd_fill, "a masked-LM run's top fillers for each [MASK] in a text"),
    "classify": (cli_nlp.add_classify, cli_nlp.cmd_classify, "label a text with a classifier run"),
    "viz": (add_viz, None, "draw attention: Hugging Face BERT, a tinyformer run, cross-attention"),
    "export": (add_export, cmd_export, "write a run in another format (Hugging Face GPT-2)"),
    "experiment": (add_experiment, cmd_experiment, "train a grid of runs and write a report"),
    "bench": (add_bench, cmd_bench, "measure speed and memory"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tinyformer", description="A from-scratch Transformer lab.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add, run, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(handler=run)
        add(p)  # may set a handler per sub-subcommand
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UserError as e:
        print(f"tinyformer: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tinyformer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
