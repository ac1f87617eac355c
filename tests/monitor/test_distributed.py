"""``sigprop.Monitor`` under DistributedDataParallel (two CPU processes, gloo): the process of rank 0 probes and
reports, the other does nothing, and the probe enters no collective operation, so training goes on in step."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import sigprop

from .nanogpt import NanoGPT, nanogpt_batch, nanogpt_loss


def _worker(rank: int, world: int, init: str, out: str):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        net = torch.nn.parallel.DistributedDataParallel(NanoGPT(n_layer=2, dropout=0.0))
        optimizer = torch.optim.SGD(net.parameters(), lr=1e-2)
        monitor = sigprop.Monitor(net, nanogpt_batch(99), every=2, loss_fn=nanogpt_loss)
        steps = [monitor.step(0)]
        for step in range(1, 5):
            nanogpt_loss(net, nanogpt_batch(10 * step + rank)).backward()
            optimizer.step()
            optimizer.zero_grad()
            steps.append(monitor.step(step))
        recorded = [p.step for p in steps if p is not None]
        weights = float(sum(p.double().sum() for p in net.parameters()))
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump({"recorded": recorded, "active": monitor.active, "weights": weights}, f)
    finally:
        dist.destroy_process_group()


@pytest.mark.long
def test_only_rank_0_probes_and_the_ranks_stay_in_step(tmp_path):
    mp.spawn(_worker, args=(2, f"file://{tmp_path / 'init'}", str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["recorded"] == [0, 2, 4] and ranks[0]["active"]
    assert ranks[1]["recorded"] == [] and not ranks[1]["active"]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP's averaged gradients kept both replicas equal
