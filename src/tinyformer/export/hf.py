"""Export a MiniGPT run to the Hugging Face format, so the ecosystem can load it: GPT-2, or Llama / Qwen2.

MiniGPT with learned positions *is* GPT-2's architecture (Radford et al., 2019); `tinyformer.models.gpt2`
holds the name table and the differences (Conv1D weights, QKV bias, tied head, which GELU). A Llama-style run
(the `gpt_llama` preset: RMSNorm, SwiGLU, rotary positions) is written as a `LlamaForCausalLM`, or a
`Qwen2ForCausalLM` with a q/k/v bias (`tinyformer.models.llama`). A run imported from either
(`model.init_from=gpt2`, or a Llama folder) exports back to the same tensors.

    tinyformer export hf runs/<run> out/
    transformers.AutoModelForCausalLM.from_pretrained("out/")

The folder gets `config.json` and `model.safetensors` (what `from_pretrained` reads) and the run's
tokenizer as `tokenizer.json` with a `tokenizer_config.json`, what `AutoTokenizer.from_pretrained` reads: a
byte-level BPE as it is, a character vocabulary as a word-level vocabulary of single characters
(`CharTokenizer.to_hf`), which encodes and decodes every text as tinyformer does. The folder also works as
`model.init_from` for a new run. `transformers` is not needed to export.
"""

from __future__ import annotations

import json
from pathlib import Path

from tinyformer.data.bpe import BPETokenizer
from tinyformer.errors import UserError
from tinyformer.files import atomic_write, make_dir, output_path, write_text
from tinyformer.models import hf_lm
from tinyformer.models.gpt import MiniGPT
from tinyformer.runfolder import is_run


def export_hf(model: MiniGPT, out: str | Path, tokenizer=None, force: bool = False) -> Path:
    """Write `out/config.json`, `out/model.safetensors` (GPT-2 format) and the tokenizer; returns the folder.

    A folder that holds anything is refused unless `force`; a tinyformer run folder always is.
    """
    from safetensors.torch import save_file

    eos = tokenizer.token_id("<|endoftext|>") if isinstance(tokenizer, BPETokenizer) else None
    config, tensors = hf_lm.export_hf(model, eos)  # refused here, before anything is written
    out = check_target(Path(out), force)
    make_dir(out)
    write_text(out / "config.json", json.dumps(config, indent=2) + "\n")
    meta = {"format": "pt"}
    atomic_write(out / "model.safetensors", lambda t: save_file(tensors, str(t), metadata=meta))
    if tokenizer is not None:
        hf = tokenizer.hf if isinstance(tokenizer, BPETokenizer) else tokenizer.to_hf()
        atomic_write(out / "tokenizer.json", lambda t: hf.save(str(t)))
        write_text(out / "tokenizer_config.json", json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n")
    return out


def check_target(out: Path, force: bool) -> Path:
    output_path(out, folder=True)
    if is_run(out):
        raise UserError(f"{str(out)!r} is a tinyformer run folder; export into a new folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{str(out)!r} is not empty; give a new folder, or --force to overwrite what is there")
    return out
