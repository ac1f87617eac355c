"""Changes worth a warning while a model trains, each raised once per layer with the step it was first seen at.

* **gradient vanishes**: a layer's gradient variance has fallen by ``VANISH_FACTOR`` (100×) or more since the first
  point (a layer that stops learning; e.g. a Post-LN stack whose upper branch blew up divides the gradient reaching
  the layers below it);
* **tokens collapse**: a layer's token correlation has reached the rank-collapse limit of the diagnosis
  (:class:`sigprop.analysis.diagnosis.DiagnosisLimits`, 0.99) where it was below it at the first point.

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


@dataclass(frozen=True)
class Alert:
    """A change at ``layer`` first seen at ``step``: ``first`` and ``now`` are the quantity's values at the first
    point and at ``step`` (gradient variance, or token correlation)."""

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
    firsts = dict(zip(first.columns.layers, zip(first.columns.grad_var or (), first.columns.fwd_corr or (),
                                                strict=False), strict=False))
    nows = zip(point.columns.layers, point.columns.grad_var or (), point.columns.fwd_corr or (), strict=False)
    for layer, grad_var, corr in nows:
        if layer not in firsts:
            continue
        first_grad, first_corr = firsts[layer]
        if _vanished(first_grad, grad_var):
            out.append(Alert(AlertKind.GRADIENT_VANISHES, layer, point.step, first_grad, grad_var))
        if math.isfinite(first_corr) and first_corr < collapse <= corr:
            out.append(Alert(AlertKind.TOKENS_COLLAPSE, layer, point.step, first_corr, corr))
    return out
