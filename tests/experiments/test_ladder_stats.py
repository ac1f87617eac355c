"""The ladder's statistics against known cases: Student's paired t interval (scipy), Fieller's interval as the set of
x where a t test does not reject Δ(x) = 0, the weighted fit against numpy's, and a synthetic ladder whose crossover
is known, covered at the stated rate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sigprop.experiments.ladder_stats import IntervalKind, fieller_interval, fit_trend, paired_gap


def test_the_paired_interval_is_student_t_with_n_minus_1_degrees_of_freedom():
    rng = np.random.default_rng(3)
    for n in (2, 3, 5):
        a, b = rng.normal(3.0, 0.1, n), rng.normal(3.2, 0.1, n)
        gap = paired_gap(dict(enumerate(a)), dict(enumerate(b)))
        d = a - b
        low, high = stats.t.interval(0.95, n - 1, loc=d.mean(), scale=stats.sem(d))
        assert gap.dof == n - 1 and gap.n == n
        assert gap.mean == pytest.approx(d.mean(), abs=1e-12)
        assert (gap.low, gap.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))


def test_the_textbook_case_differences_1_2_3():
    """Mean 2, sd 1, se 1/√3, t(0.975, 2) = 4.3027: the interval 2 ± 2.484."""
    gap = paired_gap({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.0, 1: 0.0, 2: 0.0})
    assert gap.low == pytest.approx(2 - 4.302653 / math.sqrt(3), abs=1e-6)
    assert gap.high == pytest.approx(2 + 4.302653 / math.sqrt(3), abs=1e-6)
    assert not gap.below_zero and not gap.above_zero


def test_only_the_seeds_both_shapes_have_are_paired():
    gap = paired_gap({0: 1.0, 1: 1.5, 2: 9.0}, {0: 2.0, 1: 2.0, 3: 0.0})
    assert gap.seeds == (0, 1) and gap.differences == (-1.0, -0.5) and gap.dof == 1
    one = paired_gap({0: 1.0}, {0: 2.0})
    assert one.low is None and one.se is None and not one.below_zero
    same = paired_gap({0: 1.0, 1: 2.0}, {0: 2.0, 1: 3.0})  # identical differences: no spread, no interval
    assert same.mean == -1.0 and same.se is None and same.low is None and not same.below_zero
    assert paired_gap({0: 1.0}, {1: 2.0}) is None


def test_a_gap_below_zero_decides_for_the_first_shape():
    gap = paired_gap({0: 3.0, 1: 3.01, 2: 3.02}, {0: 3.2, 1: 3.2, 2: 3.21})
    assert gap.below_zero and not gap.above_zero


def _accepts(x, a, b, va, vb, cab, t) -> bool:
    """The t test of Δ(x) = a + b·x = 0 does not reject."""
    return (a + b * x) ** 2 <= t * t * (va + 2 * x * cab + x * x * vb)


@pytest.mark.parametrize(("a", "b", "va", "vb", "cab", "kind"), [
    (-2.0, 1.0, 0.01, 0.01, 0.002, IntervalKind.BOUNDED),
    (1.0, -0.3, 0.04, 0.002, -0.005, IntervalKind.BOUNDED),
    (-0.1, 0.02, 0.0004, 0.0004, 0.0, IntervalKind.TWO_HALF_LINES),
    (0.01, 0.01, 0.01, 0.01, 0.0, IntervalKind.EVERYTHING),
])
def test_fieller_s_interval_is_where_the_t_test_does_not_reject(a, b, va, vb, cab, kind):
    t = 2.5
    found, low, high = fieller_interval(a, b, va, vb, cab, t)
    assert found is kind
    xs = np.linspace(-200, 200, 40001)
    accepted = _accepts(xs, a, b, va, vb, cab, t)
    if kind is IntervalKind.BOUNDED:
        inside = (xs >= low) & (xs <= high)
        assert low < -a / b < high
    elif kind is IntervalKind.TWO_HALF_LINES:
        inside = (xs <= low) | (xs >= high)
    else:
        inside = np.ones_like(xs, dtype=bool)
    near_an_end = np.zeros_like(xs, dtype=bool) if low is None else \
        (np.abs(xs - low) < 0.02) | (np.abs(xs - high) < 0.02)
    assert np.array_equal(accepted[~near_an_end], inside[~near_an_end])


LADDER = np.log10([98944, 222144, 394496, 886656, 1575424, 3542784, 6296576])  # the rungs' P, d = 64 … 512


def _seeds(rng, mean, sigma, n=3):
    """Each rung's ``n`` paired differences around ``mean`` with spread ``sigma``."""
    return [list(m + s * rng.normal(size=n)) for m, s in zip(mean, np.broadcast_to(sigma, np.shape(mean)),
                                                             strict=True)]


def test_the_fit_is_numpy_s_on_the_rung_means_and_a_noiseless_ladder_crosses_where_it_was_built_to():
    crossover, slope = 6.5, -0.2
    y = slope * (LADDER - crossover)
    jitter = [[-0.01, 0.0, 0.01]] * LADDER.size  # equal spread at every rung, means on the line
    trend = fit_trend(LADDER, [list(m + np.array(j)) for m, j in zip(y, jitter, strict=True)])
    assert trend.slope == pytest.approx(slope, abs=1e-10) and trend.crossover == pytest.approx(crossover, abs=1e-9)
    assert trend.kind is IntervalKind.BOUNDED and trend.low < crossover < trend.high
    assert trend.inflation == 1.0 and trend.dof == 5  # on the line: the seeds' spread is the floor; 7 rungs − 2
    noisy = _seeds(np.random.default_rng(0), y, 0.05)
    fitted = fit_trend(LADDER, noisy)
    means = np.array([np.mean(d) for d in noisy])
    slope_np, intercept_np = np.polyfit(LADDER, means, 1)  # equal seeds: equal weights
    assert (fitted.slope, fitted.intercept) == (pytest.approx(slope_np), pytest.approx(intercept_np))
    pooled = np.mean([np.var(d, ddof=1) for d in noisy])  # one seed's variance, from the seeds
    scatter = 3 * np.sum((means - intercept_np - slope_np * LADDER) ** 2) / 5  # ... from the rungs about the line
    design = np.stack([np.ones_like(LADDER), LADDER], axis=1)
    expected = np.linalg.inv(3 * design.T @ design) * max(pooled, scatter)
    assert np.array(fitted.cov) == pytest.approx(expected, rel=1e-9)
    assert fitted.t == pytest.approx(stats.t.ppf(0.975, 5))
    assert fit_trend(LADDER[:2], noisy[:2]) is None


@pytest.mark.parametrize("sigma", [0.05, np.array([0.15, 0.1, 0.05, 0.08, 0.05, 0.1, 0.15])],
                         ids=["equal spread", "unequal spread"])
def test_the_crossover_interval_covers_a_known_crossover_at_least_95_percent_of_the_time(sigma):
    """A synthetic ladder (the 7 rungs, slope −0.2 nats per decade, crossover at log₁₀ P = 6.4) drawn 2,000 times,
    three seeds per rung, as the ladder runs: Fieller's interval holds the true crossover at least 95% of the time
    (allowing Monte Carlo error, 3 SE of a 95% rate over 2,000 draws: ≥ 94.1%). Weighting each rung by its own
    2-degree-of-freedom standard error held it ~85% of the time (bench/ladder_trend_coverage.py)."""
    rng = np.random.default_rng(1)
    truth = 6.4
    covered = 0
    draws = 2000
    for _ in range(draws):
        trend = fit_trend(LADDER, _seeds(rng, -0.2 * (LADDER - truth), sigma))
        if trend.kind is IntervalKind.BOUNDED:
            covered += trend.low <= truth <= trend.high
        else:
            covered += trend.kind is IntervalKind.EVERYTHING or not trend.low < truth < trend.high
    assert covered >= draws * (0.95 - 3 * math.sqrt(0.95 * 0.05 / draws))


def test_a_flat_gap_is_said_to_point_to_a_crossover_at_most_as_often_as_the_level_allows():
    """With no trend at all, "points to a crossover" (a bounded interval and a negative slope) is a one-sided error:
    at most 2.5% of draws, within 3 SE over 2,000 (the 1/se² weights gave ~4.9%)."""
    rng = np.random.default_rng(2)
    draws, false = 2000, 0
    for _ in range(draws):
        trend = fit_trend(LADDER, _seeds(rng, np.full(LADDER.size, 0.2), 0.05))
        false += trend.kind is IntervalKind.BOUNDED and trend.slope < 0
    assert false <= draws * (0.025 + 3 * math.sqrt(0.025 * 0.975 / draws))


def test_a_flat_ladder_locates_no_crossover():
    x = np.log10([1e5, 4e5, 1.6e6, 6.3e6])
    trend = fit_trend(x, [[0.15, 0.25], [0.16, 0.26], [0.14, 0.24], [0.15, 0.25]])
    assert trend.kind is not IntervalKind.BOUNDED


def test_bad_differences_are_refused():
    with pytest.raises(ValueError, match="two or more"):
        fit_trend([1, 2, 3], [[0.1, 0.2], [0.1], [0.1, 0.3]])
    with pytest.raises(ValueError, match="one entry per rung"):
        fit_trend([1, 2, 3], [[0.1, 0.2], [0.1, 0.3]])
    with pytest.raises(ValueError, match="no spread"):
        fit_trend([1, 2, 3], [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]])


def test_the_figure_s_band_is_the_trend_s_95_percent_interval_of_the_line():
    """The shaded band of the ladder figure: at every log₁₀ P it spans the line ± t·se of the line, se from the
    fit's covariance (the pooled seeds' variance, inflated by the scatter) computed here independently."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sigprop.experiments.ladder_report import _draw_trend, _trend_record

    x = np.log10([1e5, 2.2e5, 4e5, 9e5])
    seeds = [[0.22, 0.27, 0.32], [0.21, 0.25, 0.29], [0.15, 0.18, 0.21], [0.13, 0.16, 0.19]]
    y = np.array([np.mean(d) for d in seeds])
    se = np.array([np.std(d, ddof=1) / math.sqrt(3) for d in seeds])
    trend = fit_trend(x, seeds)
    design = np.stack([np.ones_like(x), x], axis=1)
    slope, intercept = np.polyfit(x, y, 1)
    pooled = np.mean([np.var(d, ddof=1) for d in seeds])
    scatter = 3 * float(np.sum((y - intercept - slope * x) ** 2)) / (x.size - 2)
    cov = np.linalg.inv(3 * design.T @ design) * max(pooled, scatter)
    t = stats.t.ppf(0.975, x.size - 2)
    fig, ax = plt.subplots()
    ax.errorbar(10 ** x, y, yerr=1.96 * se, fmt="o")
    _draw_trend(ax, _trend_record(trend), list(10 ** x))
    from matplotlib.collections import PolyCollection

    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    vertices = band.get_paths()[0].vertices
    px = np.log10(vertices[:, 0])
    expected = t * np.sqrt(np.einsum("ni,ij,nj->n", np.stack([np.ones_like(px), px], 1), cov,
                                     np.stack([np.ones_like(px), px], 1)))
    assert np.abs(vertices[:, 1] - (intercept + slope * px)) == pytest.approx(expected, rel=1e-9)
    right = x.max() + 0.3 if trend.kind is not IntervalKind.BOUNDED else max(x.max() + 0.3, trend.crossover + 0.1)
    assert px.min() == pytest.approx(x.min() - 0.1) and px.max() == pytest.approx(right)
    plt.close(fig)
