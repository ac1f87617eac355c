"""Where a monitor's points go: a :class:`Reporter` receives the theory once and every point as it is measured.

The reporters a :class:`~sigprop.monitor.monitor.Monitor` uses by default (:func:`default_reporters`): the track file
under ``log_dir`` (:mod:`sigprop.monitor.track_file`), TensorBoard scalars under ``log_dir`` when TensorBoard is
installed (:mod:`sigprop.monitor.tensorboard_scalars`), and the active Weights & Biases run when ``wandb`` is
installed and a run is active (:mod:`sigprop.monitor.wandb_run`). A training framework's callback passes its own
(its logger) instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Protocol

from .point import Columns, TrackPoint

__all__ = ["Reporter", "default_reporters", "installed"]


class Reporter(Protocol):
    """Receives a monitor's output: ``theory(columns, step)`` once (the theory's columns at the first point),
    ``point(point)`` at every point, ``close()`` at the end."""

    def theory(self, columns: Columns, step: int) -> None: ...

    def point(self, point: TrackPoint) -> None: ...

    def close(self) -> None: ...


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (looked up without importing it)."""
    return importlib.util.find_spec(module) is not None


def default_reporters(log_dir: Path | None) -> list[Reporter]:
    """The track file and TensorBoard scalars under ``log_dir`` (when given; TensorBoard when installed), and the
    active W&B run (when ``wandb`` is installed: :class:`~sigprop.monitor.wandb_run.WandbRun` logs to the run active
    at each point, if any)."""
    out: list[Reporter] = []
    if log_dir is not None:
        from .track_file import TrackFile

        out.append(TrackFile(log_dir))
        if installed("tensorboard"):
            from .tensorboard_scalars import TensorBoardScalars

            out.append(TensorBoardScalars(log_dir))
    if installed("wandb"):
        from .wandb_run import WandbRun

        out.append(WandbRun())
    return out
