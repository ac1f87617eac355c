"""Training: :func:`fit` a model of any :class:`~sigprop.model.TransformerConfig` under a :class:`TrainConfig` into
a run directory, :func:`resume` it exactly, on one process or several (torchrun), with signal propagation tracked
while it trains. See :mod:`sigprop.train.fit` for the guarantees."""

from __future__ import annotations

from .config import TrainConfig
from .fit import FitResult, fit, resume

__all__ = ["TrainConfig", "fit", "resume", "FitResult"]
