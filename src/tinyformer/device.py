"""Where tensors live and in which precision: the only module that decides it.

Device preference is cuda > mps > cpu. Precision is `train.precision`:
"auto" picks bf16 autocast where the hardware multiplies bf16 natively (a CUDA
GPU that supports it; a CPU with AVX-512 BF16 or AMX, read from its feature
flags, never guessed) and fp32 elsewhere. "fp16" is autocast with a gradient
scaler, for GPUs without bf16. Weights and optimizer state stay fp32 in every
mode: autocast only changes the dtype matmuls and convolutions run in.

Precision "auto" is a rule, not a measurement, on purpose: bf16 changes the
numbers a run produces, so it must not flip with the load on a shared machine.
The rule never picks bf16 without native support, nor fp16 on a CPU. For
developers, `TINYFORMER_CPU_BF16=1` (or 0) overrides the CPU-flag detection,
so a machine without native bf16 can run as if it had it (slowly): the test
suite uses it to take the bf16 path on every CPU.

The attention backend ("auto", the default `model.backend`) only changes
speed, so it is measured: `choose_backend` times each backend on the run's
real shapes and dtype and caches the winner (`tinyformer.choices`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import platform
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from tinyformer.errors import UserError

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names of native bf16 matmul instructions
CPU_BF16_ENV = "TINYFORMER_CPU_BF16"  # developers: "1" / "0" overrides the CPU-flag detection of native bf16


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
    """Per-device speed settings: TF32 matmuls and convolutions on CUDA (Ampere and later); on a CPU, freed
    tensor memory kept in the process for the next step (`keep_freed_memory`)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    elif device.type == "cpu":
        keep_freed_memory()


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # the most glibc accepts on 64-bit: larger blocks still get their own mapping
TRIM_THRESHOLD = 1 << 30  # free memory at the top of the heap that stays in the process
FREED_MEMORY_KEPT = False  # whether `keep_freed_memory` has applied in this process (the benchmarks report it)


def keep_freed_memory() -> bool:
    """Make glibc keep the memory of freed tensors for the next ones -> whether it applied (glibc only).

    A training step frees and allocates the same activation buffers, megabytes each, every step. By default
    glibc gives such blocks back to the OS (as their own mappings, or by trimming the heap's top) and the
    next step's tensors fault them in again, page by page: ~5,000 page faults a step on the seed MiniGPT
    recipe. With the mapping threshold pinned at 32 MiB and trimming only beyond 1 GiB, they stay in the
    process: 4x fewer faults, and a step 2-3% faster with no more peak memory (side by side on a 2-core Xeon
    with AMX, bf16). The order matters: pinning the trim threshold alone would switch off glibc's adaptive
    mapping threshold and leave it at 128 KiB (2x slower steps), so that is never done without the first."""
    global FREED_MEMORY_KEPT
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # no C library by that call (Windows), or no mallopt (macOS)
        return False
    applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    FREED_MEMORY_KEPT = FREED_MEMORY_KEPT or applied
    return applied


def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bf16 natively (so bf16 autocast is a speed lever, not an emulation)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        forced = os.environ.get(CPU_BF16_ENV, "")
        if forced:
            if forced not in ("0", "1"):
                raise UserError(f"{CPU_BF16_ENV}={forced!r} must be 1 (run as if the CPU had native bf16) or 0")
            return forced == "1"
        return any(flag in cpu_flags() for flag in CPU_BF16_FLAGS)
    return False


def resolve_precision(device: torch.device, name: str = "auto") -> str:
    """`train.precision` on `device` -> "fp32", "bf16" or "fp16" ("auto": bf16 where native, else fp32).
    `name` is one of `config.PRECISIONS`, checked where it is read (TrainConfig, bench's --precision)."""
    if name == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return name


def describe_precision(device: torch.device, name: str) -> str:
    """The line a run prints at start: what `name` resolved to on `device`, and why."""
    chosen = resolve_precision(device, name)
    what = "fp32" if chosen == "fp32" else f"{chosen} autocast (fp32 weights)"
    if name == "auto":
        why = "native bf16" if chosen == "bf16" else f"no native bf16 on this {device.type}"
        return f"{what}, auto: {why}"
    if chosen == "bf16" and not native_bf16(device):
        return f"{what}, emulated: this {device.type} has no native bf16, so it is slower than fp32"
    return what


def autocast(device: torch.device, precision: str = "fp32") -> contextlib.AbstractContextManager:
    """Autocast to a resolved `precision` ("bf16", "fp16"); a no-op for "fp32"."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


@dataclass
class BackendChoice:
    """What `model.backend=auto` resolved to, and the evidence: recorded in the run folder, shown by `info`."""

    name: str  # the backend used: "sdpa" or "manual"
    tokens_per_s: dict[str, float] = field(default_factory=dict)  # each candidate on the timed work
    seconds: float = 0.0  # spent measuring (0 when it came from the cache or was given)
    source: str = "measured"  # "measured", "cache" or "config" (asked for: nothing measured)
    work: str = "forward + backward"  # what was timed: "forward + backward" or "evaluation forward"

    @classmethod
    def from_record(cls, record) -> BackendChoice | None:
        """The choice recorded in trainer_state.pt (the fields this version knows); None for no usable record."""
        if not (isinstance(record, dict) and record.get("name") in ("sdpa", "manual")):
            return None
        kept = {k: v for k, v in record.items() if k in {f.name for f in dataclasses.fields(cls)}}
        if not isinstance(kept.get("tokens_per_s", {}), dict):
            return None
        return cls(**kept)

    def line(self, resumed: bool = False) -> str:
        """e.g. "attention: manual 51k tokens/s over sdpa 33k (forward + backward), measured in 1.8 s"."""
        if self.source == "config":
            return f"attention: {self.name} (model.backend)"
        others = sorted((r, n) for n, r in self.tokens_per_s.items() if n != self.name)
        rates = f"{self.name} {_k(self.tokens_per_s.get(self.name, 0))} tokens/s"
        rates += "".join(f" over {n} {_k(r)}" for r, n in reversed(others)) + f" ({self.work})"
        how = {"measured": f"measured in {self.seconds:.1f} s", "cache": "from the cache, measured earlier here"}
        return f"attention: {rates}, {'as this run recorded it' if resumed else how.get(self.source, self.source)}"


def choose_backend(
    fields: dict,
    steps: dict[str, Callable[[], int]],
    *,
    device: torch.device | None = None,
    budget_s: float = 2.0,
    clock: Callable[[], float] = time.perf_counter,
) -> BackendChoice:
    """The fastest attention backend for `fields` (the run's shapes and dtype) on this machine.

    `steps`: backend -> one step of the real work with it (-> tokens processed). A cached decision for the
    same machine, versions, threads, CPU limits and `fields` is used as it is; otherwise each is timed
    (`tinyformer.choices.measure`) and the winner is cached (unless a candidate ran out of memory)."""
    from tinyformer import choices

    key = choices.key_of({"what": "attention backend", **fields, **_machine_key(device or torch.device("cpu"))})
    hit = choices.lookup(key, tuple(steps))
    if hit is not None:
        return BackendChoice(hit["choice"], dict(hit["rates"]), 0.0, "cache")
    rates, seconds = choices.measure(steps, budget_s=budget_s, clock=clock)
    best = max(rates, key=rates.get)
    if all(rates.values()):  # a choice made without a candidate that failed is not for keeps
        choices.remember(key, {"choice": best, "rates": rates, "fields": fields, "measured": time.time()})
    return BackendChoice(best, rates, seconds, "measured")


def _machine_key(device: torch.device) -> dict:
    """Where a measurement holds: the machine as `machine()` tells it (but the GPU it ran on, if any), tinyformer's
    version and the CPU limits."""
    from importlib import metadata

    try:
        version = metadata.version("tinyformer")
    except metadata.PackageNotFoundError:  # run from a source tree that was not installed
        version = "source"
    m = machine()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    limits = [os.environ.get(v, "") for v in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")]
    same = {"cpu": m["cpu"], "bf16": m["cpu_native_bf16"], "threads": m["torch_threads"], "torch": m["torch"]}
    return same | {"gpu": gpu, "tinyformer": version, "limits": limits}


def _k(rate: float) -> str:
    return f"{rate / 1000:,.0f}k" if rate >= 10_000 else f"{rate:,.0f}"


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    flags = _cpuinfo("flags")
    return set(flags[0].split()) if flags else set()


def _cpuinfo(key: str) -> list[str]:
    """The values of /proc/cpuinfo's lines that start with `key`, one per logical CPU ([] where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return [line.partition(":")[2].strip() for line in f if line.startswith(key)]
    except OSError:
        return []


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


def torch_threads(n: int) -> str:
    """How a machine line names torch's thread count: "1 torch thread", "2 torch threads"."""
    return f"{n} torch thread{'' if n == 1 else 's'}"


def machine() -> dict:
    """What the figures were measured on, for `bench --json`."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": _cpu_name(),
        "cpu_native_bf16": native_bf16(torch.device("cpu")),
        "gpu": gpu,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _cpu_name() -> str:
    names = _cpuinfo("model name")
    return f"{names[0]} ({len(names)} logical CPUs)" if names else platform.processor() or platform.machine()
