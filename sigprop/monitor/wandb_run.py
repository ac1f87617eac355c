"""A monitor's points logged to the active Weights & Biases run (``wandb.run``, e.g. the one a Hugging Face
``Trainer`` or Lightning's ``WandbLogger`` started), if there is one at each point: every scalar of
:meth:`TrackPoint.scalars <sigprop.monitor.point.TrackPoint.scalars>` with ``sigprop/step``, declared the step
metric of ``sigprop/*`` (so that the run's own step counter, which its owner advances, is left alone)."""

from __future__ import annotations

import math

from .point import Columns, TrackPoint

__all__ = ["WandbRun"]


class WandbRun:
    """Logs to ``wandb.run`` when one is active; does nothing otherwise (module docstring)."""

    def __init__(self):
        self._declared: object | None = None

    def _run(self):
        import wandb

        run = wandb.run
        if run is not None and self._declared is not run:
            run.define_metric("sigprop/step")
            run.define_metric("sigprop/*", step_metric="sigprop/step")
            self._declared = run
        return run

    def _log(self, scalars: dict[str, float], step: int) -> None:
        run = self._run()
        if run is not None:
            run.log({**{k: v for k, v in scalars.items() if math.isfinite(v)}, "sigprop/step": step})

    def theory(self, columns: Columns, step: int) -> None:
        self._log(columns.scalars("sigprop/theory"), step)

    def point(self, point: TrackPoint) -> None:
        self._log(point.scalars(), point.step)

    def close(self) -> None:
        pass
