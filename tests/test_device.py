import subprocess
import sys

import pytest
import torch

from tinyformer.device import pick_device, torch_threads
from tinyformer.errors import UserError


def test_auto_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device("auto").type == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("auto").type == "cuda"


def test_unknown_or_absent_devices_are_user_errors(monkeypatch):
    with pytest.raises(UserError, match="device='tpu' is not one of auto, cpu, cuda, mps"):
        pick_device("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="no CUDA GPU"):
        pick_device("cuda")


def test_machine_lines_count_one_thread_in_the_singular():
    assert [torch_threads(n) for n in (1, 2)] == ["1 torch thread", "2 torch threads"]


# Twelve 8 MiB tensors written and freed, as a training step's activations are: how much of that memory the
# process still holds for the next step (glibc's mallinfo2: free bytes kept in the heap). By default glibc
# maps blocks this large on their own and unmaps them when freed, so it holds none of it.
KEPT = """
import ctypes, torch
from tinyformer.device import keep_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc = ctypes.CDLL(None)
applied = keep_freed_memory() and hasattr(libc, "mallinfo2")
held = [torch.empty(2 << 20).fill_(1.0) for _ in range(12)]
del held
libc.mallinfo2.restype = MallInfo2
print(applied, libc.mallinfo2().fordblks if applied else 0)
"""


def test_freed_tensor_memory_stays_in_the_process_for_the_next_step():
    out = subprocess.run([sys.executable, "-c", KEPT], capture_output=True, text=True, check=True).stdout
    applied, kept = out.split()
    if applied != "True":
        pytest.skip("this C library has no mallopt or mallinfo2 (not glibc 2.33+)")
    assert int(kept) >= 12 * (8 << 20), f"{int(kept) >> 20} MiB of the 96 MiB just freed is still held for reuse"
