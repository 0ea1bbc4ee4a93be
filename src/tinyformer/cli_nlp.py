"""`tinyformer fill` and `tinyformer classify`, and `eval` for masked-LM and classifier runs.

Thin functions over `tinyformer.tasks.mlm` and `tinyformer.tasks.classify`;
errors a user can cause are `UserError`s.
"""

from __future__ import annotations

import argparse

from tinyformer.errors import UserError


def _text(text: str) -> str:
    """A command-line text that is valid Unicode (a stray non-UTF-8 byte arrives as a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError("the text is not valid UTF-8; check the terminal's encoding") from None
    return text


def _run(path: str, task: str, what: str):
    from tinyformer.runs import load_run

    run = load_run(path)
    if run.config.task != task:
        raise UserError(f"{path!r} is a {run.config.task!r} run; {what} needs a `train {task}` run")
    return run


def add_fill(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder of `tinyformer train mlm`")
    p.add_argument("text", help='text with one or more [MASK], e.g. "To be or not to [MASK]"')
    p.add_argument("--top", type=int, default=5, help="fillers to show per [MASK] (default 5)")


def cmd_fill(a: argparse.Namespace) -> int:
    from tinyformer.tasks.mlm import fill_mask

    run = _run(a.run, "mlm", "fill")
    for n, options in enumerate(fill_mask(run.model, run.tokenizer, _text(a.text), a.top), start=1):
        print(f"[MASK] #{n}:")
        for token, p in options:
            print(f"  {token:<14} {p:.4f}")
    return 0


def add_classify(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder of `tinyformer train classify`")
    p.add_argument("text", help="the text to label")


def cmd_classify(a: argparse.Namespace) -> int:
    import torch

    run = _run(a.run, "classify", "classify")
    if not _text(a.text).strip():
        raise UserError("the text is empty; give the text to label")
    ids, mask = run.tokenizer.batch([a.text], run.config.data.max_len)
    with torch.no_grad():
        probs = run.model(ids, mask).logits[0].softmax(-1)  # (C,)
    for i in probs.argsort(descending=True).tolist():
        print(f"{run.config.model.labels[i]:<24} {probs[i]:.4f}")
    return 0


def eval_mlm(run) -> None:
    """Masked-token accuracy and perplexity over the whole held-out split, with its fixed masks."""
    from tinyformer.tasks.mlm import MLMTask

    task = MLMTask(run.config, run.tokenizer)
    r = task.evaluate(run.model, 0, 0, None)
    print(
        f"held-out split: {r['masked']:,} masked tokens, masked-token accuracy {r['masked_acc']:.4f}, "
        f"perplexity {r['perplexity']:.2f} (loss {r['loss']:.4f})"
    )


def eval_classify(run) -> None:
    """The test split: accuracy, macro-F1, majority baseline; test.json and confusion.png in the run folder."""
    from tinyformer.tasks.classify import ClassifyTask

    ClassifyTask(run.config, run.tokenizer).finish(run.model, run.path)
