"""What an SDE figure returns (:class:`ExperimentResult`) and how it reports progress: shared by the simulated
figures (:mod:`sigprop.sde.experiments`) and the real decoders' gradients (:mod:`sigprop.sde.gradients`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ExperimentResult", "Progress", "jsonable", "stage"]

Progress = Callable[[str, int, int], None] | None   # (stage description, stages done, stages in all)


def jsonable(x):
    """Recursively turn numpy values into JSON values; NaN and +-inf become None (JSON has neither)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass
class ExperimentResult:
    """A figure's numbers: ``figure`` id, ``setup`` (the settings used), ``data`` (curves, distributions,
    statistics), ``checks`` (the acceptance quantities), ``seconds``; ``arrays`` keeps samples for the plots (not
    in the JSON)."""

    figure: int
    setup: dict
    data: dict
    checks: dict
    seconds: float
    arrays: dict = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        return jsonable({"kind": "sde-figure", "figure": self.figure, "setup": self.setup, "data": self.data,
                         "checks": self.checks, "seconds": self.seconds})


def stage(progress: Progress, text: str, done: int, total: int) -> None:
    """Report ``done`` of ``total`` stages, now at ``text``, to ``progress`` (if any)."""
    if progress is not None:
        progress(text, done, total)


