"""A monitor's points logged to the active Weights & Biases run (``wandb.run``, e.g. the one a Hugging Face
``Trainer`` or Lightning's ``WandbLogger`` started), if there is one at each point: every scalar of
:meth:`TrackPoint.scalars <sigprop.monitor.point.TrackPoint.scalars>` with ``sigprop/step``, declared the step
metric of ``sigprop/*``, logged without committing (so that the run's own step counter, which its owner advances,
is left alone: the row is committed with the owner's next log, or before the monitor's next row where the owner
logged nothing in between)."""

from __future__ import annotations

import math

from .point import Columns, TrackPoint

__all__ = ["WandbRun"]


class WandbRun:
    """Logs to ``wandb.run`` when one is active; does nothing otherwise (module docstring)."""

    def __init__(self):
        self._declared: object | None = None
        # (the run's step at which this monitor's last row waits to be committed, that row's sigprop step)
        self._pending: tuple[int | None, int] | None = None

    def _run(self):
        import wandb

        run = wandb.run
        if run is not None and self._declared is not run:
            run.define_metric("sigprop/step")
            run.define_metric("sigprop/*", step_metric="sigprop/step")
            self._declared, self._pending = run, None
        return run

    def _log(self, scalars: dict[str, float], step: int) -> None:
        run = self._run()
        if run is not None:
            # commit=False: the row is committed with the run's next log (its owner's, or wandb.finish), so the
            # run's step counter, which its owner may set (wandb.log(..., step=s)), is not advanced here; where
            # the owner has logged nothing since this monitor's last row, that row is committed first
            now = _next_step(run)
            if self._pending is not None and self._pending[1] != step and (now is None or now == self._pending[0]):
                run.log({}, commit=True)  # rows of one sigprop step (the theory and the first point) merge
            run.log({**{k: v for k, v in scalars.items() if math.isfinite(v)}, "sigprop/step": step}, commit=False)
            self._pending = (_next_step(run), step)

    def theory(self, columns: Columns, step: int) -> None:
        self._log(columns.scalars("sigprop/theory"), step)

    def point(self, point: TrackPoint) -> None:
        self._log(point.scalars(), point.step)

    def close(self) -> None:
        pass


def _next_step(run) -> int | None:
    """The run's step of its next log; None where the run cannot say (a "shared" run)."""
    try:
        return int(run.step)
    except Exception:  # noqa: BLE001 - wandb raises its own errors for runs that keep no step
        return None
