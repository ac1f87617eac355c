"""The statistics of a shape ladder: the paired gap between two shapes at one rung, its trend over the rungs, and
where the trend crosses zero.

**The paired gap.** At a rung both shapes train with the same seeds, and a seed fixes the data order (the batches
are functions of (seed, step)), so the per-seed differences Δ_s = loss(deep-thin, s) − loss(shallow-wide, s) are
paired. Their mean, its standard error s/√n and the two-sided t interval with n − 1 degrees of freedom (Student's
paired t) give the gap and its 95% interval.

**The trend.** Δ against x = log₁₀ P (P: non-embedding parameters of the rung) by least squares through the mean
paired differences Δ̄_r of the rungs with an interval (n_r ≥ 2 seeds), each weighted by its seeds. The variance of
one seed's difference is read from the rungs' scatter about the line, Σ_r n_r (Δ̄_r − line_r)² / (k − 2), floored at
the seeds' own spread pooled over the rungs, Σ_rs (Δ_rs − Δ̄_r)² / Σ_r (n_r − 1) (never below what the seeds
allow): the covariance of (intercept, slope) is that variance times (Σ_r n_r X_rᵀX_r)⁻¹, with Student's t on k − 2
degrees of freedom (k rungs); at least three rungs are needed. No rung's weight rests on its own two degrees of
freedom, and unequal spreads across rungs (small models vary more) are covered by the scatter about the line. (The
first version, fixed before the runs, weighted each rung by 1/se² from its own three seeds, inflated by
max(1, χ²/(k − 2)); it under-covered and was changed before the GPU rungs ran: ``bench/ladder_trend_coverage.py``,
docs/results/experiments/shape-ladder.md.)

**The crossover.** The trend is zero at x* = −a/b. Its interval is Fieller's: the x at which a t test does not
reject Δ(x) = 0, i.e. the solutions of (a + b·x)² ≤ t²·(V_a + 2x·C_ab + x²·V_b). It is a bounded interval when the
slope differs from zero at the level (b² > t²·V_b); otherwise it is unbounded (two half-lines, or every x), and the
data do not locate a crossover. Fieller's interval, unlike the delta method's symmetric one, keeps its coverage when
the slope is poorly determined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

__all__ = ["PairedGap", "paired_gap", "Trend", "IntervalKind", "fieller_interval", "fit_trend"]


@dataclass(frozen=True)
class PairedGap:
    """The paired gap of one rung: the per-seed differences, their mean, standard error, degrees of freedom (n − 1)
    and the t interval at ``level`` (None, with 0 degrees of freedom, where n < 2 or every difference is the same)."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    se: float | None
    dof: int
    low: float | None
    high: float | None
    level: float

    @property
    def n(self) -> int:
        return len(self.differences)

    def to_dict(self) -> dict:
        """The gap as a JSON record: ``seeds``, ``differences``, ``mean``, ``se``, ``dof``, ``low``, ``high`` and
        ``level`` (the form the ladder's and the depth budget's tables store).

        Example:
            >>> paired_gap({0: 3.0, 1: 3.2}, {0: 2.9, 1: 3.0}).to_dict()["differences"]
            [0.10000000000000009, 0.20000000000000018]
        """
        return {"seeds": list(self.seeds), "differences": list(self.differences), "mean": self.mean, "se": self.se,
                "dof": self.dof, "low": self.low, "high": self.high, "level": self.level}

    @property
    def below_zero(self) -> bool:
        """The interval lies below 0 (the first shape's loss is lower at this rung)."""
        return self.high is not None and self.high < 0

    @property
    def above_zero(self) -> bool:
        """The interval lies above 0 (the second shape's loss is lower at this rung)."""
        return self.low is not None and self.low > 0


def paired_gap(first: dict[int, float], second: dict[int, float], level: float = 0.95) -> PairedGap | None:
    """The paired gap first − second over the seeds both have.

    Args:
        first: seed → final validation loss of the first shape (e.g. deep-thin).
        second: seed → final validation loss of the second (e.g. shallow-wide).
        level: the interval's coverage.

    Returns:
        The :class:`PairedGap`, or None when no seed is shared.

    Example:
        >>> g = paired_gap({0: 3.0, 1: 3.1, 2: 3.2}, {0: 2.0, 1: 2.0, 2: 2.0})
        >>> round(g.mean, 3), g.dof, round(g.low, 3), round(g.high, 3)
        (1.1, 2, 0.852, 1.348)
    """
    from scipy import stats

    seeds = tuple(sorted(set(first) & set(second)))
    if not seeds:
        return None
    diffs = np.array([first[s] - second[s] for s in seeds], dtype=np.float64)
    mean = float(diffs.mean())
    se = float(diffs.std(ddof=1) / math.sqrt(diffs.size)) if diffs.size > 1 else 0.0
    if se == 0.0:  # one seed, or identical differences: no spread to build an interval from
        return PairedGap(seeds, tuple(diffs.tolist()), mean, None, 0, None, None, level)
    dof = diffs.size - 1
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return PairedGap(seeds, tuple(diffs.tolist()), mean, se, dof, mean - half, mean + half, level)


class IntervalKind(Enum):
    """The shape of a Fieller interval."""

    BOUNDED = "bounded"          # [low, high]
    TWO_HALF_LINES = "two half-lines"  # (−∞, low] ∪ [high, ∞)
    EVERYTHING = "every value"   # the data do not locate a root


def fieller_interval(a: float, b: float, var_a: float, var_b: float, cov_ab: float,
                     t: float) -> tuple[IntervalKind, float | None, float | None]:
    """Fieller's interval for the root x* = −a/b of a + b·x, with (a, b) estimated with the given (co)variances.

    Args:
        a: intercept.
        b: slope.
        var_a: variance of a.
        var_b: variance of b.
        cov_ab: their covariance.
        t: the quantile (e.g. Student's t at 0.975 with the fit's degrees of freedom).

    Returns:
        (kind, low, high): ``BOUNDED`` with the interval's ends; ``TWO_HALF_LINES`` with the inner ends of
        (−∞, low] ∪ [high, ∞); ``EVERYTHING`` with None, None.

    Example:
        >>> kind, lo, hi = fieller_interval(-2.0, 1.0, 0.01, 0.01, 0.0, 2.0)
        >>> kind.value, round(lo, 3), round(hi, 3)
        ('bounded', 1.619, 2.547)
    """
    t2 = t * t
    qa, qb, qc = b * b - t2 * var_b, 2 * (a * b - t2 * cov_ab), a * a - t2 * var_a
    disc = qb * qb - 4 * qa * qc
    if qa > 0:
        root = math.sqrt(max(disc, 0.0))
        return IntervalKind.BOUNDED, (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    if disc > 0 and qa < 0:
        root = math.sqrt(disc)
        ends = sorted(((-qb - root) / (2 * qa), (-qb + root) / (2 * qa)))
        return IntervalKind.TWO_HALF_LINES, ends[0], ends[1]
    return IntervalKind.EVERYTHING, None, None


@dataclass(frozen=True)
class Trend:
    """The least-squares line Δ = a + b·log₁₀ P over ``k`` rungs: the coefficients, their covariance, the rungs'
    scatter about the line against the seeds' (``chi2``: Σ n_r (Δ̄_r − line_r)² over the seeds' pooled variance;
    ``inflation``: the variance used over that pooled variance, ≥ 1), the degrees of freedom (k − 2) and t quantile,
    and the crossover log₁₀ P* = −a/b with its Fieller interval (``kind``, ``low``, ``high``, in log₁₀ P)."""

    k: int
    intercept: float
    slope: float
    cov: tuple[tuple[float, float], tuple[float, float]]
    chi2: float
    inflation: float
    dof: int
    t: float
    crossover: float | None
    kind: IntervalKind
    low: float | None
    high: float | None
    level: float

    def at(self, log10_p) -> np.ndarray:
        """The fitted Δ at log₁₀ P."""
        return self.intercept + self.slope * np.asarray(log10_p, dtype=np.float64)


def fit_trend(log10_p, differences, level: float = 0.95) -> Trend | None:
    """The least-squares trend of the rungs' mean paired differences against ``log10_p``, its variance from their
    scatter about the line floored at the seeds' pooled spread, and its crossover (module docstring).

    Args:
        log10_p: log₁₀ of each rung's non-embedding parameters.
        differences: each rung's per-seed paired differences (two or more per rung).
        level: the coverage of the crossover's interval.

    Returns:
        The :class:`Trend`, or None with fewer than three rungs.

    Example:
        >>> d = [[0.31, 0.29], [0.21, 0.19], [0.11, 0.09], [0.01, -0.01]]
        >>> tr = fit_trend([5.0, 5.5, 6.0, 6.5], d)
        >>> round(tr.slope, 3), round(tr.crossover, 3), tr.dof
        (-0.2, 6.5, 2)
    """
    from scipy import stats

    x = np.asarray(log10_p, dtype=np.float64)
    rungs = [np.asarray(d, dtype=np.float64) for d in differences]
    if x.ndim != 1 or len(rungs) != x.size or any(d.ndim != 1 for d in rungs):
        raise ValueError("log10_p and differences must have one entry per rung")
    if x.size < 3:
        return None
    n = np.array([d.size for d in rungs], dtype=np.float64)
    if np.any(n < 2):
        raise ValueError("every rung needs two or more paired differences (its seeds' spread)")
    within = float(sum(np.sum((d - d.mean()) ** 2) for d in rungs))  # the seeds' scatter about their rung's mean
    pooled = within / float(np.sum(n - 1))
    if not pooled > 0:
        raise ValueError("the paired differences have no spread within any rung: no variance to pool")
    y = np.array([d.mean() for d in rungs])
    design = np.stack([np.ones_like(x), x], axis=1)
    normal = design.T @ (design * n[:, None])  # every seed one observation: each rung's mean weighs n_r
    coef = np.linalg.solve(normal, design.T @ (n * y))
    resid = y - design @ coef
    about_line = float(np.sum(n * resid**2))  # the rungs' scatter about the line
    dof = x.size - 2
    variance = max(pooled, about_line / dof)  # the rungs' scatter about the line, floored at the seeds' spread
    chi2 = about_line / pooled
    inflation = variance / pooled
    cov = np.linalg.inv(normal) * variance
    t = float(stats.t.ppf(0.5 + level / 2, dof))
    a, b = float(coef[0]), float(coef[1])
    kind, low, high = fieller_interval(a, b, float(cov[0, 0]), float(cov[1, 1]), float(cov[0, 1]), t)
    return Trend(int(x.size), a, b, ((float(cov[0, 0]), float(cov[0, 1])), (float(cov[1, 0]), float(cov[1, 1]))),
                 chi2, inflation, dof, t, (-a / b if b != 0 else None), kind, low, high, level)
