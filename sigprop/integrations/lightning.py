"""``SigpropCallback`` for Lightning: a :class:`~sigprop.monitor.monitor.Monitor` of the ``LightningModule`` being
fitted, stepped at the Trainer's optimiser steps (``trainer.global_step``: with ``accumulate_grad_batches``, once per
optimiser step), made when training starts (the module on its device; a resumed fit keeps its earlier points and
its step-0 theory) and closed when training ends.

Where the points go: ``track.jsonl`` and ``track-prediction.json`` into ``log_dir`` when given, and every logger of
the Trainer (``trainer.loggers``: ``log_metrics`` with ``sigprop/fwd_var/layer_07`` … at the point's step; the
theory's columns once as ``sigprop/theory/…``). Lightning's loggers write on the process of rank 0, and only that
process probes (:mod:`sigprop.monitor.monitor`).

The module's sites are found from its stack of blocks (the longest ``nn.ModuleList`` of one class, e.g. the blocks of
the model it holds); its loss by default is the next-token loss of ``module(input_ids)``'s logits: pass ``loss_fn``
when ``forward`` takes something else. Needs ``lightning`` (``lightning.pytorch``), imported with this module.
"""

from __future__ import annotations

import math

from lightning.pytorch import Callback

from ..monitor.pending import HoldsPendingMonitor
from ..monitor.point import Columns, TrackPoint

__all__ = ["SigpropCallback", "LoggersReporter"]


class LoggersReporter:
    """Sends a monitor's points to a Lightning Trainer's loggers (finite values only)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def _log(self, scalars: dict[str, float], step: int) -> None:
        metrics = {k: v for k, v in scalars.items() if math.isfinite(v)}
        for logger in self.trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def theory(self, columns: Columns, step: int) -> None:
        self._log(columns.scalars("sigprop/theory"), step)

    def point(self, point: TrackPoint) -> None:
        self._log(point.scalars(), point.step)

    def close(self) -> None:
        for logger in self.trainer.loggers:
            logger.save()


class SigpropCallback(HoldsPendingMonitor, Callback):
    """Monitors the fitted module on ``probe_batch`` every ``every`` optimiser steps (module docstring).

    Args:
        probe_batch: the fixed batch (token ids, a Hugging Face dict, a sigprop batch, or what ``loss_fn`` reads).
        every: optimiser steps between points (>= 1).
        loss_fn: ``loss_fn(module, batch) -> scalar tensor``; default the module's next-token loss.
        log_dir: a folder for ``track.jsonl`` and ``track-prediction.json``.
        seed: seeds the probe's forked generator.
        theory: whether to add the theory's profile at the first point (where sigprop has one).

    Raises:
        ValueError: now, ``every`` not a positive integer or a ``log_dir`` that cannot be written; when fitting
            starts, a probe batch the module cannot take.

    Example:
        >>> from sigprop.integrations.lightning import SigpropCallback  # doctest: +SKIP
        >>> callback = SigpropCallback(probe_ids, every=100, log_dir="runs/probe")
        >>> lightning.Trainer(callbacks=[callback], logger=TensorBoardLogger("tb")).fit(module, loader)
        >>> callback.history[-1].diagnosis.flagged
    """

    def on_train_start(self, trainer, pl_module) -> None:
        if self.pending.monitor is None:  # here, not at fit start: a resumed fit's global_step is restored by now
            from ..monitor.track_file import TrackFile

            def reporters(resume: int | None) -> list:
                log_dir = self.pending.log_dir
                return [*([] if log_dir is None else [TrackFile(log_dir, resume)]), LoggersReporter(trainer)]

            self.pending.start(pl_module, reporters, trainer.global_step)
        self.pending.step(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.pending.step(trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.pending.close()
