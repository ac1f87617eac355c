"""The predicted band of a K-seed mean (sigprop.theory.spread.seed_mean_band, profile_bands) and its use by
compare: coverage of independent log-normal seed means at the stated level, and the comparison's verdict."""

import math

import numpy as np
import pytest

import sigprop
from sigprop.analysis.comparison import compare
from sigprop.core.profile import Profile, Row
from sigprop.theory.spread import BAND_DRAWS, BAND_NODES, profile_bands, seed_mean_band

LEVEL = 0.95


def _coverage_tolerance(samples: int) -> float:
    """Four standard deviations of a coverage estimate: the test's own samples, and the band's quantiles, each a
    Monte Carlo of BAND_DRAWS means (each tail's probability off by √(p(1 − p)/draws))."""
    tail = (1 - LEVEL) / 2
    return 4 * math.sqrt(LEVEL * (1 - LEVEL) / samples + 2 * tail * (1 - tail) / BAND_DRAWS)


@pytest.mark.parametrize("seeds", [1, 4, 16])
def test_the_band_covers_independent_seed_means_at_its_level(seeds):
    """Means of K independent log-normal draws (another stream than the band's) fall inside the band at its level,
    for spreads from small to a deep Post-LN gradient's, including values between the interpolation nodes."""
    rng = np.random.default_rng(12345)
    spreads = np.linspace(0.05, 2.5, 3 * BAND_NODES + 1)  # more distinct values than nodes: interpolated
    expected = rng.uniform(0.1, 10.0, spreads.size)
    low, high = seed_mean_band(expected, spreads, seeds, LEVEL)
    samples = 4000
    for pick in (0, 50, 95):  # an end, and points between nodes
        s, e = spreads[pick], expected[pick]
        means = e * np.exp(s * rng.standard_normal((samples, seeds)) - s * s / 2).mean(axis=1)
        covered = np.mean((means >= low[pick]) & (means <= high[pick]))
        assert abs(covered - LEVEL) <= _coverage_tolerance(samples), (s, seeds, covered)


def test_one_model_band_is_the_log_normal_interval():
    """K = 1: the band is E·e^{−s²/2 ∓ z s} up to the quantiles' Monte Carlo error (relative s·SE of a normal
    quantile, √(p(1 − p)/draws)/φ(z))."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf((1 + LEVEL) / 2)
    for s in (0.2, 1.0, 2.0):
        low, high = seed_mean_band(3.0, s, 1, LEVEL)
        q_se = math.sqrt(0.025 * 0.975 / BAND_DRAWS) / NormalDist().pdf(z)
        assert abs(math.log(low / 3.0) - (-s * s / 2 - z * s)) <= 4 * s * q_se
        assert abs(math.log(high / 3.0) - (-s * s / 2 + z * s)) <= 4 * s * q_se


def test_the_band_narrows_with_seeds_and_is_degenerate_without_spread():
    lows, highs = zip(*(seed_mean_band(1.0, 0.8, k) for k in (1, 4, 64)), strict=True)
    assert lows[0] < lows[1] < lows[2] < 1.0 < highs[2] < highs[1] < highs[0]
    low, high = seed_mean_band([2.0, 2.0], [0.0, math.nan], 8)
    assert (low[0], high[0]) == (2.0, 2.0) and math.isnan(low[1]) and math.isnan(high[1])


def test_bad_band_arguments_are_refused():
    for kwargs in ({"seeds": 0}, {"seeds": 2.5}, {"seeds": 2, "level": 1.0}, {"seeds": 2, "draws": 10}):
        with pytest.raises(ValueError):
            seed_mean_band(1.0, 0.5, **kwargs)


def _profiles(measured_grad: list[float], seeds: int, grad_source: str = "given") -> tuple[Profile, Profile]:
    """A predicted profile of three layers with spread (its gradient boundary taken from the measurement: "given"),
    and a measurement of ``seeds`` seeds."""
    config = sigprop.TransformerConfig(n_layers=3, d_model=16, n_heads=2, vocab_size=64, seq_len=8).to_dict()
    predicted = Profile("predicted", config, tuple(
        Row(layer, "layer", 0.0, 1.0, 0.5, grad, 0.1, fwd_var_log_sd=0.0, grad_var_log_sd=sd)
        for layer, grad, sd in ((0, 4.0, 1.0), (1, 2.0, 0.5), (2, 1.0, 0.0))), {"grad_source": grad_source})
    measured = Profile("measured", config, tuple(
        Row(layer, "layer", 0.0, 1.0, 0.5, grad, 0.1) for layer, grad in enumerate(measured_grad)),
        {"seeds": list(range(seeds))})
    return predicted, measured


def test_compare_judges_each_layer_against_the_band_of_its_seed_mean():
    predicted, measured = _profiles([4.0 * 1.5, 2.0, 1.0], seeds=16)
    bands = profile_bands(predicted, 16)["grad_var"]
    comparison = compare(predicted, measured)
    s = comparison.summaries["grad_var"]
    assert s.band_rows == 2  # the top layer has no spread (its ratio to itself)
    inside = [bands[(k, "layer")][0] <= v <= bands[(k, "layer")][1] for k, v in ((0, 6.0), (1, 2.0))]
    assert s.within_band == pytest.approx(sum(inside) / 2)
    assert comparison.meta["band"]["seeds"] == 16 and comparison.meta["band"]["level"] == LEVEL
    assert comparison.meta["band"]["rows"]["grad_var"]["0:layer"] == list(bands[(0, "layer")])
    # a measurement of more seeds is held to a narrower band: 6 at layer 0 lies outside a 4096-seed mean's band
    assert compare(*_profiles([6.0, 2.0, 1.0], seeds=4096)).summaries["grad_var"].within_band == 0.5


def test_compare_without_spread_has_no_band():
    predicted, measured = _profiles([4.0, 2.0, 1.0], seeds=4)
    plain = Profile("predicted", predicted.config, tuple(
        Row(r.layer, r.site, r.fwd_mean, r.fwd_var, r.fwd_corr, r.grad_var, r.grad_corr) for r in predicted.rows))
    comparison = compare(plain, measured)
    assert "band" not in comparison.meta
    assert comparison.summaries["grad_var"].band_rows == 0 and math.isnan(comparison.summaries["grad_var"].within_band)


def test_under_the_theory_s_boundary_the_gradient_is_not_judged_against_its_band():
    """The band is of the gradient's ratio to the top layer's; a prediction from the theory's own boundary leaves
    the loss's seed-to-seed spread out of it, so its gradient variance is not judged (and says why)."""
    comparison = compare(*_profiles([4.0 * 1.5, 2.0, 1.0], seeds=16, grad_source="cross-entropy (theory)"))
    assert comparison.summaries["grad_var"].band_rows == 0
    assert "grad_var" not in comparison.meta["band"]["rows"]
    assert "boundary" in comparison.meta["band"]["not_judged"]["grad_var"]
