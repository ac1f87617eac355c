"""Heavy tails across seeds (:mod:`sigprop.measurement.spread`): the log-normal skewness, Cochran's rule, and the layers
of
a seed-averaged profile that it flags."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from sigprop.analysis.comparison import compare
from sigprop.core.profile import Profile, Row
from sigprop.measurement.average import average_profiles
from sigprop.measurement.spread import heavy_tails, log_sd, lognormal_skewness, seeds_for_normal_mean
from tests.helpers import Z, lognormal_seed_profiles


def _skewness(x: np.ndarray) -> float:
    c = x - x.mean()
    return float((c**3).mean() / (c**2).mean() ** 1.5)


@pytest.mark.parametrize("s", [0.05, 0.3, 1.0, 2.0])
def test_lognormal_skewness_against_the_moments(s):
    """Against the third central moment built from the raw moments E[Xᵏ] = e^{k²s²/2} of a log-normal, and against
    scipy's log-normal."""
    m1, m2, m3 = (math.exp(k * k * s * s / 2) for k in (1, 2, 3))
    skew = (m3 - 3 * m1 * m2 + 2 * m1**3) / (m2 - m1**2) ** 1.5
    assert lognormal_skewness(s) == pytest.approx(skew, rel=1e-9)
    assert lognormal_skewness(s) == pytest.approx(float(stats.lognorm(s).stats(moments="s")), rel=1e-9)


def test_the_mean_of_cochrans_seed_count_is_nearly_normal():
    """At the seed count Cochran's rule returns, the mean of that many log-normal draws has skewness below 0.2
    (Monte Carlo of 200,000 such means, tolerance from their batch spread); one seed fewer, it is not below."""
    s = 0.6
    n = seeds_for_normal_mean(s)
    rng = np.random.default_rng(3)
    for seeds, below in ((n, True), (n - 1, False)):
        batches = np.array([_skewness(rng.lognormal(0.0, s, size=(10_000, seeds)).mean(axis=1)) for _ in range(20)])
        se = batches.std(ddof=1) / math.sqrt(len(batches))
        exact = lognormal_skewness(s) / math.sqrt(seeds)
        assert abs(batches.mean() - exact) <= Z * se  # the mean's skewness is γ₁/√n
        assert (exact < 0.2) is below


def test_log_sd_and_its_undefined_cases():
    assert log_sd([1.0, math.e, math.e**2]) == pytest.approx(1.0)
    for bad in ([1.0], [1.0, 0.0], [1.0, -2.0], [1.0, math.nan], [1.0, math.inf]):
        assert math.isnan(log_sd(bad))
    with pytest.raises(ValueError, match="sd of a log"):
        lognormal_skewness(-0.1)


def test_heavy_tails_flags_the_layers_whose_seed_mean_is_not_normal(tmp_path):
    """16 seeds: layers with a log-sd of 1.2 are flagged (16 seeds' estimate of it is 1.2 ± 0.22, and the threshold
    at 16 seeds is s ≈ 0.26), layers with 0.02 are not; the forward variance (log-sd 0.01) is not flagged."""
    sds = {0: 1.2, 1: 1.2, 2: 0.02, 3: 1.2, 4: 0.02}
    avg = average_profiles(lognormal_seed_profiles(np.random.default_rng(5), sds, 16), {}, {"seeds": list(range(16))})
    (note,) = heavy_tails(avg)
    assert note.quantity == "grad_var" and note.layers == (0, 1, 3) and note.n_layers == 5 and note.seeds == 16
    assert note.worst_sd == pytest.approx(1.2, abs=Z * 1.2 / math.sqrt(30))
    assert note.mean_skewness == pytest.approx(lognormal_skewness(note.worst_sd) / 4) and note.mean_skewness > 0.2
    assert note.rel_se == pytest.approx(math.sqrt(math.expm1(note.worst_sd**2) / 16))
    assert note.seeds_needed == seeds_for_normal_mean(note.worst_sd) > 16
    text = note.describe()
    assert "grad_var" in text and "3 of 5 layers" in text and "seeds before reading it as normal" in text
    assert "unreliable" in text  # skewness > 1: the strong form
    mild = dataclasses.replace(note, layers=(0,), worst_sd=0.28, mean_skewness=0.22)
    assert "at layer 0:" in mild.describe() and "unreliable" not in mild.describe()
    assert "asks for 19 seeds" in dataclasses.replace(mild, seeds_needed=19).describe()
    assert "more than 10,000 seeds" in dataclasses.replace(note, seeds_needed=2_345_315).describe()
    # the spread survives the JSON round trip, and enough seeds clear the flag
    path = tmp_path / "m.json"
    avg.write_json(path)
    assert heavy_tails(Profile.read_json(path)) == [note]
    # a comparison carries the notes of its site into its JSON
    predicted = Profile("predicted", {}, tuple(Row(r.layer, "layer", 0.0, 1.0, 0.5, 1.0, 0.3) for r in avg.rows), {})
    comparison = compare(predicted, avg)
    assert comparison.meta["heavy_tails"][0]["layers"] == (0, 1, 3)
    comparison.write_json(tmp_path / "c.json")
    many = average_profiles(lognormal_seed_profiles(np.random.default_rng(6), {0: 0.1, 1: 0.1}, 64), {}, {"seeds": 64})
    assert heavy_tails(many) == []


def test_heavy_tails_needs_two_seeds_and_positive_values():
    one = average_profiles(lognormal_seed_profiles(np.random.default_rng(0), {0: 1.0}, 1), {}, {"seeds": [0]})
    assert heavy_tails(one) == [] and "seed_log_sd" in one.meta
    rows = [Profile("measured", {}, (Row(0, "layer", 0.0, 1.0, 0.5, g, 0.3),), {}) for g in (0.0, 1.0, 2.0)]
    avg = average_profiles(rows, {}, {"seeds": [0, 1, 2]})
    assert avg.meta["seed_log_sd"]["0:layer"]["grad_var"] is None
    assert heavy_tails(avg) == []
