"""One attention-capture API for every model: `capture_attention(model, inputs) -> AttentionMaps`.

Everything that draws or scores attention takes `AttentionMaps`, so every view
works for every model: a Hugging Face encoder, MiniGPT, our BERT-style encoder.
Weights are post-softmax probabilities (rows sum to 1 over the allowed keys),
float32 on the CPU, one (B, H, T, S) tensor per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

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


def show_char(ch: str) -> str:
    """A visible label for a character token (newline and space would vanish on an axis)."""
    return {"\n": "↵", " ": "␣", "\t": "⇥"}.get(ch, ch)


def capture_attention(model, inputs, tokenizer=None, *, name: str = "", part: str = "cross") -> AttentionMaps:
    """Attention of `model` on `inputs` (a sentence, a list of sentences, or ids (B, T)).

    Works for MiniGPT (with its CharTokenizer), tinyformer's BERT-style encoder and any
    Hugging Face model loaded with eager attention (both with a Hugging Face tokenizer),
    and the encoder-decoder: `inputs` = (src (B, S), tgt_in (B, T)) ids, `tokenizer` = the
    label of each id (a list), `part` = "encoder" (self), "decoder" (causal) or "cross".
    """
    from tinyformer.models.gpt import MiniGPT
    from tinyformer.models.seq2seq import Seq2SeqTransformer

    if isinstance(inputs, str) and not inputs.strip():
        raise UserError("the sentence is empty; give at least one word")
    with torch.no_grad():
        if isinstance(model, MiniGPT):
            return _capture_char_lm(model, inputs, tokenizer, name or "MiniGPT")
        if isinstance(model, Seq2SeqTransformer):
            return _capture_seq2seq(model, inputs, tokenizer, name or "seq2seq", part)
        if hasattr(getattr(model, "config", None), "model_type"):
            return _capture_hf(model, inputs, tokenizer, name or model.config.model_type)
        return _capture_encoder(model, inputs, tokenizer, name or type(model).__name__)


def _capture_char_lm(model, inputs, tokenizer, name: str) -> AttentionMaps:
    if isinstance(inputs, torch.Tensor):
        idx = inputs if inputs.dim() == 2 else inputs[None]
    else:
        idx = torch.tensor([tokenizer.encode(s) for s in _as_list(inputs)], dtype=torch.long)
    block = model.config.block_size
    if idx.size(1) > block:
        raise UserError(f"the text has {idx.size(1)} characters, more than the model's block size {block}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = model(idx.to(device), need_weights=True)
    model.train(was_training)
    tokens = [[show_char(tokenizer.chars[i]) if tokenizer else str(i) for i in row.tolist()] for row in idx]
    layers = [w.float().cpu() for w in out.attentions]  # each (B, H, T, T)
    return AttentionMaps(layers, tokens, tokens, "causal", name)


SEQ2SEQ_PARTS = {"encoder": "self", "decoder": "causal", "cross": "cross"}


def _capture_seq2seq(model, inputs, labels, name: str, part: str) -> AttentionMaps:
    if part not in SEQ2SEQ_PARTS:
        raise ValueError(f"part={part!r} is not one of {', '.join(SEQ2SEQ_PARTS)}")
    src, tgt = (t if t.dim() == 2 else t[None] for t in inputs)
    was_training = model.training
    model.eval()
    out = model(src, tgt, need_weights=True)
    model.train(was_training)
    attentions = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}

    queries = _labels(src, labels) if part == "encoder" else _labels(tgt, labels)
    keys = _labels(tgt, labels) if part == "decoder" else _labels(src, labels)
    layers = [w.float().cpu() for w in attentions[part]]
    return AttentionMaps(layers, queries, keys, SEQ2SEQ_PARTS[part], f"{name} {part}")


def _labels(ids: torch.Tensor, labels) -> list[list[str]]:
    """(B, L) ids -> per row the label of each id (`labels[i]`, or the id itself)."""
    return [[labels[i] if labels is not None else str(i) for i in row.tolist()] for row in ids]


def _hf_batch(inputs, tokenizer, max_len: int):
    if isinstance(inputs, torch.Tensor):
        ids = inputs if inputs.dim() == 2 else inputs[None]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if hasattr(tokenizer, "batch"):  # tinyformer's SubwordTokenizer (masked-LM and classifier runs)
        ids, mask = tokenizer.batch(_as_list(inputs))
        enc = {"input_ids": ids, "attention_mask": mask}
    else:
        enc = tokenizer(_as_list(inputs), return_tensors="pt", padding=True)
    if enc["input_ids"].size(1) > max_len:
        raise UserError(f"the sentence has {enc['input_ids'].size(1)} tokens, more than the model's maximum {max_len}")
    return enc


def _hf_special(tokenizer) -> dict[str, str]:
    special = {
        "cls": getattr(tokenizer, "cls_token", None) or getattr(tokenizer, "bos_token", None),
        "end": getattr(tokenizer, "sep_token", None) or getattr(tokenizer, "eos_token", None),
    }
    return {k: v for k, v in special.items() if v}


def _capture_hf(model, inputs, tokenizer, name: str) -> AttentionMaps:
    cfg = model.config
    enc = _hf_batch(inputs, tokenizer, getattr(cfg, "max_position_embeddings", 10**9))
    model.eval()
    out = model(**enc, output_attentions=True)
    if not out.attentions or out.attentions[0] is None:
        raise UserError(f"{name} returned no attention weights; load it with attn_implementation='eager'")
    tokens = [tokenizer.convert_ids_to_tokens(row.tolist()) for row in enc["input_ids"]]
    heads = cfg.architectures or []
    causal = getattr(cfg, "is_decoder", False) or any(a.endswith(("LMHeadModel", "CausalLM")) for a in heads)
    layers = [w.float().cpu() for w in out.attentions]
    kind = "causal" if causal else "self"
    return AttentionMaps(layers, tokens, tokens, kind, name, _hf_special(tokenizer))


def _capture_encoder(model, inputs, tokenizer, name: str) -> AttentionMaps:
    """tinyformer's BERT-style encoders (BertEncoder, BertForMaskedLM, a Transformer TextClassifier)."""
    if getattr(model.config, "encoder", "transformer") != "transformer":
        raise UserError(f"a {model.config.encoder!r} classifier has no attention; viz needs model.encoder=transformer")
    enc = _hf_batch(inputs, tokenizer, model.config.max_position)
    model.eval()
    out = model(enc["input_ids"], enc["attention_mask"], need_weights=True)
    tokens = [tokenizer.convert_ids_to_tokens(row.tolist()) for row in enc["input_ids"]]
    layers = [w.float().cpu() for w in out.attentions]
    return AttentionMaps(layers, tokens, tokens, "self", name, _hf_special(tokenizer))


def _as_list(inputs) -> list[str]:
    return [inputs] if isinstance(inputs, str) else list(inputs)
