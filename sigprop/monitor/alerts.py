"""Changes worth a warning while a model trains, each raised once per layer with the step it was first seen at.

* **gradient vanishes**: a layer's gradient variance has fallen by ``VANISH_FACTOR`` (100×) or more since the first
  point (a layer that stops learning; e.g. a Post-LN stack whose upper branch blew up divides the gradient reaching
  the layers below it);
* **tokens collapse**: a layer's token correlation has reached the rank-collapse limit of the diagnosis
  (:class:`sigprop.analysis.diagnosis.DiagnosisLimits`, 0.99) where it was below it at the first point;
* **not finite**: a layer's forward or gradient variance, finite at the first point, is NaN or infinite (the model
  diverged: a framework that trains on after a NaN loss, as the Hugging Face Trainer and Lightning do, says nothing
  itself).

A layer already past a limit at the first point is the diagnosis's business, not a change.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from .point import TrackPoint

__all__ = ["VANISH_FACTOR", "AlertKind", "Alert", "alerts_between"]

#: The fall of a layer's gradient variance since the first point that raises an alert.
VANISH_FACTOR = 100.0


class AlertKind(enum.Enum):
    """What changed at a layer."""

    GRADIENT_VANISHES = "gradient vanishes"
    TOKENS_COLLAPSE = "tokens collapse"
    NOT_FINITE = "not finite"


@dataclass(frozen=True)
class Alert:
    """A change at ``layer`` first seen at ``step``: ``first`` and ``now`` are the quantity's values at the first
    point and at ``step`` (gradient variance, token correlation, or, for :attr:`AlertKind.NOT_FINITE`, the forward
    variance where it is not finite, else the gradient variance)."""

    kind: AlertKind
    layer: int
    step: int
    first: float
    now: float

    def describe(self) -> str:
        """The warning's text.

        Example:
            >>> Alert(AlertKind.GRADIENT_VANISHES, 3, 200, 1e-4, 1e-7).describe()
            'step 200, layer 3: gradient variance fell ×1e+03 since the first point (0.0001 → 1e-07)'
            >>> Alert(AlertKind.GRADIENT_VANISHES, 3, 200, 1e-4, 0.0).describe()
            'step 200, layer 3: gradient variance fell to 0 since the first point (0.0001 → 0)'
        """
        if self.kind is AlertKind.NOT_FINITE:
            return (f"step {self.step}, layer {self.layer}: the statistics are not finite ({self.now:g}; "
                    f"{self.first:.3g} at the first point): the model has diverged")
        if self.kind is AlertKind.GRADIENT_VANISHES and self.now == 0.0:
            return (f"step {self.step}, layer {self.layer}: gradient variance fell to 0 since the first point "
                    f"({self.first:.3g} → 0)")
        if self.kind is AlertKind.GRADIENT_VANISHES:
            return (f"step {self.step}, layer {self.layer}: gradient variance fell ×{self.first / self.now:.3g} since "
                    f"the first point ({self.first:.3g} → {self.now:.3g})")
        return (f"step {self.step}, layer {self.layer}: the tokens collapse (token correlation {self.now:.4f}, "
                f"{self.first:.4f} at the first point)")


def _vanished(first: float, now: float) -> bool:
    return math.isfinite(first) and first > 0.0 and math.isfinite(now) and now * VANISH_FACTOR <= first


def alerts_between(first: TrackPoint, point: TrackPoint, collapse: float) -> list[Alert]:
    """The alerts of ``point`` against the run's ``first`` point (module docstring), every layer that has one.

    Args:
        first: the first point of the run.
        point: the point now.
        collapse: the token correlation at which the tokens count as collapsed.

    Returns:
        The alerts, layer by layer (gradient first); empty when nothing changed past a limit.
    """
    out = []
    def columns(p: TrackPoint):
        n = len(p.columns.layers)
        return zip(p.columns.layers, p.columns.fwd_var or (math.nan,) * n, p.columns.grad_var or (math.nan,) * n,
                   p.columns.fwd_corr or (math.nan,) * n, strict=True)

    firsts = {layer: rest for layer, *rest in columns(first)}
    for layer, fwd_var, grad_var, corr in columns(point):
        if layer not in firsts:
            continue
        first_fwd, first_grad, first_corr = firsts[layer]
        if math.isfinite(first_fwd) and not math.isfinite(fwd_var):
            out.append(Alert(AlertKind.NOT_FINITE, layer, point.step, first_fwd, fwd_var))
            continue
        if math.isfinite(first_grad) and not math.isfinite(grad_var):
            out.append(Alert(AlertKind.NOT_FINITE, layer, point.step, first_grad, grad_var))
            continue
        if _vanished(first_grad, grad_var):
            out.append(Alert(AlertKind.GRADIENT_VANISHES, layer, point.step, first_grad, grad_var))
        if math.isfinite(first_corr) and first_corr < collapse <= corr:
            out.append(Alert(AlertKind.TOKENS_COLLAPSE, layer, point.step, first_corr, corr))
    return out
