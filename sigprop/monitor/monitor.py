"""``Monitor``: signal propagation watched in any training loop.

Every ``every`` steps the monitor measures one fixed probe batch on the model as it is (:mod:`sigprop.monitor.probe`:
a forked random state, no parameter gradient, so the training is bit for bit what it would be without it): every
layer's forward variance, token correlation, gradient variance and gradient correlation, with their diagnosis
(grows / explodes / vanishes / collapses, with the law over depth). At the first point it adds the theory's profile
of that very model where sigprop has a theory of it (:mod:`sigprop.monitor.theory`). Each point goes into
``monitor.history`` and to the reporters (:mod:`sigprop.monitor.reporters`: ``track.jsonl``, TensorBoard, the active
W&B run); a layer whose gradient variance falls 100× since the first point, or whose tokens collapse, is logged once
as a warning on the ``sigprop.monitor`` logger, with the layer and the step (:mod:`sigprop.monitor.alerts`).

Under torchrun / DistributedDataParallel only the process of rank 0 probes and reports: it measures the module
under the DDP wrapper, which enters no collective operation, so the other processes neither wait for it nor run a
probe of their own (their ``step`` returns ``None``). With gradient accumulation, call ``step`` once per optimiser
step (a second call for a step already recorded is ignored). No hook stays on the model between points: each
measurement adds its hooks and removes them; leaving the ``with`` block (or :meth:`Monitor.close`) closes the
reporters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from torch import nn

from ..model.batch import Batch
from .alerts import Alert, alerts_between
from .point import Columns, DiagnosisSummary, TrackPoint, columns_of
from .probe import Probe
from .reporters import Reporter, default_reporters
from .theory import TheoryResult, initial_theory

__all__ = ["Monitor", "LOGGER"]

#: The logger the alerts are written to.
LOGGER = logging.getLogger("sigprop.monitor")


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def check_every(every) -> int:
    """``every`` as a number of steps >= 1; ``ValueError`` otherwise."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every must be an integer number of steps >= 1 (got {every!r})")
    return every


def check_log_dir(log_dir) -> Path | None:
    """``log_dir`` as a folder files can be written into (created), or ``None``; ``ValueError`` otherwise."""
    if log_dir is None:
        return None
    from ..core.outputs import check_output_folder

    path = check_output_folder(log_dir, "log_dir")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Monitor:
    """Watches a model's signal propagation in any training loop: a fixed probe batch every ``every`` steps.

    Call :meth:`step` after each optimiser step: at every multiple of ``every`` the probe batch is measured on the
    model as it is (a forked random state, no parameter gradient, so the training is bit for bit what it would be
    without it): every layer's forward variance, token correlation, gradient variance and gradient correlation, with
    their diagnosis. The first point adds the theory's profile of that very model where sigprop has a theory of it.
    Each point goes into :attr:`history` and to the reporters; a layer whose gradient variance falls 100× since
    the first point, or whose tokens collapse, is warned about once (the ``sigprop.monitor`` logger). Under
    DistributedDataParallel only the process of rank 0 probes (module docstring). Leaving the ``with`` block, or
    :meth:`close`, closes the reporters.

    Args:
        model: any model with a stack of blocks (a sigprop model, a Hugging Face model, a user's own module),
            possibly ``torch.compile``\\ d or wrapped in DistributedDataParallel.
        probe_batch: the fixed batch measured at every point: sigprop's batch dict, a Hugging Face dict, token ids,
            a :class:`~sigprop.model.batch.Batch`, or whatever ``loss_fn`` reads.
        every: steps between points (>= 1).
        loss_fn: ``loss_fn(model, batch) -> scalar tensor``; default the model's own loss (a Hugging Face model's
            ``outputs.loss``, a sigprop model's objective, else the next-token loss of its logits).
        log_dir: a folder for ``track.jsonl``, ``track-prediction.json`` and TensorBoard's event files (created).
        seed: seeds the probe's forked generator (the same dropout masks at every point).
        reporters: where points go instead of the default ones (:func:`~sigprop.monitor.reporters.default_reporters`).
        history: earlier points of the same run (a resumed run's), the first of them the reference of the alerts.
        theory: whether to add the theory's profile at the first point.

    Attributes:
        model: the model probed (under its compile and DDP wrappers).
        every: steps between points.
        log_dir: the folder written into, or None.
        history: the :class:`~sigprop.monitor.point.TrackPoint` of every point so far (``step``, ``columns``: every
            layer's four statistics, ``attn_entropy``, ``diagnosis``).
        alerts: the warnings raised so far (:class:`~sigprop.monitor.alerts.Alert`).
        theory: the theory's result at the first point (:class:`~sigprop.monitor.theory.TheoryResult`), or None.
        reporters: where points go.
        active: whether this process probes (rank 0).

    Raises:
        ValueError: ``every`` not a positive integer, a ``log_dir`` that cannot be written, a probe batch the model
            cannot take (one forward pass is tried now), a model without a stack of blocks.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> model = sigprop.Transformer(config)
        >>> ids = torch.randint(5, 64, (2, 8), generator=torch.Generator().manual_seed(0))
        >>> batch = sigprop.make_batch(config, ids)
        >>> with sigprop.Monitor(model, batch, every=10, reporters=[]) as monitor:
        ...     first, skipped = monitor.step(0), monitor.step(5)
        >>> first.columns.layers, skipped, len(monitor.history), monitor.theory_columns is not None
        ((0, 1), None, 1, True)
    """

    def __init__(self, model: nn.Module, probe_batch, every: int = 100, loss_fn: Callable | None = None,
                 log_dir=None, *, seed: int = 0, reporters: Sequence[Reporter] | None = None,
                 history: Sequence[TrackPoint] = (), theory: bool = True):
        from ..analysis.diagnosis import DiagnosisLimits

        self.every = check_every(every)
        self.log_dir = check_log_dir(log_dir)
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module (got {type(model).__name__})")
        self.probe = Probe(model, probe_batch, loss_fn, seed)
        self.probe.check()
        self.active = _rank() == 0
        self.history: list[TrackPoint] = list(history)
        self.alerts: list[Alert] = []
        self.theory: TheoryResult | None = None
        self._want_theory = bool(theory)
        self._collapse = DiagnosisLimits().collapse
        self._raised: set = set()
        if not self.active:
            self.reporters: list[Reporter] = []
        else:
            self.reporters = default_reporters(self.log_dir) if reporters is None else list(reporters)

    @property
    def model(self) -> nn.Module:
        """The model probed (under its compile and DDP wrappers)."""
        return self.probe.model

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Close the reporters (TensorBoard's files flushed)."""
        for reporter in self.reporters:
            reporter.close()

    def predict(self, step: int = 0) -> TheoryResult:
        """The theory's profile of the model as it is now on the probe batch, sent to the reporters (once: later
        calls return the first result). Returns the :class:`~sigprop.monitor.theory.TheoryResult` (its ``note``
        says what the theory could not give)."""
        if self.theory is None:
            self.theory = initial_theory(self.model, self.probe.cpu_batch)
            if self.theory.columns is not None:
                for reporter in self.reporters:
                    reporter.theory(self.theory.columns, step)
        return self.theory

    def step(self, step: int) -> TrackPoint | None:
        """Call after the optimiser step ``step`` (the number of optimiser steps taken; 0 before the first): a
        point when ``step`` is a multiple of ``every`` not recorded yet, on the process of rank 0.

        Args:
            step: the optimiser steps taken (>= 0).

        Returns:
            The new :class:`~sigprop.monitor.point.TrackPoint`, or ``None`` when this step has no point.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an integer >= 0 (got {step!r})")
        if not self.active or step % self.every or (self.history and step <= self.history[-1].step):
            return None
        return self.record(step)

    def record(self, step: int) -> TrackPoint:
        """Measure the probe batch now, whatever ``every`` says, as the point of ``step``; report it and raise its
        alerts. The first point of a monitor that wants the theory is preceded by :meth:`predict`."""
        from ..analysis.diagnosis import diagnose

        if not self.history and self._want_theory:
            self.predict(step)
        profile = self.probe.measure()
        entropy = None
        if callable(getattr(self.model, "all_layers", None)) and isinstance(self.probe.cpu_batch, dict | Batch):
            from ..measurement.attention_entropy import attention_entropies

            entropy = tuple(attention_entropies(self.model, self.probe.batch()))
        point = TrackPoint(step, columns_of(profile), entropy, DiagnosisSummary.of(diagnose(profile)))
        self.history.append(point)
        for reporter in self.reporters:
            reporter.point(point)
        self._alert(point)
        return point

    def _alert(self, point: TrackPoint) -> None:
        for alert in alerts_between(self.history[0], point, self._collapse):
            if (alert.kind, alert.layer) not in self._raised:
                self._raised.add((alert.kind, alert.layer))
                self.alerts.append(alert)
                LOGGER.warning("sigprop: %s", alert.describe())

    @property
    def theory_columns(self) -> Columns | None:
        """The theory's columns at the first point, or ``None`` (not predicted, or no theory)."""
        return None if self.theory is None else self.theory.columns
