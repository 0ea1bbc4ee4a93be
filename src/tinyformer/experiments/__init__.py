"""Experiments: named grids of config overrides, trained (or reused) and written up as reports.

`EXPERIMENTS` is the one registry `tinyformer experiment NAME` reads: each entry is a function
`(out folder or None, quick=, data=) -> report path`. Adding a study is a module and one line here.
"""

from collections.abc import Callable
from pathlib import Path

from tinyformer.experiments import (
    attention_variants,
    classifiers,
    classifiers_minilm,
    gpt_studies,
    kv_cache,
    practice,
    reverse_ablation,
    seq2seq_decoding,
    token_heads,
    tokenizers,
)

EXPERIMENTS: dict[str, Callable[..., Path]] = {
    "ablation": gpt_studies.ablation,  # MiniGPT depth, heads, causal mask
    "scale": gpt_studies.scale,  # deeper and wider at the same steps; Chinchilla
    "positions": gpt_studies.positions,  # learned / sinusoidal / RoPE (+NTK) past the trained context
    "tokenizers": tokenizers.run,  # characters vs byte-level BPE at the same parameters and wall time
    "kv-cache": kv_cache.run,  # per-token generation cost with and without the cache
    "reverse-ablation": reverse_ablation.run,  # the encoder-decoder chapter's exercises
    "seq2seq-decoding": seq2seq_decoding.run,  # encoder or decoder: where inference time goes, cache or not
    "classifiers": classifiers.run,  # Transformer vs TextCNN vs RNN family; what pretraining buys
    "classifiers-minilm": classifiers_minilm.run,  # pretrained MiniLM vs its architecture from scratch
    "tagging": token_heads.tagging,  # names in speeches, unseen names: scratch vs masked-LM vs MiniLM init
    "qa": token_heads.qa,  # "Who says ...?" extractive QA: scratch vs masked-LM vs MiniLM init
    "attention-variants": attention_variants.run,  # softmax vs linear vs GQA vs MQA: quality, speed vs length
    "practice": practice.run,  # clipping, warmup, accumulation, checkpointing, bf16: one switch each
}
