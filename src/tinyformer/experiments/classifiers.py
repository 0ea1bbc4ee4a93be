"""The text-classifier bake-off: every encoder on the same split, tokenizer, budget and loop.

First a BERT-style encoder is pretrained with masked-LM on Tiny Shakespeare; its
tokenizer is then the one tokenizer of every classifier, so the cells differ in
the encoder alone. The Transformer classifier runs twice more: from scratch and
starting from the pretrained encoder, each with three seeds, so the value of
pretraining is a measured difference with its spread.

Task: speaker identification (the K = 5 most frequent speakers, one example per
speech, stratified split by speech). Scores are on the test split, with each
run's best-validation weights. Inference speed is examples per second over the
test split in batches of 64, the median of 3 passes, measured once per architecture:
runs that differ only in their weights (a seed, a pretrained start) compute the same
thing at the same cost, so timing each again would only add the noise of the machine.

`classifiers-minilm` (`tinyformer.experiments.classifiers_minilm`) adds the
pretrained MiniLM rows on the same split.

    tinyformer experiment classifiers [--quick] [--out DIR] [--data FILE]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

from tinyformer.experiments.report import figure, markdown_table, mean_sd, study_folder, write_report
from tinyformer.experiments.runner import Cell, CellResult, run_cell
from tinyformer.files import atomic_write
from tinyformer.models import count_parameters
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
    folder = study_folder("classifiers", out, quick)
    where = [f"data.path={json.dumps(str(Path(data).resolve()))}"] if data else []
    mlm = run_cell("mlm", [], [*where, *(MLM_QUICK if quick else [])], Cell("mlm", [], "masked-LM pretraining"), folder)
    shared = [*where, f"data.tokenizer={json.dumps(str(mlm.run.path.resolve()))}", *(CLS_QUICK if quick else [])]
    grid = classifier_cells(mlm.run.path.resolve(), SEEDS[:1] if quick else SEEDS)
    return report(mlm, [run_cell("classify", [], shared, cell, folder) for cell in grid], folder, quick)


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


def architecture(r: CellResult) -> str:
    """What an inference pass computes: the model's config but where its weights started, and the tokens per
    text. Runs alike in it take the same time per pass, whatever their weights."""
    model = {k: v for k, v in dataclasses.asdict(r.run.config.model).items() if k != "init_from"}
    return json.dumps([model, r.run.config.data.seq_len], sort_keys=True, default=str)


def mlm_figures(mlm: CellResult) -> dict:
    from tinyformer.runs import load_run
    from tinyformer.tasks.mlm import fill_mask

    best = min((row for row in mlm.metrics if row.get("split") == "val"), key=lambda row: row["loss"])
    run = load_run(mlm.run.path)  # best weights
    return best | {"fill": fill_mask(run.model, run.tokenizer, PROBE, 5)[0]}


# ---- report ---------------------------------------------------------------------------------------------------------
def rows_of(results: list[CellResult], task: ClassifyTask) -> list[dict]:
    """A row per run: its test scores, best val accuracy, training time and inference speed (timed once per
    `architecture`: the scratch and pretrained Transformers of every seed share one timing)."""
    rows, speeds = [], {}
    for r in results:
        t = test_scores(r)
        key = architecture(r)
        if key not in speeds:
            speeds[key] = inference_speed(task, r)
        val = max((row["acc"] for row in r.metrics if row.get("split") == "val"), default=float("nan"))
        rows.append(
            {
                "cell": r.cell.name,
                "about": r.cell.about,
                "params": count_parameters(r.run.model),
                "acc": t["acc"],
                "macro_f1": t["macro_f1"],
                "val_acc": val,
                "train_s": r.run.state.train_seconds,
                "ex_s": speeds[key],
            }
        )
    return rows


def pretraining_effect(rows: list[dict], key: str = "acc") -> tuple[list[float], list[float]]:
    """`key` (test accuracy or macro-F1) of the scratch and of the pretrained Transformer runs, one per seed."""
    pick = lambda prefix: [r[key] for r in rows if r["cell"].startswith(prefix)]  # noqa: E731
    return pick("transformer-scratch"), pick("transformer-pretrained")


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


def report(mlm: CellResult, results: list[CellResult], folder: Path, quick: bool) -> Path:
    task = ClassifyTask.prepare(results[0].run.config, results[0].run.tokenizer)  # the split every cell shares
    rows = rows_of(results, task)
    base = task.majority("test")
    plot_accuracy_vs_params(rows, base["acc"], folder / "accuracy_vs_params.png")
    parts = [
        setup_text(task),
        "",
        mlm_section(mlm),
        bakeoff_section(rows, base),
        pretraining_section(rows, len(task.splits["test"])),
    ]
    return write_report(folder, "Text-classifier bake-off: speaker identification", quick, parts)


def setup_text(task: ClassifyTask) -> str:
    c, sizes = task.config, {name: len(s) for name, s in task.splits.items()}
    return (
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
        f"{count_parameters(mlm.run.model):,} parameters, {c.train.max_iters} steps of "
        f"{c.train.batch_size} windows of {c.data.seq_len} tokens, {mlm.run.state.train_seconds:.0f} s. "
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
        + "\n\nInference ex/s: test examples per second in batches of 64, the median of 3 passes after a warm-up "
        "one, timed once per architecture (the Transformer's scratch and pretrained runs of every seed share it).\n\n"
        + f"{figure('accuracy_vs_params.png', 'accuracy vs parameters')}\n"
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
