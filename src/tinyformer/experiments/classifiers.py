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

    tinyformer experiment classifiers [--quick] [--out DIR] [--data FILE]
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from tinyformer.experiments.runner import Cell, CellResult, markdown_table, run_cell
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
    "data.max_len=48",
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
    folder.mkdir(parents=True, exist_ok=True)
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
    task.predict(model, "test")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        task.predict(model, "test")
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


def pretraining_effect(rows: list[dict]) -> tuple[list[float], list[float]]:
    """Test accuracies of the scratch and pretrained Transformer runs, one per seed."""
    pick = lambda prefix: [r["acc"] for r in rows if r["cell"].startswith(prefix)]  # noqa: E731
    return pick("transformer-scratch"), pick("transformer-pretrained")


def mean_sd(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def plot_accuracy_vs_params(rows: list[dict], majority: float, png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5), dpi=110)
    for r in rows:
        kind = "o" if r["cell"].startswith("transformer") else "s"
        colour = "tab:green" if "pretrained" in r["cell"] else ("tab:blue" if kind == "o" else "tab:orange")
        ax.plot(r["params"], r["acc"], kind, color=colour, markersize=7)
        if "-seed" not in r["cell"]:
            ax.annotate(r["cell"], (r["params"], r["acc"]), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.axhline(majority, color="grey", linestyle=":", label=f"majority class {majority:.3f}")
    ax.set_xscale("log")
    ax.set_xlabel("parameters (log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title("Speaker identification: accuracy vs parameters (same split, tokenizer, budget, loop)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
    return png


def write_report(mlm: CellResult, results: list[CellResult], folder: Path, quick: bool) -> Path:
    from tinyformer.bench.train import machine

    task = ClassifyTask(results[0].run.config, results[0].run.tokenizer)  # the split every cell shares
    base = task.majority("test")
    rows = rows_of(results, task)
    plot_accuracy_vs_params(rows, base["acc"], folder / "accuracy_vs_params.png")
    m = mlm_figures(mlm)
    scratch, pretrained = pretraining_effect(rows)
    table = [
        [r["cell"], r["about"], f"{r['params']:,}", r["acc"], r["macro_f1"], r["val_acc"], f"{r['train_s']:.0f}"]
        + [f"{r['ex_s']:,.0f}"]
        for r in rows
    ]
    table.append(
        ["majority class", "always the most frequent training speaker", "0", base["acc"], base["macro_f1"]] + [""] * 3
    )
    sizes = {name: len(s) for name, s in task.splits.items()}
    mc, tc = mlm.run.config, results[0].run.config
    parts = [
        "# Text-classifier bake-off: speaker identification"
        + (" (--quick: numbers are not meaningful)" if quick else ""),
        "",
        f"Machine: {machine()['cpu']}, {torch.get_num_threads()} threads, torch {torch.__version__}. "
        "Every number below is read from the run folders next to this file.",
        "",
        f"Task: {len(tc.model.labels)} speakers ({', '.join(tc.model.labels)}), one example per speech, "
        f"stratified split (seed {tc.data.split_seed}): {sizes['train']} train / {sizes['val']} val / "
        f"{sizes['test']} test. Tokenizer: the masked-LM run's WordPiece, {tc.model.vocab_size} tokens; texts cut "
        f"to {tc.data.max_len} tokens. Budget for every cell: {tc.train.max_iters} steps of batch "
        f"{tc.train.batch_size}, lr {tc.train.lr:g} ({tc.train.schedule}, warmup {tc.train.warmup_iters}), "
        f"dropout {tc.model.dropout}, clipping {tc.train.grad_clip}; scored with the best-validation weights.",
        "",
        "## Masked-LM pretraining",
        "",
        f"BERT-style encoder, {mc.model.n_layer} layers x {mc.model.n_head} heads x {mc.model.n_embd} wide, "
        f"{sum(p.numel() for p in mlm.run.model.parameters()):,} parameters, {mc.train.max_iters} steps of "
        f"{mc.train.batch_size} windows of {mc.data.seq_len} tokens, {mlm.run.state['train_seconds']:.0f} s. "
        f"On the held-out last {mc.data.val_fraction:.0%} of the text ({m['masked']:,} masked tokens, fixed masks), "
        f"best at step {m['step']}: **masked-token accuracy {m['masked_acc']:.4f}, perplexity "
        f"{m['perplexity']:.1f}** (loss {m['loss']:.4f}).",
        "",
        f'`tinyformer fill {mlm.run.path} "{PROBE}"`:',
        "",
        markdown_table(["filler", "probability"], [[tok, f"{p:.4f}"] for tok, p in m["fill"]]),
        "",
        "## Bake-off (test split)",
        "",
        markdown_table(
            ["cell", "encoder", "parameters", "test accuracy", "test macro-F1", "best val accuracy", "train s"]
            + ["inference ex/s"],
            table,
        ),
        "",
        "![accuracy vs parameters](accuracy_vs_params.png)",
        "",
        "## Does pretraining help?",
        "",
        f"Test accuracy of the same Transformer classifier over seeds {', '.join(map(str, SEEDS[: len(scratch)]))}: "
        f"from scratch {mean_sd(scratch)}, from the masked-LM encoder {mean_sd(pretrained)}; "
        f"difference **{statistics.mean(pretrained) - statistics.mean(scratch):+.4f}**.",
        f"With {sizes['test']} test examples one example is {1 / sizes['test']:.4f} of accuracy, and the standard "
        f"error of an accuracy near 0.5 is about {(0.25 / sizes['test']) ** 0.5:.3f}.",
        "",
        "Caveat: the masked-LM run read the first 90% of the play as unlabelled text, which includes the text (not "
        "the speaker) of most test speeches. Its tokenizer, shared by every cell, was learned from the same text.",
        "",
    ]
    path = folder / "report.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
