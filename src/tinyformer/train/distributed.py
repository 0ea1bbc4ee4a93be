"""Data-parallel training across processes with PyTorch's own engine (DistributedDataParallel).

    torchrun --nproc_per_node=N -m tinyformer train gpt ...

torchrun starts N copies of the command and tells each its RANK, WORLD_SIZE, LOCAL_RANK and the
rendezvous address (MASTER_ADDR, MASTER_PORT). Every rank holds the whole model; each step every rank
draws the same *global* batch of N x batch_size samples from the shared, seeded batch stream and keeps
its own slice of rows, so N ranks see exactly the samples one process sees with batch N x batch_size.
DDP averages the gradients (one all-reduce per step, overlapped with backward); gradient accumulation
skips it on all but the last micro-batch (`no_sync`). Rank 0 alone prints, logs, plots and writes
checkpoints; every rank can resume from them, and a checkpoint is the same file with or without DDP.

Backends: gloo on CPU, NCCL on CUDA. `train.dist_timeout` bounds every wait for the other ranks
(joining, and each collective after that); a rank that cannot join within it stops with a one-line
error instead of waiting forever.

Dropout: every rank seeds its generator alike, so with dropout > 0 rank r's row i gets the mask a single
process would give row i, not row r * batch_size + i: the same distribution, not the same numbers. With
dropout 0 the N-process run equals the one-process run up to the order of float sums (a test checks it).
For tasks that average over a variable number of tokens per row (padded sequences), averaging the
per-rank means differs slightly from the global mean.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from tinyformer.device import pick_device
from tinyformer.errors import UserError


@dataclass(frozen=True)
class World:
    rank: int = 0  # this process, 0 .. size-1
    size: int = 1  # processes in the job
    local_rank: int = 0  # this process on its machine (its GPU index)

    @property
    def main(self) -> bool:
        """Rank 0: the one process that prints, logs and writes files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def world_from_env() -> World:
    """The World torchrun describes in the environment; a plain process is World(0, 1, 0)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


def init(device_kind: str, timeout_s: float) -> World:
    """Join the process group torchrun set up (no-op for one process) -> this process's World."""
    world = world_from_env()
    if not world.distributed or dist.is_initialized():
        return world
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if backend == "nccl":
        if world.local_rank >= torch.cuda.device_count():
            raise UserError(f"local rank {world.local_rank} has no GPU: {torch.cuda.device_count()} visible")
        torch.cuda.set_device(world.local_rank)
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        dist.barrier()  # every rank is here: the world is complete
    except Exception as e:  # store timeouts and refused connections surface as several exception types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"rank {world.rank} of {world.size} could not join the process group at {where} within "
            f"{timeout_s:g} s (train.dist_timeout): {first[:200]}"
        ) from None
    return world


def rank_device(device: torch.device, world: World) -> torch.device:
    """This rank's device: its own GPU (cuda:local_rank) under torchrun on CUDA, else `device` itself."""
    if device.type == "cuda" and world.distributed:
        return torch.device("cuda", world.local_rank)
    return device


def train_device(name: str, world: World) -> torch.device:
    """Where this process trains: `train.device` resolved (auto: cuda > mps > cpu), then its own GPU under torchrun."""
    return rank_device(pick_device(name), world)


def data_parallel(model: torch.nn.Module, device: torch.device, world: World):
    """`model` wrapped in DistributedDataParallel for this rank's device (None for one process): gradients are
    averaged over the ranks in each backward."""
    if not world.distributed:
        return None
    from torch.nn.parallel import DistributedDataParallel

    ids = [world.local_rank] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, **no_buffer_sync())


def no_buffer_sync() -> dict:
    """DDP's option for "do not broadcast buffers before each forward" (every rank builds the same masks and
    RoPE tables): `forward_sync_buffers=False` where torch has it (it deprecates `broadcast_buffers`)."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shard(batch: Any, world: World) -> Any:
    """This rank's rows of a global batch: rows [rank * b, (rank + 1) * b) of every tensor (b = rows / size)."""
    if not world.distributed:
        return batch
    if isinstance(batch, torch.Tensor):
        b = batch.size(0) // world.size
        return batch[world.rank * b : (world.rank + 1) * b]
    if isinstance(batch, (tuple, list)):
        return type(batch)(shard(x, world) for x in batch)
    if isinstance(batch, dict):
        return {k: shard(v, world) for k, v in batch.items()}
    return batch


def all_sum(values: list[float], world: World) -> list[float]:
    """Sum a few numbers over all ranks (one small all-reduce); the values themselves for one process."""
    if not world.distributed:
        return values
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    t = torch.tensor(values, dtype=torch.float64, device=device)  # NCCL reduces GPU tensors only
    dist.all_reduce(t)
    return t.tolist()


def broadcast(value: Any, world: World) -> Any:
    """Rank 0's `value` on every rank (e.g. the name of a new run folder)."""
    if not world.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()
