"""Several processes through PyTorch's own engine: ``torchrun --nproc-per-node N -m sigprop train …`` sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous variables; :func:`join_world` reads them and joins the process group
(gloo on a CPU, nccl on GPUs, one GPU per process: ``cuda:LOCAL_RANK``). A single process is a world of one, and
every collective below is then a no-op."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

__all__ = ["World", "join_world", "leave_world", "all_sum"]


@dataclass(frozen=True)
class World:
    """This process's place: ``rank`` of ``size`` processes, its ``device``."""

    rank: int
    size: int
    device: torch.device

    @property
    def main(self) -> bool:
        """Whether this process writes the run directory and reports progress (rank 0)."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"the environment variable {name} must be an integer (got {value!r})") from None


def join_world(device: str | None = None) -> World:
    """This process's :class:`World`: from torchrun's environment when ``WORLD_SIZE`` > 1 (joining the process
    group), else a world of one on ``device`` (default: cpu). Under torchrun ``device`` "cuda" means this process's
    GPU ``cuda:LOCAL_RANK``; "cpu" uses gloo."""
    size, rank, local = _env_int("WORLD_SIZE", 1), _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    name = "cpu" if device is None else str(device).strip()
    if not name:
        raise ValueError("--device needs a device name such as cpu or cuda (got '')")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device: unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: CUDA is not available on this machine")
        # an index always: torch.cuda.set_device refuses a bare "cuda" (torch 2.11)
        dev = torch.device("cuda", local if size > 1 else (dev.index if dev.index is not None else 0))
        if (dev.index or 0) >= torch.cuda.device_count():
            raise ValueError(f"--device {dev}: this machine has {torch.cuda.device_count()} GPU(s)")
        torch.cuda.set_device(dev)
    if size > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=size)
    return World(rank, size, dev)


def leave_world(world: World) -> None:
    """Leave the process group (a world of one has none), after every process has arrived here: no process tears
    its connections down while another still works (rank 0 writes the figures), and an error that stopped one
    process only (the barrier fails then) does not keep the others from leaving."""
    if world.size > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            with contextlib.suppress(RuntimeError):
                dist.barrier()
            dist.destroy_process_group()


def all_sum(world: World, *values: torch.Tensor) -> torch.Tensor:
    """The sums over every process of ``values`` (scalars), as one float64 tensor on this process's device: one
    collective for all of them."""
    flat = torch.stack([v.detach().reshape(()).to(world.device, torch.float64) for v in values])
    if world.size > 1:
        import torch.distributed as dist

        dist.all_reduce(flat)
    return flat
