"""How the guide's build makes each study of `tinyformer.experiments.EXPERIMENTS`: the registry says what a study
is (its function, its options, where it writes); this says what the lab does with it. A study not named here is
made plainly (`tinyformer experiment NAME --out DIR`, beside the others, in the hour's build); one the guide does
not quote is in `LEFT_OUT`, with why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InGuide:
    args: str = ""  # what the lab's command adds ("{runs}": the runs root), e.g. a run of another study to reuse
    after: tuple[str, ...] = ()  # studies the lab makes first: this one reads or reuses their runs
    extra: str = ""  # why `lab build --train` leaves it out of the hour (made with --only); "": in the hour
    alone: bool = False  # its times are its answer: the lab makes it with nothing beside it, on every core
    cheap: bool = False  # seconds, no training: a plain `lab build` makes it when its folder is missing
    by_budget: bool = False  # made a time budget at a time (--minutes), each a source NAME/<m>min of its own


MLM = "--mlm {runs}/experiments/classifiers/mlm"  # tagging and qa start from the bake-off's masked LM: one
# pretraining for the three
HOW: dict[str, InGuide] = {
    "scale": InGuide(after=("ablation",)),  # its base is ablation's baseline, the same config: reused
    "classifiers-minilm": InGuide(after=("classifiers",)),  # beside the bake-off, whose cells its report sums up
    "tagging": InGuide(MLM),
    "qa": InGuide(MLM),
    "attention-variants": InGuide(after=("ablation",)),  # its softmax cell is ablation's baseline: reused
    "merges": InGuide(cheap=True),  # the trainers of data/merges.py on the play: no model
    "budgets": InGuide(
        "--nanogpt {nanogpt}",
        extra="hours alone (each shape and seed trains for its whole budget), with a nanoGPT checkout beside ours",
        alone=True,
        by_budget=True,  # about 4 hours in all: more than a sitting, so each budget is stamped when it is made
    ),
    "speedrun": InGuide(
        "--nanogpt {nanogpt}",
        extra="about an hour alone, and it runs a nanoGPT checkout beside ours",
        alone=True,
    ),
}
LEFT_OUT = {"tokenizers": "no item of the guide quotes it (its BPE training is minutes no page would read)"}


def how(name: str) -> InGuide:
    return HOW.get(name, InGuide())
