"""MiniGPT and the Hugging Face causal-LM formats it reads and writes: GPT-2 (`tinyformer.models.gpt2`), Llama
and Qwen2 (`tinyformer.models.llama`). Which one a checkpoint is, its config.json's `model_type` says; which one
a MiniGPT is written as, its config says (RMSNorm, SwiGLU and rotary positions: Llama, or Qwen2 with a q/k/v
bias; otherwise GPT-2). `model.init_from` and `tinyformer export hf` go through here and nowhere else.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from tinyformer.errors import UserError
from tinyformer.models import gpt2, llama
from tinyformer.models.hf_config import model_type

READS = ("gpt2", *llama.FAMILIES)  # model_type values MiniGPT loads
TRAINING = ("dropout", "embedding_dropout", "attn_dropout", "backend", "grad_checkpoint", "init", "init_from")
TRAINING += ("zero_init",)  # GPTConfig's fields that do not change what a trained model computes


def config_from_hf(hf: dict, where: str = "config.json") -> dict:
    """A config.json (as a dict; `where` names it) -> every GPTConfig field of its architecture: the format's, and
    GPTConfig's default for each switch the format does not have (a run's qk_norm or soft cap must not survive
    into a checkpoint that has none); UserError naming the bad key (`tinyformer.models.hf_config` checks every
    one) or what MiniGPT does not build."""
    from tinyformer.models.gpt import GPTConfig

    kind = model_type(hf, where)
    if kind == "gpt2":
        fields = gpt2.config_from_gpt2(hf, where)
    elif kind in llama.FAMILIES:
        fields = llama.config_from_llama(hf, where)
    else:
        raise UserError(f"model_type={kind!r} in config.json: MiniGPT loads {', '.join(READS)}")
    defaults = {f.name: f.default for f in dataclasses.fields(GPTConfig) if f.name not in TRAINING}
    return defaults | fields


def family(model: nn.Module) -> str:
    """ "llama" (Llama or Qwen2) or "gpt2": the format `model`, a MiniGPT, is read from and written as."""
    return "llama" if llama.is_llama(model.config) else "gpt2"


def import_hf(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint of `model`'s family into it (see `config_from_hf`, which built it)."""
    (llama.import_llama if family(model) == "llama" else gpt2.import_gpt2)(model, state)


def export_hf(model: nn.Module, eos_token_id: int | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    """`model` as a Hugging Face folder's config.json (a dict) and tensors; UserError for what its format lacks."""
    from tinyformer.models.gpt import MiniGPT

    if not isinstance(model, MiniGPT):
        raise UserError(f"export hf writes a MiniGPT run; this run's model is a {type(model).__name__}")
    if family(model) == "llama":
        return llama.llama_config(model, eos_token_id), llama.llama_state_dict(model)
    gpt2.check_exportable(model)
    return gpt2.gpt2_config(model, eos_token_id), gpt2.gpt2_state_dict(model)
