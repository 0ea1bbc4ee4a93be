"""The model interfaces the rest of tinyformer relies on, declared: what a new model must offer to be used.

- `CausalLM`: what sampling (`tinyformer.generate.sampling`), chat, the playground, the exports (page, ONNX)
  and the KV-cache study call on a language model. MiniGPT is one, and so is every model the `gpt` task
  builds: the Llama family is MiniGPT with other switches.
- `EncoderDecoder`: the encoder protocol: encode a source once, then decode against it, whole or a token at a
  time from a cache; what greedy and beam decoding (`tinyformer.generate.decoding`), the ONNX export and the
  decoding study call. `new_cache` may return None (a model that cannot cache, as torch's nn.Transformer):
  decoding then runs the whole prefix at each step.
- `Attentive`: a model whose attention the views draw (`tinyformer.viz.capture`, the playground): it names
  its attention stacks and returns them for given inputs.

A task declares the protocols its model satisfies (`Task.protocols`); a test builds every registered task's
model and checks it against them: the members exist and every parameter the protocol names is accepted
(`unmet`). The protocols are typing.Protocol classes, so a model needs no base class.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

import torch

from tinyformer.models.outputs import AttentionPart, EncodedSource, ModelOutput, Seq2SeqOutput


@runtime_checkable
class Attentive(Protocol):
    attention_names: tuple[str, ...]  # the `name` of each AttentionPart that attention_parts returns

    def attention_parts(self, *inputs: torch.Tensor) -> list[AttentionPart]:
        """The model's inputs (as its task's `view_inputs` makes them) -> every attention stack's weights."""


@runtime_checkable
class CausalLM(Protocol):
    config: Any  # block_size (the trained context), vocab_size, n_layer, n_head, n_embd, positions, backend
    attention_names: tuple[str, ...]

    @property
    def max_context(self) -> int | None:
        """The most positions one forward pass can hold (learned positions: block_size), None: no limit."""

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        cache: list | None = None,
        start: int = 0,
    ) -> ModelOutput:
        """idx (B, T) at positions [start, start + T), with a cache from `new_cache` past start 0 -> logits
        (B, T, V), the loss against targets, the attention weights if asked for."""

    def new_cache(self, batch_size: int, capacity: int | None = None) -> list:
        """One generation state per layer for `capacity` positions (default block_size)."""

    def cache_bytes(self, batch_size: int, capacity: int | None = None) -> int:
        """The memory `new_cache` would take, known before it is allocated."""

    def check_context(self, T: int) -> int:
        """T, or a UserError when a forward pass cannot hold T positions."""

    def set_ntk(self, context: int) -> None:
        """Rotary positions stretched for `context` positions; a UserError for other positions."""

    def attention_parts(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[AttentionPart]:
        """The causal self-attention of every block."""


@runtime_checkable
class EncoderDecoder(Protocol):
    config: Any  # block_size, vocab_size, pad_id

    def encode(self, src: torch.Tensor, *, need_weights: bool = False) -> EncodedSource:
        """src (B, S) padded with pad_id -> memory (B, S, D) and src_valid (B, S), once per source."""

    def decode(self, tgt_in, memory, src_valid, *, need_weights=False, cache=None, start=0) -> Seq2SeqOutput:
        """tgt_in (B, T) at target positions [start, start + T), memory (B, S, D) and src_valid (B, S) from
        `encode` -> logits (B, T, V)."""

    def new_cache(self, enc: EncodedSource, capacity: int | None = None) -> Any:
        """A decoding cache for `enc` (None: this model decodes the whole prefix at every step)."""


def unmet(model: Any, protocol: type) -> list[str]:
    """What `model` lacks of `protocol`: members it does not have, and parameters of the protocol's methods that
    its methods do not take by that name and kind (or take without a default where the protocol has one).
    [] when it conforms."""
    problems = []
    for name, want in vars(protocol).items():
        if name.startswith("_") or not (inspect.isfunction(want) or isinstance(want, property)):
            continue
        if not hasattr(model, name):
            problems.append(f"no {name}")
        elif inspect.isfunction(want):
            problems += [f"{name}: {p}" for p in _parameters_unmet(inspect.signature(want), getattr(model, name))]
    for name in getattr(protocol, "__annotations__", {}):
        if not hasattr(model, name):
            problems.append(f"no {name}")
    return problems


def _parameters_unmet(want: inspect.Signature, method: Any) -> list[str]:
    have = inspect.signature(method).parameters
    anything = any(q.kind is q.VAR_KEYWORD for q in have.values())  # **kwargs takes every keyword
    out = []
    for name, p in list(want.parameters.items())[1:]:  # after self
        if p.kind is p.VAR_POSITIONAL or (name not in have and anything and p.kind is p.KEYWORD_ONLY):
            continue
        q = have.get(name)
        if q is None:
            out.append(f"takes no {name!r}")
        elif p.kind is p.KEYWORD_ONLY and q.kind not in (q.KEYWORD_ONLY, q.POSITIONAL_OR_KEYWORD):
            out.append(f"{name!r} is not a keyword")
        elif p.default is not p.empty and q.default is q.empty:
            out.append(f"{name!r} has no default")
    return out
