"""The learning rate at each step: a pure function of the step, so that a resumed run follows the same curve."""

from __future__ import annotations

import math

__all__ = ["learning_rate"]


def learning_rate(step: int, config) -> float:
    """The learning rate of optimiser step ``step`` (0-based) under ``config`` (a
    :class:`~sigprop.train.config.TrainConfig`): linear warmup lr·(step + 1)/W for the first W = ``warmup_steps``
    steps, then from ``lr`` to ``lr·final_lr_fraction`` at the last step along ``schedule``:
    cosine  f + (1 − f)·(1 + cos πt)/2,  linear  1 − (1 − f)·t,  constant  1,
    with t = (step − W)/(steps − W − 1) ∈ [0, 1] the progress after the warmup (Loshchilov & Hutter 2017 for the
    cosine; the warmup as in Kedia et al. App. I)."""
    lr, w = config.lr, config.warmup_steps
    if step < w:
        return lr * (step + 1) / w
    span = config.steps - w - 1
    t = min(1.0, (step - w) / span) if span > 0 else 1.0
    f = config.final_lr_fraction
    if config.schedule == "constant":
        return lr
    if config.schedule == "linear":
        return lr * (1.0 - (1.0 - f) * t)
    return lr * (f + (1.0 - f) * 0.5 * (1.0 + math.cos(math.pi * t)))
