"""How the benchmarks and the studies time a call and read its peak memory, so that they measure alike.

Time: wall seconds of one call, CUDA synchronized before and after (its kernels run asynchronously).
Peak memory above a baseline: on CUDA the allocator's peak after a reset; on a CPU this process's peak resident
set size (Linux `VmHWM` in /proc/self/status, which starts afresh at exec, where `ru_maxrss` would carry the
parent's peak across it, and which `reset_peak` restarts from the current size).

A bottom-layer module: `bench/` and `experiments/` both measure through it, and it imports nothing of theirs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import torch


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds `fn()` takes on `device`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def status_kib(field: str) -> int:
    """A memory line of /proc/self/status (VmRSS: resident now, VmHWM: its peak), in KiB."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def reset_peak(device: torch.device) -> int:
    """Start a new peak here -> the bytes held now (the baseline a peak is measured above)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current VmRSS (Linux >= 4.0)
    return status_kib("VmRSS") * 1024


def peak_bytes(device: torch.device) -> int:
    """The peak since the last `reset_peak` (on a CPU: since exec, when there was none)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return status_kib("VmHWM") * 1024


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB: VmHWM on Linux, elsewhere `ru_maxrss` (which a child
    inherits from its parent, so there it can hide the growth a fresh process is started to measure)."""
    try:
        return status_kib("VmHWM") / 1024
    except (OSError, AttributeError):  # no /proc (macOS), or no such line
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
