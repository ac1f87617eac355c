"""Measuring the seeds of a comparison on several devices at once: one process per device.

The seeds are independent models (each drawn on the CPU from its seed, its dropout masks from ``10_000 + seed``:
:func:`sigprop.measurement.seeded.measure_seed`), so they can be measured anywhere in any order. Seed ``seed0 + i``
goes to device ``i mod n``; each device's process measures its share and sends every per-seed profile back as soon
as it is done (the caller's progress bar moves with them); the caller averages the profiles in seed order, so the result
is the one a single process would give on the same kind of device (on the CPU: the same numbers, with the same
number of threads per model).

Processes are started with ``spawn`` (safe with CUDA, and the same on every platform), each with
``torch.get_num_threads() // n`` CPU threads (at least 1) so that the processes together use the cores one process
would. A process that fails sends its error and the run stops with it; one that dies without a word (killed, out of
memory) is noticed and reported by device. Nothing is left behind: however the caller stops (an error, Ctrl-C, a
SIGTERM the command line turns into an exception), the processes are terminated and joined; and a process whose
parent has died (SIGKILL) notices within half a second and exits, so it never holds a GPU's memory for nobody.
"""

from __future__ import annotations

import os
import queue as queue_module
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import DeviceError
from ..core.profile import Profile
from .seeded import measure_seed

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.queues import Queue

    from ..model.batch import Batch
    from ..model.config import TransformerConfig

__all__ = ["measure_on_devices", "seeds_for_devices"]

_POLL_S = 0.5


def seeds_for_devices(seeds: Sequence[int], n_devices: int) -> list[list[int]]:
    """``seeds`` dealt round-robin over ``n_devices`` (the i-th seed to device i mod n), so shares differ by at
    most one seed. ``ValueError`` for ``n_devices`` < 1."""
    if n_devices < 1:
        raise ValueError(f"n_devices must be >= 1 (got {n_devices})")
    return [list(seeds[i::n_devices]) for i in range(n_devices)]


def _exit_with_parent(parent: int) -> None:
    """Exit this process as soon as its parent is gone (re-parented: the parent was killed without cleaning up)."""
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(_POLL_S)


def _worker(config: TransformerConfig, batch: dict[str, Any], seeds: list[int], device: str, threads: int,
            out: Queue[tuple[Any, ...]], parent: int) -> None:
    """Process body: measure ``seeds`` on ``device`` and put ("seed", seed, profile) for each, or ("error", device,
    message) and stop at the first failure."""
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    try:
        torch.set_num_threads(threads)
        for s in seeds:
            out.put(("seed", s, measure_seed(config, batch, s, device)))
    except BaseException as err:  # noqa: BLE001 — reported to the parent, which raises it
        out.put(("error", device, f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}"))


def measure_on_devices(config: TransformerConfig, batch: Batch | dict, seeds: Sequence[int],
                       devices: Sequence[torch.device], progress: Callable[[int], None] | None = None) -> list[Profile]:
    """The per-seed profiles of ``seeds`` (in that order), measured by one process per entry of ``devices``
    (module docstring). ``progress(1)`` after each seed. ``DeviceError`` (a ``RuntimeError``) naming the device if a
    process fails or dies; the other processes are then stopped."""
    import torch.multiprocessing as mp

    seeds = list(seeds)
    shares = seeds_for_devices(seeds, len(devices))
    threads = max(1, torch.get_num_threads() // len(devices))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs: list[tuple[SpawnProcess, str, set[int]]] = []
    for dev, share in zip(devices, shares, strict=True):
        if share:
            p = ctx.Process(target=_worker, args=(config, batch, share, str(dev), threads, out, os.getpid()),
                            daemon=True)
            procs.append((p, str(dev), set(share)))
    results: dict[int, Profile] = {}
    try:
        for p, _, _ in procs:
            p.start()
        while len(results) < len(seeds):
            try:
                msg = out.get(timeout=_POLL_S)
            except queue_module.Empty:
                _check_alive(procs, results, out, progress)
                continue
            _take(msg, results, progress)
    finally:  # on success, on an error, on KeyboardInterrupt or a SIGTERM turned into an exception
        for p, _, _ in procs:
            if p.is_alive():
                p.terminate()
        for p, _, _ in procs:
            if p.pid is None:  # never started
                continue
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        out.close()
        out.join_thread()
    return [results[s] for s in seeds]


def _take(msg: tuple[Any, ...], results: dict[int, Profile], progress: Callable[[int], None] | None) -> None:
    if msg[0] == "error":
        raise DeviceError(f"measuring on {msg[1]} failed: {msg[2]}")
    _, seed, profile = msg
    results[seed] = profile
    if progress is not None:
        progress(1)


def _check_alive(procs: list[tuple[SpawnProcess, str, set[int]]], results: dict[int, Profile], out: Queue[tuple[Any,
                 ...]],
                 progress: Callable[[int], None] | None) -> None:
    """Raise if a process has exited with seeds of its share still missing (after draining what it sent)."""
    for p, dev, share in procs:
        if p.exitcode is None or share <= results.keys():
            continue
        try:  # its last messages may still be in the pipe
            while not share <= results.keys():
                _take(out.get(timeout=2 * _POLL_S), results, progress)
        except queue_module.Empty:
            missing = sorted(share - results.keys())
            code = p.exitcode
            why = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            raise DeviceError(f"the process measuring on {dev} stopped ({why}; out of memory?) before seeds "
                               f"{_span(missing)}") from None


def _span(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds[:8])) + (f" … ({len(seeds)} in all)" if len(seeds) > 8 else "")
