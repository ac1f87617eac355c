"""TensorBoard scalars of a monitor's points: ``sigprop/fwd_var/layer_07`` … at the point's step
(:meth:`TrackPoint.scalars <sigprop.monitor.point.TrackPoint.scalars>`), and the theory's columns once under
``sigprop/theory/…``. Needs the ``tensorboard`` package (the extra ``tensorboard``), imported when the first
reporter is made."""

from __future__ import annotations

import math
from pathlib import Path

from .point import Columns, TrackPoint

__all__ = ["TensorBoardScalars"]


class TensorBoardScalars:
    """Writes event files into ``log_dir`` (created if missing); NaN values are left out (TensorBoard draws none)."""

    def __init__(self, log_dir):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    def _write(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            if math.isfinite(value):
                self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def theory(self, columns: Columns, step: int) -> None:
        self._write(columns.scalars("sigprop/theory"), step)

    def point(self, point: TrackPoint) -> None:
        self._write(point.scalars(), point.step)

    def close(self) -> None:
        self._writer.close()
