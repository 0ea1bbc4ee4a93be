"""Export a MiniGPT run to the Hugging Face GPT-2 format, so the ecosystem can load it.

MiniGPT with learned positions *is* GPT-2's architecture (Radford et al., 2019) at a smaller size:
Pre-LayerNorm blocks, one fused QKV projection, a GELU MLP, a final LayerNorm. The differences are
bookkeeping: GPT-2 stores its linear layers as `Conv1D` with (in, out) weights (ours are nn.Linear's
(out, in)), always has a QKV bias (ours may not: exported as zeros), ties the head to the token
embedding (ours is untied: `tie_word_embeddings=false`), and uses the tanh GELU by default (ours is the
exact one: `activation_function="gelu"`).

    tinyformer export hf runs/<run> out/
    transformers.GPT2LMHeadModel.from_pretrained("out/")

The folder gets `config.json` and `model.safetensors` (what `from_pretrained` reads) and our
`char_tokenizer.json`, to turn text into ids and back. `transformers` is not needed to export.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from tinyformer.errors import UserError
from tinyformer.files import atomic_write, make_dir, output_path, write_text
from tinyformer.models.gpt import MiniGPT


def check_exportable(model: MiniGPT) -> None:
    if not isinstance(model, MiniGPT):
        raise UserError(f"export hf writes GPT-2, from a MiniGPT run; this run's model is a {type(model).__name__}")
    c = model.config
    if c.positions != "learned":
        raise UserError(
            f"model.positions={c.positions!r}: the GPT-2 format has only learned positions; "
            "export a run trained with positions=learned"
        )
    if not c.causal:
        raise UserError("model.causal=false: GPT-2 is always causal; this ablation model cannot be exported")


def gpt2_config(model: MiniGPT) -> dict:
    c = model.config
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": c.vocab_size,
        "n_positions": c.block_size,
        "n_embd": c.n_embd,
        "n_layer": c.n_layer,
        "n_head": c.n_head,
        "n_inner": c.mlp_ratio * c.n_embd,
        "activation_function": "gelu",  # exact erf GELU, as nn.GELU()
        "layer_norm_epsilon": model.ln_f.eps,
        "resid_pdrop": 0.0,  # an exported model is for inference; dropout would only add noise
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "tie_word_embeddings": False,
        "scale_attn_weights": True,
        "bos_token_id": None,  # a character vocabulary has no special tokens: generation never stops early
        "eos_token_id": None,
        "pad_token_id": None,
    }


def gpt2_state_dict(model: MiniGPT) -> dict[str, torch.Tensor]:
    """Our weights under GPT-2's names; Linear (out, in) -> Conv1D (in, out) by transposing."""
    D = model.config.n_embd
    sd: dict[str, torch.Tensor] = {
        "transformer.wte.weight": model.tok_emb.weight,
        "transformer.wpe.weight": model.pos_emb.weight,
        "transformer.ln_f.weight": model.ln_f.weight,
        "transformer.ln_f.bias": model.ln_f.bias,
        "lm_head.weight": model.head.weight,
    }
    for i, b in enumerate(model.blocks):
        h = f"transformer.h.{i}."
        qkv_bias = b.attn.qkv.bias if b.attn.qkv.bias is not None else torch.zeros(3 * D)
        sd |= {
            h + "ln_1.weight": b.ln1.weight,
            h + "ln_1.bias": b.ln1.bias,
            h + "attn.c_attn.weight": b.attn.qkv.weight.T,
            h + "attn.c_attn.bias": qkv_bias,
            h + "attn.c_proj.weight": b.attn.proj.weight.T,
            h + "attn.c_proj.bias": b.attn.proj.bias,
            h + "ln_2.weight": b.ln2.weight,
            h + "ln_2.bias": b.ln2.bias,
            h + "mlp.c_fc.weight": b.mlp.fc.weight.T,
            h + "mlp.c_fc.bias": b.mlp.fc.bias,
            h + "mlp.c_proj.weight": b.mlp.proj.weight.T,
            h + "mlp.c_proj.bias": b.mlp.proj.bias,
        }
    return {k: v.detach().float().cpu().contiguous() for k, v in sd.items()}


def export_hf(model: MiniGPT, out: str | Path, tokenizer_file: Path | None = None, force: bool = False) -> Path:
    """Write `out/config.json` and `out/model.safetensors` (GPT-2 format); returns the folder.

    A folder that holds anything is refused unless `force`; a tinyformer run folder always is.
    """
    from safetensors.torch import save_file

    check_exportable(model)
    out = check_target(Path(out), force)
    make_dir(out)
    write_text(out / "config.json", json.dumps(gpt2_config(model), indent=2) + "\n")
    meta = {"format": "pt"}
    atomic_write(out / "model.safetensors", lambda t: save_file(gpt2_state_dict(model), str(t), metadata=meta))
    if tokenizer_file is not None:
        atomic_write(out / "char_tokenizer.json", lambda t: shutil.copyfile(tokenizer_file, t))
    return out


def check_target(out: Path, force: bool) -> Path:
    output_path(out, folder=True)
    if (out / "trainer_state.pt").exists() or (out / "tokenizer.json").exists():
        raise UserError(f"{str(out)!r} is a tinyformer run folder; export into a new folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{str(out)!r} is not empty; give a new folder, or --force to overwrite what is there")
    return out
