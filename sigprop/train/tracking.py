"""Signal propagation while ``sigprop train`` trains: the run's :class:`~sigprop.monitor.monitor.Monitor`.

Every ``track_every`` steps, every layer's forward variance, token correlation, gradient variance and gradient
correlation on one fixed probe batch, their diagnosis, and every layer's normalised attention entropy; at step 0 the
theory's prediction for that very model and batch beside them. The monitor's probe runs in a forked random state
seeded from the run's seed and computes no parameter gradient (:mod:`sigprop.monitor.probe`), so it cannot change the
training. Files, in the run directory: ``track.jsonl`` (a line per track point), ``track-prediction.json`` (the
step-0 theory) (:mod:`sigprop.monitor.track_file`); a resumed run keeps the lines up to its checkpoint.
"""

from __future__ import annotations

from ..monitor.monitor import Monitor
from ..monitor.point import QUANTITIES
from ..monitor.track_file import PREDICTION_FILE, TRACK_FILE, TrackFile, read_track

__all__ = ["run_monitor", "TRACK_FILE", "PREDICTION_FILE", "read_track", "QUANTITIES"]


def run_monitor(model, probe_batch: dict, run_dir, seed: int, every: int, resume_step: int | None = None) -> Monitor:
    """The monitor of a training run: ``probe_batch`` measured every ``every`` steps into ``run_dir``'s track file,
    the probe's generator seeded from the run's ``seed``.

    Args:
        model: the run's model (not its DDP wrapper).
        probe_batch: the fixed batch (:meth:`~sigprop.train.data.TrainData.probe_batch`), on the CPU.
        run_dir: the run directory.
        seed: the run's seed.
        every: steps between points.
        resume_step: the checkpoint's step of a resumed run: the lines written after it are dropped, the rest are
            the monitor's history; ``None`` for a new run (an empty file).

    Returns:
        The monitor; the caller asks it for the theory (:meth:`~sigprop.monitor.monitor.Monitor.predict`) and calls
        its :meth:`~sigprop.monitor.monitor.Monitor.step` after every optimiser step.
    """
    track_file = TrackFile(run_dir, resume_step)
    return Monitor(model, probe_batch, every=every, seed=seed, reporters=[track_file], history=track_file.kept)
