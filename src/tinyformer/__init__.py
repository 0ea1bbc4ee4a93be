"""tinyformer: a from-scratch Transformer lab in PyTorch.

`import tinyformer` is light: every public name below is imported on first use (PEP 562), so
importing the package, or reading its version, does not load torch; the first name used does.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {  # name -> (module, attribute)
    "CrossAttention": ("tinyformer.results", "CrossAttention"),
    "Figure": ("tinyformer.results", "Figure"),
    "Report": ("tinyformer.results", "Report"),
    "attend": ("tinyformer.attention.multihead", "attend"),
    "AttentionMaps": ("tinyformer.viz.capture", "AttentionMaps"),
    "AttentionPart": ("tinyformer.models.outputs", "AttentionPart"),
    "beam_search": ("tinyformer.generate.decoding", "beam_search"),
    "BertConfig": ("tinyformer.models.bert", "BertConfig"),
    "BertEncoder": ("tinyformer.models.bert", "BertEncoder"),
    "BertForMaskedLM": ("tinyformer.models.bert", "BertForMaskedLM"),
    "build_seq2seq": ("tinyformer.models.seq2seq", "build_seq2seq"),
    "capture_attention": ("tinyformer.viz.capture", "capture_attention"),
    "causal_mask": ("tinyformer.attention.masks", "causal"),
    "CharTokenizer": ("tinyformer.data.tokenizers", "CharTokenizer"),
    "ClassifierConfig": ("tinyformer.models.classifier", "ClassifierConfig"),
    "ClassifyTask": ("tinyformer.tasks", "ClassifyTask"),
    "DataConfig": ("tinyformer.config", "DataConfig"),
    "EncoderHeadConfig": ("tinyformer.models.token_heads", "EncoderHeadConfig"),
    "EncoderOutput": ("tinyformer.models.outputs", "EncoderOutput"),
    "FitResult": ("tinyformer.train.trainer", "FitResult"),
    "generate": ("tinyformer.generate.sampling", "generate"),
    "generate_text": ("tinyformer.generate.sampling", "generate_text"),
    "GPTConfig": ("tinyformer.models.gpt", "GPTConfig"),
    "GPTTask": ("tinyformer.tasks", "GPTTask"),
    "greedy_decode": ("tinyformer.generate.decoding", "greedy_decode"),
    "head_roles": ("tinyformer.viz.roles", "head_roles"),
    "HeadRoles": ("tinyformer.viz.roles", "HeadRoles"),
    "inference": ("tinyformer.device", "inference"),
    "load_hf_bert": ("tinyformer.models.hf_bert", "load_hf_bert"),
    "load_run": ("tinyformer.runs", "load_run"),
    "MiniGPT": ("tinyformer.models.gpt", "MiniGPT"),
    "MLMTask": ("tinyformer.tasks", "MLMTask"),
    "ModelOutput": ("tinyformer.models.outputs", "ModelOutput"),
    "MultiHeadAttention": ("tinyformer.attention.multihead", "MultiHeadAttention"),
    "param_breakdown": ("tinyformer.models.gpt", "param_breakdown"),
    "param_count": ("tinyformer.models.gpt", "param_count"),
    "register": ("tinyformer.tasks", "register"),
    "QATask": ("tinyformer.tasks", "QATask"),
    "ReverseTask": ("tinyformer.tasks", "ReverseTask"),
    "RNNEncoder": ("tinyformer.models.rnn", "RNNEncoder"),
    "Run": ("tinyformer.runs", "Run"),
    "RunConfig": ("tinyformer.config", "RunConfig"),
    "SampleConfig": ("tinyformer.config", "SampleConfig"),
    "Seq2SeqConfig": ("tinyformer.models.seq2seq", "Seq2SeqConfig"),
    "Seq2SeqOutput": ("tinyformer.models.outputs", "Seq2SeqOutput"),
    "Seq2SeqTransformer": ("tinyformer.models.seq2seq", "Seq2SeqTransformer"),
    "SpanExtractor": ("tinyformer.models.token_heads", "SpanExtractor"),
    "SubwordTokenizer": ("tinyformer.data.subword", "SubwordTokenizer"),
    "TagTask": ("tinyformer.tasks", "TagTask"),
    "Task": ("tinyformer.tasks", "Task"),
    "TASKS": ("tinyformer.tasks", "TASKS"),
    "TextClassifier": ("tinyformer.models.classifier", "TextClassifier"),
    "TextCNN": ("tinyformer.models.cnn", "TextCNN"),
    "TokenTagger": ("tinyformer.models.token_heads", "TokenTagger"),
    "TrainConfig": ("tinyformer.config", "TrainConfig"),
    "Trainer": ("tinyformer.train.trainer", "Trainer"),
    "UserError": ("tinyformer.errors", "UserError"),
}

__all__ = sorted([*_PUBLIC, "api"])


def __getattr__(name: str) -> Any:
    if name == "api":  # the Python API, each command as a function (`from tinyformer import api`)
        return importlib.import_module("tinyformer.api")
    if name not in _PUBLIC:
        raise AttributeError(f"module 'tinyformer' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC, "api"])
