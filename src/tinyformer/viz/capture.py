"""One attention-capture API for every model: `capture_attention(model, inputs) -> AttentionMaps`.

Everything that draws or scores attention takes `AttentionMaps`, so every view
works for every model: a Hugging Face encoder, or any tinyformer model, which
describes its own attention stacks (`model.attention_parts(...)`, a list of
`AttentionPart`s); this module never asks which model class it holds.
Weights are post-softmax probabilities (rows sum to 1 over the allowed keys),
float32 on the CPU, one (B, H, T, S) tensor per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tinyformer.device import inference, model_device
from tinyformer.errors import UserError

KINDS = ("self", "causal", "cross")


@dataclass
class AttentionMaps:
    layers: list[torch.Tensor]  # per layer (B, H, T, S)
    query_tokens: list[list[str]]  # per batch row: T labels for the rows (queries)
    key_tokens: list[list[str]]  # per batch row: S labels for the columns (keys)
    kind: str  # "self" (bidirectional), "causal" (decoder self-attention) or "cross"
    model_name: str = ""  # shown in titles
    special: dict[str, str] = field(default_factory=dict)  # {"cls": "[CLS]", "end": "[SEP]"} when the model has them
    part: str = ""  # which attention stack of the model: "self", "causal", "encoder", "decoder", "cross"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} is not one of {KINDS}")
        if not self.layers:
            raise ValueError("AttentionMaps needs at least one layer")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].size(1)

    def head(self, layer: int, head: int, row: int = 0) -> torch.Tensor:
        """(T, S) weights of one head for batch row `row`."""
        return self.layers[layer][row, head]

    def stacked(self, row: int = 0) -> torch.Tensor:
        """(L, H, T, S) for one batch row (all layers must share T and S)."""
        return torch.stack([w[row] for w in self.layers])


def capture_attention(model, inputs, tokenizer=None, *, name: str = "", part: str | None = None) -> AttentionMaps:
    """Attention of `model` on `inputs`: a sentence, a list of sentences, ids (B, T), or a tuple of model inputs.

    Any Hugging Face model loaded with eager attention (with its tokenizer), and every tinyformer model
    that describes its attention (`attention_parts`): a text goes through the tokenizer's `batch`, ids
    get a mask of ones, a tuple is passed as it is (an encoder-decoder: (src (B, S), tgt_in (B, T))).
    A model with several attention stacks needs `part` ("encoder", "decoder" or "cross").
    """
    if isinstance(inputs, str) and not inputs.strip():
        raise UserError("the sentence is empty; give at least one word")
    if hasattr(getattr(model, "config", None), "model_type"):  # a Hugging Face model
        return _capture_hf(model, inputs, tokenizer, name or model.config.model_type)
    if isinstance(inputs, torch.Tensor):
        ids = inputs if inputs.dim() == 2 else inputs[None]
        inputs = (ids, torch.ones_like(ids))
    elif not isinstance(inputs, tuple):
        inputs = _encode(tokenizer, _as_list(inputs))  # (ids, mask)
    maps = {m.part: m for m in capture_parts(model, inputs, tokenizer, name or type(model).__name__)}
    if part is None and len(maps) == 1:
        return next(iter(maps.values()))
    if part not in maps:
        raise UserError(f"part={part!r} is not one of {', '.join(maps)}")
    return maps[part]


def capture_parts(model, inputs: tuple, tokenizer, name: str) -> list[AttentionMaps]:
    """Every attention stack the tinyformer `model` describes for `inputs`, labelled by `tokenizer`."""
    if not hasattr(model, "attention_parts"):
        raise UserError(f"{type(model).__name__} does not describe its attention (it has no attention_parts)")
    with inference(model):
        parts = model.attention_parts(*(x.to(model_device(model)) for x in inputs))

    def labels(ids: torch.Tensor) -> list[list[str]]:
        return [tokenizer.convert_ids_to_tokens(row) for row in ids.tolist()]

    return [
        AttentionMaps(
            [w.float().cpu() for w in p.weights],  # each (B, H, T, S)
            labels(p.queries),
            labels(p.keys),
            p.kind,
            name if len(parts) == 1 else f"{name} {p.name}",
            _hf_special(tokenizer),
            part=p.name,
        )
        for p in parts
    ]


def _hf_special(tokenizer) -> dict[str, str]:
    special = {
        "cls": getattr(tokenizer, "cls_token", None) or getattr(tokenizer, "bos_token", None),
        "end": getattr(tokenizer, "sep_token", None) or getattr(tokenizer, "eos_token", None),
    }
    return {k: v for k, v in special.items() if v}


def _capture_hf(model, inputs, tokenizer, name: str) -> AttentionMaps:
    cfg = model.config
    if isinstance(inputs, torch.Tensor):
        ids = inputs if inputs.dim() == 2 else inputs[None]
        enc = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    else:
        enc = tokenizer(_as_list(inputs), return_tensors="pt", padding=True)
    limit = getattr(cfg, "max_position_embeddings", 10**9)
    if enc["input_ids"].size(1) > limit:
        raise UserError(f"the sentence has {enc['input_ids'].size(1)} tokens, more than the model's maximum {limit}")
    with inference(model):
        out = model(**{k: v.to(model_device(model)) for k, v in enc.items()}, output_attentions=True)
    if not out.attentions or out.attentions[0] is None:
        raise UserError(f"{name} returned no attention weights; load it with attn_implementation='eager'")
    tokens = [tokenizer.convert_ids_to_tokens(row.tolist()) for row in enc["input_ids"]]
    heads = cfg.architectures or []
    causal = getattr(cfg, "is_decoder", False) or any(a.endswith(("LMHeadModel", "CausalLM")) for a in heads)
    layers = [w.float().cpu() for w in out.attentions]
    kind = "causal" if causal else "self"
    return AttentionMaps(layers, tokens, tokens, kind, name, _hf_special(tokenizer))


def _encode(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Texts -> (ids, mask) (B, T): a tinyformer tokenizer's `batch`, or a Hugging Face tokenizer's call."""
    if hasattr(tokenizer, "batch"):
        return tokenizer.batch(texts)
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def _as_list(inputs) -> list[str]:
    return [inputs] if isinstance(inputs, str) else list(inputs)
