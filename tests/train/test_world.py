"""The process's world: the device a training run takes, checked without a GPU by standing in for torch.cuda."""

from __future__ import annotations

import pytest
import torch

from sigprop.train.distributed import join_world


@pytest.fixture
def one_gpu(monkeypatch):
    """torch.cuda as a machine with one GPU would answer; ``set_device`` refuses a device without an index, as
    torch 2.11 does."""
    chosen = []

    def set_device(device):
        if isinstance(device, torch.device) and device.index is None:
            raise ValueError("Expected a torch.device with a specified index or an integer, but got:cuda")
        chosen.append(device)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    return chosen


def test_a_bare_cuda_device_becomes_gpu_zero(one_gpu):
    world = join_world("cuda")
    assert world.device == torch.device("cuda", 0) and one_gpu == [torch.device("cuda", 0)]
    assert world.size == 1 and world.rank == 0


def test_a_gpu_the_machine_lacks_is_refused(one_gpu):
    with pytest.raises(ValueError, match="has 1 GPU"):
        join_world("cuda:1")
    assert one_gpu == []
