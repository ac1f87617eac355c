"""When a seed average cannot be read as a mean with a normal standard error: heavy tails across seeds.

Why. A deep model's gradient variance at layer l is the top layer's times a product of L − l random per-layer
factors, one per weight draw, so across seeds its logarithm spreads like a sum: the variance itself is
log-normal-like. In a Post-LN stack that spread is large (sd of the log ≈ 1 at the lowest layers of the 192-layer
``fig3-postln`` preset, d = 256; docs/results/accuracy.md, "Post-LN gradients: the spread across seeds"). The mean of a
few such draws is then skewed: usually below the expectation the theory predicts, sometimes far above it, and its
sample standard error is itself unreliable, so "within 2 SE" says little there.

What is computed. Per site and positive quantity (a variance), the sample standard deviation s of log(value) over
the seeds. Fitting a log-normal with that s, the skewness of one draw is

    γ₁(s) = (e^{s²} + 2) √(e^{s²} − 1),

the skewness of a mean of n independent draws is γ₁/√n, and its relative standard error is √((e^{s²} − 1)/n).
Cochran's rule (Cochran 1977, *Sampling Techniques*, Sec. 2.15) asks n > 25 γ₁² before the mean of n draws is
treated as normal (the mean's skewness below 0.2). :func:`heavy_tails` flags the layers whose seed count fails it.

Assumes: the seeds are independent models measured on one batch (as :func:`sigprop.measurement.seeds.measure_seeds`
makes them); the log-normal shape is a fit, used for its skewness only. s is estimated from the same seeds (its
relative standard error is about 1/√(2(n − 1))), so a layer near the threshold may be flagged in one run and not
the next.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np

from ..core.profile import Profile

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["log_sd", "lognormal_skewness", "seeds_for_normal_mean", "SpreadNote", "heavy_tails", "SPREAD_QUANTITIES"]

#: The quantities whose spread across seeds is recorded (positive, so their log is defined).
SPREAD_QUANTITIES = ("fwd_var", "grad_var")

#: Cochran's rule: a mean of n draws of skewness γ₁ is close enough to normal when n > COCHRAN · γ₁².
COCHRAN = 25.0

#: The mean's skewness γ₁/√n above which :meth:`SpreadNote.describe` adds that the standard error is unreliable.
#: The one-sided tail of the Studentized mean at −2 SE moves by ~0.08·γ₁/√n (its Edgeworth expansion, Hall 1992,
#: *The Bootstrap and Edgeworth Expansion*, Ch. 2), so above 1 it is more than three times a normal tail's 0.023.
#: Monte Carlo, log-normal seeds, 16 of them: P(mean < expectation − 2 SE) = 0.054 at γ₁/√n = 0.22, 0.075 at 0.44
#: and 0.156 at 1.55, against 0.032 for normal seeds (200,000 replications).
STRONG_SKEWNESS = 1.0


def log_sd(values: npt.ArrayLike) -> float:
    """Sample standard deviation (n − 1 denominator) of log(values) over seeds; NaN for fewer than two values or
    any value that is not finite and positive."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size < 2 or not np.all(np.isfinite(v)) or np.any(v <= 0.0):
        return math.nan
    return float(np.log(v).std(ddof=1))


@overload
def lognormal_skewness(s: float) -> float: ...


@overload
def lognormal_skewness(s: npt.ArrayLike) -> np.ndarray | float: ...


def lognormal_skewness(s: npt.ArrayLike) -> np.ndarray | float:
    """Skewness (e^{s²} + 2)√(e^{s²} − 1) of a log-normal whose log has standard deviation ``s`` (≥ 0)."""
    s = np.asarray(s, dtype=np.float64)
    if np.any(s < 0):
        raise ValueError(f"s (the sd of a log) must be >= 0, got {s}")
    e = np.expm1(s**2)
    out = (e + 3.0) * np.sqrt(e)
    return out if out.ndim else float(out)


def seeds_for_normal_mean(s: float) -> int:
    """The fewest seeds n with n > 25 γ₁(s)² (Cochran's rule; module docstring) for a log-sd ``s``."""
    gamma = float(lognormal_skewness(s))
    return int(math.floor(COCHRAN * gamma**2)) + 1


@dataclass(frozen=True)
class SpreadNote:
    """A quantity of one site whose seed mean is not normal at some layers (Cochran's rule fails there).

    ``layers``: the flagged layers; ``worst_layer`` / ``worst_sd``: the largest sd of the log over seeds;
    ``mean_skewness``: the skewness γ₁/√n of the mean of the ``seeds`` seeds there; ``rel_se``: its log-normal
    relative standard error, √((e^{s²} − 1)/n); ``seeds_needed``: what Cochran's rule asks at that layer;
    ``n_layers``: the layers that had an sd."""

    quantity: str
    site: str
    seeds: int
    layers: tuple[int, ...]
    n_layers: int
    worst_layer: int
    worst_sd: float
    mean_skewness: float
    rel_se: float
    seeds_needed: int

    def describe(self) -> str:
        """One or two sentences for a terminal or a report, stronger where the mean's skewness exceeds
        :data:`STRONG_SKEWNESS`."""
        span = f"layer {self.layers[0]}" if len(self.layers) == 1 else f"{len(self.layers)} of {self.n_layers} layers"
        needed = f"{self.seeds_needed:,}" if self.seeds_needed <= 10_000 else "more than 10,000"
        text = (f"{self.quantity} is skewed across seeds at {span}: at layer {self.worst_layer} the sd of its log is "
                f"{self.worst_sd:.2f}, so the mean of {self.seeds} seeds has skewness {self.mean_skewness:.2g} and a "
                f"relative standard error of about {100 * self.rel_se:.0f}% (log-normal fit; Cochran's rule asks for "
                f"{needed} seeds before reading it as normal).")
        if self.mean_skewness > STRONG_SKEWNESS:
            text += (" There the mean usually falls below the expectation the theory predicts and its reported "
                     "standard error is unreliable: read those layers on the log scale, or add seeds or width "
                     "(docs/results/accuracy.md, \"Post-LN gradients: the spread across seeds\").")
        return text


def heavy_tails(measured: Profile, site: str = "layer",
                quantities: Sequence[str] = SPREAD_QUANTITIES) -> list[SpreadNote]:
    """The quantities of ``site`` in a seed-averaged ``measured`` profile whose seed count fails Cochran's rule at
    one layer or more, from ``meta["seed_log_sd"]`` (written by :func:`sigprop.measurement.average.average_profiles`);
    empty for a profile without it (one seed, or a profile written before it existed)."""
    spread = measured.meta.get("seed_log_sd") or {}
    seeds = measured.meta.get("seeds")
    n = len(seeds) if isinstance(seeds, (list, tuple)) else int(seeds or 0)
    if n < 2 or not spread:
        return []
    notes = []
    for q in quantities:
        by_layer = {r.layer: spread.get(f"{r.layer}:{site}", {}).get(q) for r in measured.site(site)}
        by_layer = {k: float(v) for k, v in by_layer.items() if v is not None and math.isfinite(v)}
        if not by_layer:
            continue
        flagged = tuple(k for k, s in by_layer.items() if n < seeds_for_normal_mean(s))
        if not flagged:
            continue
        worst = max(by_layer, key=lambda layer: by_layer[layer])
        s = by_layer[worst]
        notes.append(SpreadNote(q, site, n, flagged, len(by_layer), worst, s, lognormal_skewness(s) / math.sqrt(n),
                                math.sqrt(math.expm1(s**2) / n), seeds_for_normal_mean(s)))
    return notes
