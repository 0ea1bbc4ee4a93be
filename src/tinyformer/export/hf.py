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
from tinyformer.files import not_in_run, output_path, staged_folder
from tinyformer.models import hf_lm
from tinyformer.models.gpt import MiniGPT
from tinyformer.runfolder import is_run


def export_hf(
    model: MiniGPT, out: str | Path, tokenizer=None, force: bool = False, run_dir: str | Path | None = None
) -> Path:
    """Write `out/config.json`, `out/model.safetensors` (GPT-2 format) and the tokenizer; returns the folder.

    A folder that holds anything is refused unless `force`; a tinyformer run folder always is, and so is any
    place in `run_dir`, the run exported. The files are written in a temp folder beside `out` and moved in
    together at the end: an interrupted export leaves nothing under `out`'s name, an earlier one stays whole.
    """
    from safetensors.torch import save_file

    eos = tokenizer.token_id("<|endoftext|>") if isinstance(tokenizer, BPETokenizer) else None
    config, tensors = hf_lm.export_hf(model, eos)  # refused here, before anything is written
    out = check_target(Path(out), force, run_dir)
    with staged_folder(out) as folder:
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        if tokenizer is not None:
            hf = tokenizer.hf if isinstance(tokenizer, BPETokenizer) else tokenizer.to_hf()
            hf.save(str(folder / "tokenizer.json"))
            tokenizer_class = json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n"
            (folder / "tokenizer_config.json").write_text(tokenizer_class, encoding="utf-8")
    return out


def check_target(out: Path, force: bool, run_dir: str | Path | None = None) -> Path:
    """The folder to export into: new, or empty, or (with `force`) one whose files of the export's names are
    replaced (a link there too, never followed; a link as the folder is replaced by it). Never a run folder,
    nor a place in the run exported (`run_dir`)."""
    output_path(out, folder=True)
    if is_run(out):
        raise UserError(f"{str(out)!r} is a tinyformer run folder; export into a new folder")
    not_in_run(out, run_dir)
    if out.is_symlink() and not force:
        raise UserError(f"{str(out)!r} is a symbolic link; give a new folder, or --force to replace the link")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{str(out)!r} is not empty; give a new folder, or --force to overwrite what is there")
    return out
