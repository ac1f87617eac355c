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


def test_the_weighted_fit_is_numpy_s_and_a_noiseless_ladder_crosses_where_it_was_built_to():
    x = np.log10([1e5, 2.2e5, 4e5, 9e5, 1.6e6, 3.5e6, 6.3e6])
    se = np.array([0.05, 0.04, 0.03, 0.03, 0.02, 0.02, 0.01])
    crossover, slope = 6.5, -0.2
    y = slope * (x - crossover)
    trend = fit_trend(x, y, se)
    assert trend.slope == pytest.approx(slope, abs=1e-10) and trend.crossover == pytest.approx(crossover, abs=1e-9)
    assert trend.kind is IntervalKind.BOUNDED and trend.low < crossover < trend.high
    assert trend.inflation == 1.0 and trend.dof == 5
    noisy = y + np.random.default_rng(0).normal(0, se)
    fitted = fit_trend(x, noisy, se)
    slope_np, intercept_np = np.polyfit(x, noisy, 1, w=1 / se)
    assert (fitted.slope, fitted.intercept) == (pytest.approx(slope_np), pytest.approx(intercept_np))
    assert fit_trend(x[:2], y[:2], se[:2]) is None


def test_the_crossover_interval_covers_a_known_crossover_at_least_95_percent_of_the_time():
    """A synthetic ladder (7 rungs, slope −0.2 nats per decade, crossover at log₁₀ P = 6.4) drawn 1,000 times with
    the stated standard errors: Fieller's interval, with the scatter inflation never below 1, holds the true
    crossover at least 95% of the time (allowing Monte Carlo error: ≥ 93.5%), and is bounded in most draws."""
    rng = np.random.default_rng(1)
    x = np.log10([1e5, 2.2e5, 4e5, 9e5, 1.6e6, 3.5e6, 6.3e6])
    se = np.full(x.size, 0.03)
    truth = 6.4
    covered = bounded = 0
    for _ in range(1000):
        trend = fit_trend(x, -0.2 * (x - truth) + rng.normal(0, se), se)
        if trend.kind is IntervalKind.BOUNDED:
            bounded += 1
            covered += trend.low <= truth <= trend.high
        else:
            covered += trend.kind is IntervalKind.EVERYTHING or not trend.low < truth < trend.high
    assert covered >= 935 and bounded >= 900


def test_a_flat_ladder_locates_no_crossover():
    x = np.log10([1e5, 4e5, 1.6e6, 6.3e6])
    trend = fit_trend(x, [0.2, 0.21, 0.19, 0.2], [0.05] * 4)
    assert trend.kind is not IntervalKind.BOUNDED


def test_bad_standard_errors_are_refused():
    with pytest.raises(ValueError, match="positive"):
        fit_trend([1, 2, 3], [0, 0, 0], [0.1, 0.0, 0.1])
    with pytest.raises(ValueError, match="one value per rung"):
        fit_trend([1, 2, 3], [0, 0], [0.1, 0.1, 0.1])


def test_the_figure_s_band_is_the_trend_s_95_percent_interval_of_the_line():
    """The shaded band of the ladder figure: at every log₁₀ P it spans the line ± t·se of the line, se from the
    weighted fit's covariance (inflated by the scatter) computed here independently."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sigprop.experiments.ladder_report import _draw_trend, _trend_record

    x = np.log10([1e5, 2.2e5, 4e5, 9e5])
    se = np.array([0.05, 0.04, 0.03, 0.03])
    y = np.array([0.27, 0.25, 0.18, 0.16])
    trend = fit_trend(x, y, se)
    design = np.stack([np.ones_like(x), x], axis=1)
    slope, intercept = np.polyfit(x, y, 1, w=1 / se)
    chi2 = float(np.sum(((y - intercept - slope * x) / se) ** 2))
    cov = np.linalg.inv(design.T @ (design / se[:, None] ** 2)) * max(1.0, chi2 / (x.size - 2))
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
    assert px.min() == pytest.approx(x.min() - 0.1) and px.max() == pytest.approx(x.max() + 0.3)
    plt.close(fig)
