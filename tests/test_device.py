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
