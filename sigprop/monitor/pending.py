"""A monitor whose model comes later: what a training framework's callback holds between its construction (where the
user's settings are checked, before any training) and the framework's start (where the model and the framework's
reporters are known). Both callbacks of :mod:`sigprop.integrations` are one of these around their framework's hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from .monitor import Monitor, check_every, check_log_dir
from .point import TrackPoint
from .reporters import Reporter

__all__ = ["PendingMonitor", "HoldsPendingMonitor"]


class PendingMonitor:
    """:class:`~sigprop.monitor.monitor.Monitor`'s settings, checked now; the monitor itself made by :meth:`start`.

    Args:
        probe_batch: the fixed batch measured at every point (as for the monitor).
        every: steps between points (>= 1).
        loss_fn: ``loss_fn(model, batch) -> scalar tensor``, or None for the model's own loss.
        log_dir: a folder for the track files, or None.
        seed: seeds the probe's forked generator.
        theory: whether to add the theory's profile at the first point.

    Raises:
        ValueError: ``every`` not a positive integer, a ``log_dir`` that cannot be written.

    Example:
        >>> pending = PendingMonitor({"inputs": None}, every=10)
        >>> pending.history, pending.step(0)
        ([], None)
    """

    def __init__(self, probe_batch, every: int = 100, loss_fn: Callable | None = None, log_dir=None, *,
                 seed: int = 0, theory: bool = True):
        self.probe_batch = probe_batch
        self.every = check_every(every)
        self.loss_fn = loss_fn
        self.log_dir = check_log_dir(log_dir)
        self.seed = seed
        self.theory = theory
        self.monitor: Monitor | None = None

    @property
    def history(self) -> list[TrackPoint]:
        """The points so far (empty before :meth:`start`)."""
        return [] if self.monitor is None else self.monitor.history

    def start(self, model: nn.Module, reporters: Callable[[int | None], Sequence[Reporter]], step: int = 0) -> Monitor:
        """The monitor of ``model`` (made once; a probe batch the model cannot take is a ``ValueError`` here).

        Args:
            model: the model the framework trains.
            reporters: ``reporters(resume_step)`` makes where the points go, on the process of rank 0 only (a
                reporter's side effects, e.g. a new track file, stay off the other ranks); ``resume_step``: the step a
                resumed run starts from, None for a new run.
            step: the framework's optimiser steps so far (> 0: a resumed run, whose earlier points in the track file
                are kept and stay the alerts' reference, and whose theory is not recomputed from trained weights).

        Returns:
            The monitor.
        """
        if self.monitor is None:
            from .monitor import _rank
            from .track_file import TrackFile

            made = list(reporters(step if step > 0 else None)) if _rank() == 0 else []
            history = [p for r in made if isinstance(r, TrackFile) for p in r.kept]
            self.monitor = Monitor(model, self.probe_batch, self.every, self.loss_fn, seed=self.seed,
                                   reporters=made, history=history, theory=self.theory and step == 0)
        return self.monitor

    def step(self, step: int) -> TrackPoint | None:
        """:meth:`Monitor.step` once started; None before."""
        return None if self.monitor is None else self.monitor.step(step)

    def close(self) -> None:
        """Close the monitor's reporters, if it was started."""
        if self.monitor is not None:
            self.monitor.close()


class HoldsPendingMonitor:
    """What a framework's callback holds: a :class:`PendingMonitor` made from the callback's arguments (checked at
    once), and the monitor and its points once the framework has started it.

    Args: as :class:`PendingMonitor`'s.

    Example:
        >>> holder = HoldsPendingMonitor({"inputs": None}, every=10)
        >>> holder.monitor, holder.history
        (None, [])
    """

    def __init__(self, probe_batch, every: int = 100, loss_fn: Callable | None = None, log_dir=None, *,
                 seed: int = 0, theory: bool = True):
        self.pending = PendingMonitor(probe_batch, every, loss_fn, log_dir, seed=seed, theory=theory)

    @property
    def monitor(self) -> Monitor | None:
        """The monitor (None before the framework starts it)."""
        return self.pending.monitor

    @property
    def history(self) -> list[TrackPoint]:
        """The points so far (empty before the framework starts the monitor)."""
        return self.pending.history
