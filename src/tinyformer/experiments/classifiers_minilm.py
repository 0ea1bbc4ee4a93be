"""The pretrained MiniLM against the same architecture from scratch, on the bake-off's split.

Two rows, three seeds each: the Transformer classifier started from the pretrained MiniLM checkpoint (22.6M
parameters, its own uncased WordPiece), and the same architecture and tokenizer from a random init, with
identical settings (`MINILM_RECIPE`). Its report, report_minilm.md, also sums up the small-Transformer cells
(`transformer-scratch*`, `transformer-pretrained*`: the bake-off's, or any trained into the folder) when the
folder holds them (it does not train them), with every run's budget beside its scores.

    tinyformer experiment classifiers-minilm [--quick] [--out DIR] [--data FILE]
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from tinyformer.experiments import EXPERIMENTS
from tinyformer.experiments.classifiers import SEEDS, rows_of
from tinyformer.experiments.report import markdown_table, mean_sd, study_folder, write_report
from tinyformer.experiments.runner import Cell, CellResult, run_cell
from tinyformer.tasks.classify import TEST_JSON, ClassifyTask

# 22.6M parameters on a CPU: the budget is 60 steps of 16 texts cut to 64 tokens (~1.6 epochs; 81% of the
# speeches fit), small enough for a laptop in fp32 (the report prints the time the six runs took where it ran).
# Both rows share every setting but the init.
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
    from tinyformer.models.hf_bert import pretrained_bert

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


ENTRY = EXPERIMENTS["classifiers-minilm"]  # its folder and report file are declared there (the lab reads them)


def run(out: Path | None = None, quick: bool = False, data: str | None = None) -> Path:
    """`tinyformer experiment classifiers-minilm`: the two MiniLM rows; in the bake-off's folder by default, so
    that its report also summarises the bake-off's small-Transformer cells when they are there (not trained here)."""
    folder = study_folder(Path(ENTRY.folder).name, out, quick)  # experiments/classifiers, as the registry says
    where = [f"data.path={json.dumps(str(Path(data).resolve()))}"] if data else []
    recipe = [*where, *(MINILM_QUICK if quick else MINILM_RECIPE)]
    results = [run_cell("classify", [], recipe, cell, folder) for cell in minilm_cells(SEEDS[:1] if quick else SEEDS)]
    others = [finished_cell(folder / p.name) for p in sorted(folder.iterdir()) if p.name.startswith(BAKEOFF)]
    return minilm_report(results, [r for r in others if r is not None], folder, quick)


def budget_of(r: CellResult) -> str:
    """A run's training budget as the table shows it: steps x batch, tokens per text."""
    c = r.run.config
    return f"{c.train.max_iters} x {c.train.batch_size}, {c.data.seq_len}"


def finished_cell(run_dir: Path) -> CellResult | None:
    """A finished run of the bake-off in the folder, read as it is; None when it is not (yet) there."""
    from tinyformer.experiments.runner import finished
    from tinyformer.runfolder import METRICS, read_metrics
    from tinyformer.runs import load_run

    if not finished(run_dir) or not (run_dir / TEST_JSON).is_file():
        return None
    run = load_run(run_dir, weights="latest")
    about = next((text for prefix, text in GROUPS.items() if run_dir.name.startswith(prefix)), "")
    return CellResult(Cell(run_dir.name, about=about), run, read_metrics(run_dir / METRICS), True)


def minilm_report(results: list[CellResult], others: list[CellResult], folder: Path, quick: bool) -> Path:
    task = ClassifyTask.prepare(results[0].run.config, results[0].run.tokenizer)  # MiniLM's tokenizer, both rows
    rows = rows_of(results, task)
    if others:  # the bake-off's cells encode the same split with their own tokenizer
        rows += rows_of(others, ClassifyTask.prepare(others[0].run.config, others[0].run.tokenizer))
    base, c = task.majority("test"), task.config
    steps = [r.run.state.train_seconds / r.run.state.step for r in results]
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
        f"Same split as the bake-off: {len(c.model.labels)} speakers, {len(task.splits['test'])} test speeches "
        f"(majority class: accuracy {base['acc']:.4f}, macro-F1 {base['macro_f1']:.4f}). Both MiniLM rows use "
        f"MiniLM's own uncased WordPiece ({c.model.vocab_size:,} tokens) and identical settings: "
        f"{c.train.max_iters} steps of batch {c.train.batch_size}, texts cut to {c.data.seq_len} tokens, lr "
        f"{c.train.lr:g} ({c.train.schedule}, warmup {c.train.warmup_iters}, floor {c.train.min_lr:g}), dropout "
        f"{c.model.dropout}, mean pooling; a step took {statistics.mean(steps):.1f} s on average, and the "
        f"{len(results)} MiniLM runs trained for {sum(r.run.state.train_seconds for r in results):.0f} s in all. "
        "The small-Transformer rows, when present, are read from their run folders as they are (their own "
        "tokenizer; their budget is in the table). Inference ex/s: test examples per second in batches of 64, "
        "timed once per architecture (the rows of one architecture differ only in their weights).",
        "",
        "## Summary (mean ± sd over seeds)\n",
        markdown_table(["rows", "what", "parameters", "seeds", "test accuracy", "test macro-F1"], summary),
        "",
        "## Every run\n",
        markdown_table([*header, "inference ex/s"], table),
    ]
    title = "Speaker identification: pretrained MiniLM vs the same architecture from scratch"
    return write_report(folder, title, quick, text, name=ENTRY.report)
