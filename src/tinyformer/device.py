"""Where tensors live and in which precision: the only module that decides it.

Device preference is cuda > mps > cpu. Mixed precision is bf16 autocast on
CUDA only; CPU and MPS train in fp32.
"""

from __future__ import annotations

import contextlib
import platform
import random
from collections.abc import Iterator

import torch
from torch import nn

from tinyformer.errors import UserError

DEVICES = ("auto", "cpu", "cuda", "mps")


def pick_device(name: str = "auto") -> torch.device:
    """Resolve "auto" to the best available device; check an explicit choice exists."""
    if name not in DEVICES:
        raise UserError(f"device={name!r} is not one of {', '.join(DEVICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device='cuda' was asked for but no CUDA GPU is visible")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("device='mps' was asked for but MPS is not available")
    return torch.device(name)


def configure(device: torch.device) -> None:
    """Per-device speed settings: TF32 matmuls and convolutions on CUDA (Ampere and later); nothing on CPU."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; a no-op elsewhere (CPU trains in fp32)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seed_everything(seed: int) -> None:
    """Seed Python's and torch's global generators (all devices)."""
    random.seed(seed)
    torch.manual_seed(seed)


def model_device(model: nn.Module) -> torch.device:
    """Where `model`'s parameters live (tensors made for it go there)."""
    return next(model.parameters()).device


@contextlib.contextmanager
def inference(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode and no autograd inside; the model's training flag is restored afterwards, even on error."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device`: free GPU memory, or MemAvailable on Linux; None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_memory(need: int, what: str, device: torch.device) -> None:
    """Refuse up front, with the estimate, a request that cannot fit (rather than an allocator traceback)."""
    have = available_memory(device)
    if have is not None and need > have:
        raise UserError(f"{what} needs at least {gib(need)} of memory, more than the {gib(have)} free on {device.type}")


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**28 else f"{n / 2**20:,.0f} MiB"


def machine() -> dict:
    """What the figures were measured on, for `bench --json`."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": _cpu_name(),
        "gpu": gpu,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return f"{names[0]} ({len(names)} logical CPUs)"
    except (OSError, IndexError):
        return platform.processor() or platform.machine()
