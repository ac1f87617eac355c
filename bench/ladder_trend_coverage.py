"""How often the shape ladder's trend holds a known crossover, and how often it "locates" one under a flat gap, for
the trend as fitted now (:func:`sigprop.experiments.ladder_stats.fit_trend`: the rungs' scatter about the line,
floored at the seeds' pooled spread, t on k − 2) and as first written (each rung weighted by 1/se² from its own
seeds, inflated by max(1, χ²/(k − 2)), t on k − 2).

The ladder's 7 rungs (d = 64 … 512), three seeds per rung, slope −0.2 nats per decade, crossover at log₁₀ P = 6.4;
the flat case has Δ = 0.2 everywhere. Spreads: equal, larger at both ends, larger at the small rungs.

    python bench/ladder_trend_coverage.py [--draws 4000]
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from sigprop.experiments.ladder_stats import IntervalKind, fieller_interval, fit_trend

RUNGS = np.log10([98944, 222144, 394496, 886656, 1575424, 3542784, 6296576])
SPREADS = {"equal": np.full(7, 0.05), "larger at both ends": np.array([0.15, 0.1, 0.05, 0.08, 0.05, 0.1, 0.15]),
           "larger at the small rungs": np.array([0.15, 0.1, 0.08, 0.05, 0.05, 0.04, 0.03])}
TRUTH, SLOPE, SEEDS = 6.4, -0.2, 3


def first_version(x, differences):
    """(a, b, covariance, t) of the trend as first written."""
    d = np.asarray(differences)
    y, se = d.mean(1), d.std(1, ddof=1) / np.sqrt(d.shape[1])
    w = 1 / se**2
    design = np.stack([np.ones_like(x), x], 1)
    normal = design.T @ (design * w[:, None])
    coef = np.linalg.solve(normal, design.T @ (w * y))
    chi2 = float(np.sum(w * (y - design @ coef) ** 2))
    cov = np.linalg.inv(normal) * max(1.0, chi2 / (x.size - 2))
    return coef[0], coef[1], cov, stats.t.ppf(0.975, x.size - 2)


def current(x, differences):
    trend = fit_trend(x, differences)
    return trend.intercept, trend.slope, np.array(trend.cov), trend.t


def judge(a, b, cov, t, truth):
    kind, low, high = fieller_interval(a, b, cov[0, 0], cov[1, 1], cov[0, 1], t)
    holds = (low <= truth <= high) if kind is IntervalKind.BOUNDED else (
        kind is IntervalKind.EVERYTHING or not low < truth < high)
    return holds, kind is IntervalKind.BOUNDED and b < 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=4000)
    args = parser.parse_args()
    print(f"{args.draws} draws per case; 7 rungs × {SEEDS} seeds; nominal: holds ≥ 95%, flat 'located' ≤ 2.5%")
    print(f"{'spread':<26} {'method':<14} {'holds':>7} {'flat located':>13}")
    for name, sigma in SPREADS.items():
        for method, fit in (("first version", first_version), ("now", current)):
            rng = np.random.default_rng(0)
            holds = located = 0
            for _ in range(args.draws):
                line = SLOPE * (RUNGS - TRUTH)
                trended = line[:, None] + sigma[:, None] * rng.normal(size=(7, SEEDS))
                holds += judge(*fit(RUNGS, trended.tolist()), TRUTH)[0]
                flat = 0.2 + sigma[:, None] * rng.normal(size=(7, SEEDS))
                located += judge(*fit(RUNGS, flat.tolist()), TRUTH)[1]
            print(f"{name:<26} {method:<14} {holds / args.draws:>7.1%} {located / args.draws:>13.1%}")


if __name__ == "__main__":
    main()
