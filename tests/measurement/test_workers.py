"""Seeds measured on several devices, one process each: the same profile as one process, errors reported by
device. Run on the CPU with two processes (``cpu,cpu``); the CUDA path differs only in the device string."""

import dataclasses
import signal

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

@pytest.mark.long
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

@pytest.mark.long
def test_a_failing_process_stops_the_run_with_its_error():
    batch = token_batch(SMALL, batch_size=2, synthetic=True)
    bad = dataclasses.replace(batch, inputs=batch.inputs + SMALL.vocab_size)  # token ids beyond the embedding
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


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (read from /proc)."""
    import os

    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its parent's wait counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.long
@pytest.mark.parametrize("sig,status,said", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted"),
                                             (signal.SIGKILL, -9, None)])
def test_stopping_a_multi_device_measurement_leaves_no_process_behind(sig, status, said):
    """``sigprop measure --device cpu,cpu`` stopped while its two worker processes measure: SIGTERM and SIGINT end it
    with a one-line message and its status after the workers are stopped; after SIGKILL (no cleanup possible) the
    workers notice their parent is gone and exit. Either way no process of the run is left."""
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "sigprop", "measure", "--set", "n_layers=8", "--set", "d_model=64",
            "--set", "n_heads=2", "--set", "vocab_size=300", "--set", "seq_len=64", "--set", "max_len=64",
            "--synthetic", "--seeds", "400", "--batch-size", "4", "--device", "cpu,cpu"]
    # SIGINT at its default in the child, as for a command typed at a terminal: a shell starts a background job
    # (``nohup pytest &``) with SIGINT ignored, which its children inherit and rightly keep.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline, workers = time.time() + 120, set()
    while time.time() < deadline and len(workers) < 2:  # the two workers (the resource tracker may be a third)
        workers = _children(proc.pid)
        time.sleep(0.2)
    assert len(workers) >= 2, "the workers did not start"
    time.sleep(3.0)  # measuring
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    if said is not None:
        assert f"error: {said}" in err and "Traceback" not in err, err
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    assert not [p for p in workers if _alive(p)], "processes left behind"
