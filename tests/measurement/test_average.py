"""The seed average of measured profiles (:mod:`sigprop.measurement.average`): correlations pooled as mean covariance
over
mean variance, with jackknife standard errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sigprop.core.profile import Profile, Row
from sigprop.measurement.average import average_profiles, pooled_ratio
from tests.helpers import Z


def test_the_pooled_correlation_estimates_the_ratio_of_expectations_where_the_mean_of_ratios_does_not():
    """Seeds whose variance and correlation move together: v = 1 or 3 (equally likely), cov = v²/10, so each seed's
    correlation is v/10. E[cov]/E[var] = 0.5/2 = 0.25, the theory's r; the mean of the ratios tends to 0.2."""
    rng = np.random.default_rng(0)
    n = 4000
    var = rng.choice([1.0, 3.0], size=n)
    corr = var / 10
    ratio, se = pooled_ratio(corr, var)
    # the estimator's own standard deviation, by the delta method: Var(c − 0.25 v)/(n E[v]²)
    sd = math.sqrt(np.var(corr * var - 0.25 * var) / n) / 2.0
    assert abs(ratio - 0.25) <= Z * sd
    assert abs(corr.mean() - 0.25) > 10 * sd  # the mean of the ratios is another quantity
    assert se == pytest.approx(sd, rel=Z / math.sqrt(2 * n))  # the jackknife is the delta method to O(1/√n)


def test_the_jackknife_standard_error_matches_the_spread_of_the_pooled_estimate():
    """400 replications of 50 seeds: the standard deviation of the pooled estimate against the mean jackknife SE.
    A standard deviation from 400 replications has a relative standard error of 1/√800 = 3.5%; the jackknife's
    own bias is O(1/n) = 2%."""
    rng = np.random.default_rng(1)
    reps, n = 400, 50
    estimates, ses = [], []
    for _ in range(reps):
        var = rng.lognormal(0.0, 0.3, size=n)
        corr = 0.4 + 0.2 * (var - 1.0) + rng.normal(0.0, 0.05, size=n)
        r, se = pooled_ratio(corr, var)
        estimates.append(r)
        ses.append(se)
    spread, mean_se = np.std(estimates, ddof=1), np.mean(ses)
    assert abs(mean_se / spread - 1.0) <= Z / math.sqrt(2 * (reps - 1)) + 2.0 / n


def test_pooled_ratio_edge_cases():
    r, se = pooled_ratio(np.array([0.3]), np.array([2.0]))
    assert r == pytest.approx(0.3) and math.isnan(se)
    r, se = pooled_ratio(np.array([0.3, np.nan]), np.array([1.0, 1.0]))
    assert math.isnan(r) and math.isnan(se)
    r, se = pooled_ratio(np.array([0.2, 0.4]), np.zeros(2))  # no variance to weigh by: the plain mean
    assert r == pytest.approx(0.3) and se == pytest.approx(0.1)
    with pytest.raises(ValueError, match="corr and var"):
        pooled_ratio(np.array([0.1, 0.2]), np.array([1.0]))


def test_average_profiles_pools_correlations_and_averages_the_rest():
    seeds = [(0.0, 1.0, 0.2, 4.0, 0.1), (0.2, 3.0, 0.6, 1.0, 0.5)]
    profiles = [Profile("measured", {}, (Row(0, "layer", *vals), Row(0, "attn", *vals[:3])), {}) for vals in seeds]
    avg = average_profiles(profiles, {"n_layers": 1}, {"seeds": [0, 1]})
    layer, attn = avg.lookup()[(0, "layer")], avg.lookup()[(0, "attn")]
    assert layer.fwd_mean == pytest.approx(0.1) and layer.fwd_var == pytest.approx(2.0)
    assert layer.grad_var == pytest.approx(2.5)
    assert layer.fwd_corr == pytest.approx((0.2 * 1 + 0.6 * 3) / 4)
    assert layer.grad_corr == pytest.approx((0.1 * 4 + 0.5 * 1) / 5)
    assert math.isnan(attn.grad_var) and math.isnan(attn.grad_corr)  # not measured stays NaN
    se = avg.meta["stderr"]["0:layer"]
    assert se["fwd_var"] == pytest.approx(1.0)
    # two seeds: the leave-one-out estimates are the other seed's correlation, √(1/2 · 2 · 0.2²) = 0.2
    assert se["fwd_corr"] == pytest.approx(0.2)
    assert avg.meta["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="no profiles"):
        average_profiles([], {}, {})
