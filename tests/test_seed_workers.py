"""Seeds measured on several devices, one process each: the same profile as one process, errors reported by
device. Run on the CPU with two processes (``cpu,cpu``); the CUDA path differs only in the device string."""

import numpy as np
import pytest
import torch

from sigprop.measurement.seeds import measure_seeds
from sigprop.measurement.workers import _check_alive, seeds_for_devices
from sigprop.model.batches import token_batch
from sigprop.model.config import TransformerConfig

SMALL = TransformerConfig(n_layers=3, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16)

def test_round_robin_shares():
    assert seeds_for_devices([5, 6, 7, 8, 9], 2) == [[5, 7, 9], [6, 8]]
    assert seeds_for_devices([0], 3) == [[0], [], []]
    with pytest.raises(ValueError):
        seeds_for_devices([0], 0)

def _table(profile):
    return np.array([[getattr(r, q) for q in ("fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr")]
                     for r in profile.rows])

def test_two_processes_give_the_one_process_profile():
    batch = token_batch(SMALL, batch_size=2, synthetic=True)
    ticks = []
    parallel = measure_seeds(SMALL, batch, seeds=5, seed0=3, device="cpu,cpu", progress=ticks.append)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads // 2))  # each process's share of the threads: the same arithmetic
    try:
        serial = measure_seeds(SMALL, batch, seeds=5, seed0=3)
    finally:
        torch.set_num_threads(threads)
    assert ticks == [1] * 5
    assert [(r.layer, r.site) for r in parallel.rows] == [(r.layer, r.site) for r in serial.rows]
    np.testing.assert_array_equal(_table(parallel), _table(serial))
    assert parallel.meta["seeds"] == [3, 4, 5, 6, 7] and parallel.meta["devices"] == ["cpu", "cpu"]
    assert parallel.meta["stderr"] == serial.meta["stderr"]

def test_a_failing_process_stops_the_run_with_its_error():
    batch = token_batch(SMALL, batch_size=2, synthetic=True)
    bad = {**batch, "inputs": batch["inputs"] + SMALL.vocab_size}  # token ids beyond the embedding
    with pytest.raises(RuntimeError, match=r"measuring on cpu failed: IndexError"):
        measure_seeds(SMALL, bad, seeds=2, device="cpu,cpu")

class _Dead:
    exitcode = -9

class _EmptyQueue:
    def get(self, timeout):
        import queue

        raise queue.Empty

def test_a_process_that_dies_silently_is_reported_by_device():
    with pytest.raises(RuntimeError, match=r"on cuda:1 stopped \(killed by signal 9; out of memory\?\) before "
                                           r"seeds 2, 4"):
        _check_alive([(_Dead(), "cuda:1", {2, 4})], {}, _EmptyQueue(), None)
    _check_alive([(_Dead(), "cuda:1", {2})], {2: object()}, _EmptyQueue(), None)  # its seeds arrived: fine
