"""The text-classifier bake-off: every encoder on the same split, tokenizer, budget and loop.

First a BERT-style encoder is pretrained with masked-LM on Tiny Shakespeare; its
tokenizer is then the one tokenizer of every classifier, so the cells differ in
the encoder alone. The Transformer classifier runs twice more: from scratch and
starting from the pretrained encoder, each with three seeds, so the value of
pretraining is a measured difference with its spread.

Task: speaker identification (the K = 5 most frequent speakers, one example per
speech, stratified split by speech). Scores are on the test split, with each
run's best-validation weights. Inference speed is examples per second over the
test split in batches of 64, the median of 3 passes.

`classifiers-minilm` adds two rows on the same split, three seeds each: the
Transformer classifier started from the pretrained MiniLM checkpoint (22.6M
parameters, its own uncased WordPiece), and the same architecture and tokenizer
from a random init, with identical settings (`MINILM_RECIPE`). Its report,
report_minilm.md, also sums up the bake-off's small-Transformer cells when the
folder holds them (it does not train them).

    tinyformer experiment classifiers [--quick] [--out DIR] [--data FILE]
    tinyformer experiment classifiers-minilm [--quick] [--out DIR] [--data FILE]
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from tinyformer.device import machine
from tinyformer.experiments.runner import Cell, CellResult, markdown_table, run_cell
from tinyformer.files import atomic_write, make_dir, write_text
from tinyformer.plots import pyplot
from tinyformer.tasks.classify import TEST_JSON, ClassifyTask

PROBE = "To be or not to [MASK]"
SEEDS = (1337, 1, 2)
RNN = ["model.n_layer=1"]

MLM_QUICK = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=32",
    "model.d_ff=64",
    "data.seq_len=32",
    "train.max_iters=20",
    "train.eval_interval=10",
    "train.warmup_iters=5",
    "train.batch_size=8",
]
CLS_QUICK = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=32",
    "model.d_ff=64",
    "model.hidden=32",
    "model.n_filters=16",
    "data.seq_len=32",
    "train.max_iters=20",
    "train.eval_interval=10",
    "train.warmup_iters=5",
    "train.batch_size=16",
]


def classifier_cells(mlm_dir: Path, seeds: tuple[int, ...]) -> list[Cell]:
    """The grid; the Transformer pair (scratch / pretrained) once per seed, the other encoders once."""
    pair = []
    for s in seeds:
        tag = "" if s == seeds[0] else f"-seed{s}"
        pair += [
            Cell(f"transformer-scratch{tag}", [f"train.seed={s}"], "Transformer, mean pooling, random init"),
            Cell(
                f"transformer-pretrained{tag}",
                [f"train.seed={s}", f"model.init_from={json.dumps(str(mlm_dir))}"],
                "Transformer, mean pooling, encoder from the masked-LM run",
            ),
        ]
    return [
        *pair,
        Cell("transformer-cls", ["model.pooling=cls"], "Transformer, [CLS] pooling, random init"),
        Cell("textcnn", ["model.encoder=cnn"], "TextCNN, widths 3/4/5, 100 filters each"),
        Cell("rnn", ["model.encoder=rnn", *RNN], "vanilla (tanh) RNN, 1 layer"),
        Cell("lstm", ["model.encoder=lstm", *RNN], "LSTM, 1 layer"),
        Cell("gru", ["model.encoder=gru", *RNN], "GRU, 1 layer"),
        Cell("bilstm", ["model.encoder=lstm", "model.bidirectional=true", *RNN], "bidirectional LSTM, 1 layer"),
        Cell("bigru", ["model.encoder=gru", "model.bidirectional=true", *RNN], "bidirectional GRU, 1 layer"),
    ]


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    folder = Path(out or f"runs/experiments/classifiers{'-quick' if quick else ''}")
    make_dir(folder)
    where = [f"data.path={json.dumps(str(Path(data).resolve()))}"] if data else []
    mlm = run_cell("mlm", [], [*where, *(MLM_QUICK if quick else [])], Cell("mlm", [], "masked-LM pretraining"), folder)
    shared = [*where, f"data.tokenizer={json.dumps(str(mlm.run.path.resolve()))}", *(CLS_QUICK if quick else [])]
    grid = classifier_cells(mlm.run.path.resolve(), SEEDS[:1] if quick else SEEDS)
    results = [run_cell("classify", [], shared, cell, folder) for cell in grid]
    path = write_report(mlm, results, folder, quick)
    print(f"report: {path}")
    return path


# ---- measurements ---------------------------------------------------------------------------------------------------
def test_scores(r: CellResult) -> dict:
    """test.json of the run (written when it finished, with its best-validation weights)."""
    return json.loads((r.run.path / TEST_JSON).read_text(encoding="utf-8"))


def inference_speed(task: ClassifyTask, r: CellResult, repeats: int = 3) -> float:
    """Test-split examples per second, batches of 64, median of `repeats` passes (after one warm-up pass)."""
    model = r.run.model.eval()
    task.logits(model, "test")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        task.logits(model, "test")
        times.append(time.perf_counter() - t0)
    return len(task.splits["test"]) / statistics.median(times)


def mlm_figures(mlm: CellResult) -> dict:
    from tinyformer.runs import load_run
    from tinyformer.tasks.mlm import fill_mask

    best = min((row for row in mlm.metrics if row.get("split") == "val"), key=lambda row: row["loss"])
    run = load_run(mlm.run.path)  # best weights
    return best | {"fill": fill_mask(run.model, run.tokenizer, PROBE, 5)[0]}


# ---- report ---------------------------------------------------------------------------------------------------------
def rows_of(results: list[CellResult], task: ClassifyTask) -> list[dict]:
    rows = []
    for r in results:
        t = test_scores(r)
        val = max((row["acc"] for row in r.metrics if row.get("split") == "val"), default=float("nan"))
        rows.append(
            {
                "cell": r.cell.name,
                "about": r.cell.about,
                "params": sum(p.numel() for p in r.run.model.parameters()),
                "acc": t["acc"],
                "macro_f1": t["macro_f1"],
                "val_acc": val,
                "train_s": r.run.state["train_seconds"],
                "ex_s": inference_speed(task, r),
            }
        )
    return rows


def pretraining_effect(rows: list[dict], key: str = "acc") -> tuple[list[float], list[float]]:
    """`key` (test accuracy or macro-F1) of the scratch and of the pretrained Transformer runs, one per seed."""
    pick = lambda prefix: [r[key] for r in rows if r["cell"].startswith(prefix)]  # noqa: E731
    return pick("transformer-scratch"), pick("transformer-pretrained")


def mean_sd(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def plot_accuracy_vs_params(rows: list[dict], majority: float, png: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 5), dpi=110)
    groups = {  # the Transformer cells share one size, so they are told apart by the legend, not by labels
        "transformer-pretrained": ("o", "tab:green", "Transformer, masked-LM init (one point per seed)"),
        "transformer-scratch": ("o", "tab:blue", "Transformer, random init (one point per seed)"),
        "transformer-cls": ("D", "tab:purple", "Transformer, [CLS] pooling, random init"),
    }
    labelled = set()
    for r in rows:
        group = next((g for g in groups if r["cell"].startswith(g)), None)
        marker, colour, label = groups.get(group, ("s", "tab:orange", "TextCNN / RNN family"))
        ax.plot(r["params"], r["acc"], marker, color=colour, markersize=7, label=None if label in labelled else label)
        labelled.add(label)
        if group is None:
            ax.annotate(r["cell"], (r["params"], r["acc"]), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.axhline(majority, color="grey", linestyle=":", label=f"majority class {majority:.3f}")
    ax.set_xscale("log")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title("Speaker identification: accuracy vs parameters (same split, tokenizer, budget, loop)")
    ax.grid(alpha=0.3)
    ax.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    atomic_write(png, lambda t: fig.savefig(t, format="png"))
    plt.close(fig)
    return png


def write_report(mlm: CellResult, results: list[CellResult], folder: Path, quick: bool) -> Path:
    task = ClassifyTask.prepare(results[0].run.config, results[0].run.tokenizer)  # the split every cell shares
    rows = rows_of(results, task)
    base = task.majority("test")
    plot_accuracy_vs_params(rows, base["acc"], folder / "accuracy_vs_params.png")
    parts = [
        "# Text-classifier bake-off: speaker identification"
        + (" (--quick: numbers are not meaningful)" if quick else ""),
        "",
        setup_text(task),
        "",
        mlm_section(mlm),
        bakeoff_section(rows, base),
        pretraining_section(rows, len(task.splits["test"])),
    ]
    path = folder / "report.md"
    write_text(path, "\n".join(parts))
    return path


def setup_text(task: ClassifyTask) -> str:
    c, sizes = task.config, {name: len(s) for name, s in task.splits.items()}
    return (
        f"Machine: {machine()['cpu']}, {torch.get_num_threads()} threads, torch {torch.__version__}. "
        "Every number below is read from the run folders next to this file.\n\n"
        f"Task: {len(c.model.labels)} speakers ({', '.join(c.model.labels)}), one example per speech, "
        f"stratified split (seed {c.data.split_seed}): {sizes['train']} train / {sizes['val']} val / "
        f"{sizes['test']} test. Tokenizer: the masked-LM run's WordPiece, {c.model.vocab_size} tokens; texts cut "
        f"to {c.data.seq_len} tokens. Budget for every cell: {c.train.max_iters} steps of batch "
        f"{c.train.batch_size}, lr {c.train.lr:g} ({c.train.schedule}, warmup {c.train.warmup_iters}), "
        f"dropout {c.model.dropout}, clipping {c.train.grad_clip}; scored with the best-validation weights."
    )


def mlm_section(mlm: CellResult) -> str:
    c, m = mlm.run.config, mlm_figures(mlm)
    fills = markdown_table(["filler", "probability"], [[tok, f"{p:.4f}"] for tok, p in m["fill"]])
    return (
        "## Masked-LM pretraining\n\n"
        f"BERT-style encoder, {c.model.n_layer} layers x {c.model.n_head} heads x {c.model.n_embd} wide, "
        f"{sum(p.numel() for p in mlm.run.model.parameters()):,} parameters, {c.train.max_iters} steps of "
        f"{c.train.batch_size} windows of {c.data.seq_len} tokens, {mlm.run.state['train_seconds']:.0f} s. "
        f"On the held-out last {c.data.val_fraction:.0%} of the text ({m['masked']:,} masked tokens, fixed masks), "
        f"best at step {m['step']}: **masked-token accuracy {m['masked_acc']:.4f}, perplexity "
        f"{m['perplexity']:.1f}** (loss {m['loss']:.4f}).\n\n"
        f'`tinyformer fill {mlm.run.path} "{PROBE}"`:\n\n{fills}\n'
    )


def bakeoff_section(rows: list[dict], base: dict) -> str:
    header = ["cell", "encoder", "parameters", "test accuracy", "test macro-F1", "best val accuracy", "train s"]
    table = [
        [r["cell"], r["about"], f"{r['params']:,}", r["acc"], r["macro_f1"], r["val_acc"], f"{r['train_s']:.0f}"]
        + [f"{r['ex_s']:,.0f}"]
        for r in rows
    ]
    table.append(["majority class", "always the most frequent training speaker", "0", base["acc"], base["macro_f1"]])
    table[-1] += [""] * 3
    return (
        "## Bake-off (test split)\n\n"
        + markdown_table([*header, "inference ex/s"], table)
        + "\n\n![accuracy vs parameters](accuracy_vs_params.png)\n"
    )


def pretraining_section(rows: list[dict], n_test: int) -> str:
    scratch, pretrained = pretraining_effect(rows)
    f1_scratch, f1_pretrained = pretraining_effect(rows, "macro_f1")
    seeds = ", ".join(map(str, SEEDS[: len(scratch)]))
    return (
        "## Does pretraining help?\n\n"
        f"The same Transformer classifier (mean pooling) over seeds {seeds}: test accuracy from scratch "
        f"{mean_sd(scratch)}, from the masked-LM encoder {mean_sd(pretrained)}, difference "
        f"**{statistics.mean(pretrained) - statistics.mean(scratch):+.4f}**; macro-F1 {mean_sd(f1_scratch)} vs "
        f"{mean_sd(f1_pretrained)}, difference **{statistics.mean(f1_pretrained) - statistics.mean(f1_scratch):+.4f}**."
        f" With {n_test} test examples one example is {1 / n_test:.4f} of accuracy, and the standard error of an "
        f"accuracy near 0.5 is about {(0.25 / n_test) ** 0.5:.3f}.\n\n"
        "Caveat: the masked-LM run read the first 90% of the play as unlabelled text, which includes the text (not "
        "the speaker) of most test speeches. Its tokenizer, shared by every cell, was learned from the same text.\n"
    )


# ---- the pretrained MiniLM against the same architecture from scratch ----------------------------------------------
# 22.6M parameters on a 2-core CPU: a 20-step measurement there (batch 32, texts up to 128 tokens) took ~16 s a
# step, so the budget is 60 steps of 16 texts cut to 64 tokens (~1.6 epochs; 81% of the speeches fit), which keeps
# the six runs (two rows x three seeds) near 45 minutes. Both rows share every setting but the init.
MINILM_RECIPE = ["data.seq_len=64", "train.batch_size=16", "train.max_iters=60", "train.eval_interval=20"]
MINILM_RECIPE += ["train.warmup_iters=6", "train.lr=2e-4", "train.min_lr=2e-5"]
MINILM_QUICK = ["data.seq_len=16", "train.batch_size=4", "train.max_iters=4", "train.eval_interval=2"]
MINILM_QUICK += ["train.warmup_iters=1"]
GROUPS = {  # cell-name prefix -> what the summary calls it; the first two come from `experiment classifiers`
    "transformer-scratch": "small Transformer, random init",
    "transformer-pretrained": "small Transformer, our masked-LM init",
    "minilm-scratch": "MiniLM architecture, random init",
    "minilm-pretrained": "MiniLM architecture, pretrained MiniLM init",
}
BAKEOFF = ("transformer-scratch", "transformer-pretrained")  # the bake-off's cells the MiniLM report sums up


def minilm_cells(seeds: tuple[int, ...]) -> list[Cell]:
    """Per seed: the pretrained MiniLM, and the same architecture and tokenizer from a random init."""
    from tinyformer.hub import OFFLINE_BERT
    from tinyformer.models.bert import pretrained_bert

    folder, bert = pretrained_bert(OFFLINE_BERT)
    keys = ("n_layer", "n_head", "n_embd", "d_ff", "block_size", "positions", "layer_norm_eps", "type_vocab_size")
    same = [f"model.{k}={json.dumps(getattr(bert, k))}" for k in (*keys, "dropout")]
    same.append(f"data.tokenizer={json.dumps(str(folder / 'tokenizer.json'))}")
    cells = []
    for s in seeds:
        tag = "" if s == seeds[0] else f"-seed{s}"
        cells += [
            Cell(
                f"minilm-pretrained{tag}",
                [f"train.seed={s}", f"model.init_from={OFFLINE_BERT}"],
                GROUPS["minilm-pretrained"],
            ),
            Cell(f"minilm-scratch{tag}", [f"train.seed={s}", *same], GROUPS["minilm-scratch"]),
        ]
    return cells


def run_minilm(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    """`tinyformer experiment classifiers-minilm`: the two MiniLM rows; in the bake-off's folder by default, so
    that its report also summarises the bake-off's small-Transformer cells when they are there (not trained here)."""
    folder = Path(out or f"runs/experiments/classifiers{'-quick' if quick else ''}")
    make_dir(folder)
    where = [f"data.path={json.dumps(str(Path(data).resolve()))}"] if data else []
    recipe = [*where, *(MINILM_QUICK if quick else MINILM_RECIPE)]
    results = [run_cell("classify", [], recipe, cell, folder) for cell in minilm_cells(SEEDS[:1] if quick else SEEDS)]
    others = [finished_cell(folder / p.name) for p in sorted(folder.iterdir()) if p.name.startswith(BAKEOFF)]
    path = write_minilm_report(results, [r for r in others if r is not None], folder, quick)
    print(f"report: {path}")
    return path


def budget_of(r: CellResult) -> str:
    """A run's training budget as the table shows it: steps x batch, tokens per text."""
    c = r.run.config
    return f"{c.train.max_iters} x {c.train.batch_size}, {c.data.seq_len}"


def finished_cell(run_dir: Path) -> CellResult | None:
    """A finished run of the bake-off in the folder, read as it is; None when it is not (yet) there."""
    from tinyformer.experiments.runner import finished
    from tinyformer.runs import load_run
    from tinyformer.train import checkpoint as ckpt

    if not finished(run_dir) or not (run_dir / TEST_JSON).is_file():
        return None
    run = load_run(run_dir, weights="latest")
    about = next((text for prefix, text in GROUPS.items() if run_dir.name.startswith(prefix)), "")
    return CellResult(Cell(run_dir.name, about=about), run, ckpt.read_metrics(run_dir / ckpt.METRICS), True)


def write_minilm_report(results: list[CellResult], others: list[CellResult], folder: Path, quick: bool) -> Path:
    task = ClassifyTask.prepare(results[0].run.config, results[0].run.tokenizer)  # MiniLM's tokenizer, both rows
    rows = rows_of(results, task)
    if others:  # the bake-off's cells encode the same split with their own tokenizer
        rows += rows_of(others, ClassifyTask.prepare(others[0].run.config, others[0].run.tokenizer))
    base, c = task.majority("test"), task.config
    steps = [r.run.state["train_seconds"] / r.run.state["step"] for r in results]
    summary = []
    for prefix, about in GROUPS.items():
        picked = [r for r in rows if r["cell"].startswith(prefix)]
        if picked:
            acc, f1 = mean_sd([r["acc"] for r in picked]), mean_sd([r["macro_f1"] for r in picked])
            summary.append([f"{prefix}*", about, f"{picked[0]['params']:,}", len(picked), acc, f1])
    header = ["cell", "encoder", "parameters", "steps x batch, tokens", "test accuracy", "test macro-F1"]
    header += ["best val accuracy", "train s"]
    budget = {r.cell.name: budget_of(r) for r in [*results, *others]}
    table = [[r["cell"], r["about"], f"{r['params']:,}", budget[r["cell"]], r["acc"], r["macro_f1"]] for r in rows]
    table = [row + [r["val_acc"], f"{r['train_s']:.0f}", f"{r['ex_s']:,.0f}"] for row, r in zip(table, rows)]
    text = [
        "# Speaker identification: pretrained MiniLM vs the same architecture from scratch"
        + (" (--quick: numbers are not meaningful)" if quick else ""),
        "",
        f"Machine: {machine()['cpu']}, {torch.get_num_threads()} threads, torch {torch.__version__}. Every number "
        "below is read from the run folders next to this file.",
        "",
        f"Same split as the bake-off: {len(c.model.labels)} speakers, {len(task.splits['test'])} test speeches "
        f"(majority class: accuracy {base['acc']:.4f}, macro-F1 {base['macro_f1']:.4f}). Both MiniLM rows use "
        f"MiniLM's own uncased WordPiece ({c.model.vocab_size:,} tokens) and identical settings: "
        f"{c.train.max_iters} steps of batch {c.train.batch_size}, texts cut to {c.data.seq_len} tokens, lr "
        f"{c.train.lr:g} ({c.train.schedule}, warmup {c.train.warmup_iters}, floor {c.train.min_lr:g}), dropout "
        f"{c.model.dropout}, mean pooling; a step took {statistics.mean(steps):.1f} s on average. The budget was "
        "chosen so that the six runs take about 45 minutes on a 2-core CPU; the small-Transformer rows, when "
        "present, are read from their run folders as they are (their own tokenizer; their budget is in the table).",
        "",
        "## Summary (mean ± sd over seeds)\n",
        markdown_table(["rows", "what", "parameters", "seeds", "test accuracy", "test macro-F1"], summary),
        "",
        "## Every run\n",
        markdown_table([*header, "inference ex/s"], table),
        "",
    ]
    path = folder / "report_minilm.md"
    write_text(path, "\n".join(text))
    return path
