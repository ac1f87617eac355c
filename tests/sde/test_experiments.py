"""The figure reproductions (Noci et al. Figs. 1, 3, 4, 5, 7, 8) at small sizes: network vs SDE agreement within the
KS critical value at alpha = 0.001 and quantiles within Z standard errors, the JSON, and the statistics helpers.
The paper-size reproductions are marked slow."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from sigprop.sde.experiments import (
    figure1,
    figure3,
    figure4,
    figure5,
    figure7,
    figure8,
    jsonable,
    ks_critical,
    ks_test,
    quantile_se,
    run_figure,
    sde_dt,
)
from tests.helpers import Z


def test_ks_critical_value_has_level_alpha():
    """At the critical value, the asymptotic two-sample KS p-value is alpha (Kolmogorov distribution)."""
    n1, n2 = 3000, 5000
    crit = ks_critical(n1, n2, 0.001)
    en = math.sqrt(n1 * n2 / (n1 + n2))
    assert stats.kstwobign.sf(crit * en) == pytest.approx(0.001, rel=1e-6)


def test_quantile_standard_error_matches_the_normal_theory():
    """Empirical q-quantile of N(0,1): SE = sqrt(q(1-q)/N)/phi(z_q); the order-statistic estimate agrees within
    its own sampling spread (a loose 30%: the band is from two order statistics)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(20000)
    for q in (0.05, 0.5, 0.95):
        val, se = quantile_se(x, q)
        zq = stats.norm.ppf(q)
        theory = math.sqrt(q * (1 - q) / x.size) / stats.norm.pdf(zq)
        assert abs(val - zq) <= Z * theory
        assert se == pytest.approx(theory, rel=0.3)


def test_sde_dt_divides_t():
    assert sde_dt(0.75, 0.01) == pytest.approx(0.01)
    dt = sde_dt(1 / 3, 0.01)
    assert dt <= 0.01 and abs(round((1 / 3) / dt) * dt - 1 / 3) < 1e-12
    with pytest.raises(ValueError, match="dt"):
        sde_dt(1.0, 0.0)


def test_jsonable_replaces_nan_and_inf():
    out = jsonable({"a": np.array([1.0, np.nan, np.inf]), 2: (np.float64(2.5), np.int64(3)), "b": np.bool_(True)})
    assert out == {"a": [1.0, None, None], "2": [2.5, 3], "b": True}
    json.dumps(out, allow_nan=False)


def _quantiles_agree(q_net, q_sde):
    for k in ("q5", "q50", "q95"):
        a, b = q_net[k], q_sde[k]
        assert abs(a["value"] - b["value"]) <= Z * math.hypot(a["se"], b["se"]), (k, a, b)


def test_figure1_small_network_agrees_with_the_sde():
    """Shaped attention, n = 100, d = 50 (T = 0.5): KS(SDE, NN) of rho at T below the alpha = 0.001 critical value;
    the 5/50/95% quantiles agree within Z standard errors; Softmax attention without LN collapses, shaped does not."""
    r = figure1(width=100, depth=50, samples=1024, curve_samples=64, check_dt=False, seed=3)
    ks = r.data["ks"]
    assert ks["statistic"] <= ks["critical"], ks
    _quantiles_agree(r.data["quantiles"]["network"], r.data["quantiles"]["sde"])
    assert r.checks["unshaped_collapses"]
    assert r.checks["sde_stopped_fraction"] == 0.0  # no SDE path frozen: the KS compares like with like
    j = r.to_json()
    json.dumps(j, allow_nan=False)
    assert len(j["data"]["curves"]["shaped_attention"]["mean_rho"]) == 51
    assert j["data"]["curves"]["sde"]["times"][-1] == pytest.approx(0.5)


def test_figure3_small_network_agrees_with_the_sde_and_dt_check():
    r = figure3(width=100, depth=40, gammas=(0.5, 1.0), samples=1024, ks_gammas=(0.5,), seed=5)
    for row in r.data["rows"]:
        assert row["ks"]["statistic"] <= row["ks"]["critical"], row
        (a, sa), (b, sb) = row["p95_abs_rho"]["network"], row["p95_abs_rho"]["sde"]
        assert abs(a - b) <= Z * math.hypot(sa, sb)
    for key, d in r.data["dt_check"].items():
        if key != "gamma":
            assert d["diff"] <= Z * d["se_diff"], d
    assert set(r.arrays) == {0.5, 1.0}


def test_figure7_reports_the_covariance():
    r = figure7(width=64, depth=16, samples=256, check_dt=False, seed=2)
    assert r.setup["quantity"] == "cov" and r.data["ks"]["n1"] == 256
    assert r.data["ks"]["statistic"] <= r.data["ks"]["critical"]


def test_figure4_interventions():
    r = figure4(width=64, depth=40, samples=64, seed=1)
    c = r.data["curves"]
    assert len(c) == 7 and "only id" in c and "shaped (all three)" in c
    assert c["shaped (all three)"]["mean_rho"][-1] < 0.9
    # without centring the rows of A sum to 2 (identity + Softmax): the covariance explodes
    assert c["only id"]["mean_abs_cov"][-1] > 1e3 * c["shaped (all three)"]["mean_abs_cov"][-1]
    # without the identity (or with the standard temperature only) the Softmax's uniform part collapses rho
    assert c["only tau^2=nn_k"]["mean_rho"][-1] > 0.99


def test_figures_5_and_8_stopping_times_are_capped_at_one():
    r = figure5(gammas=(0.05, 1.0), samples=8, width=40, depth=40, source="network")
    for row in r.data["rows"]:
        assert 0.0 <= row["p10"] <= row["median"] <= 1.0
    r8 = figure8(gammas=(0.1, 1.0), tau0s=(1.0, 2.0), samples=8, width=40, depth=40)
    med = np.asarray(r8.data["median"])
    assert med.shape == (2, 2) and np.all((med >= 0) & (med <= 1))
    # a larger residual weight stops no later (Sec. 4.4): gamma = 1 vs 0.1 at each tau0
    assert np.all(med[1] <= med[0])


def test_a_run_shorter_than_t_1_caps_its_stopping_times_at_its_end():
    """Paths simulated to T = depth/width < 1: a path still inside the bounds at T is reported at T, not at 1."""
    r = figure5(gammas=(0.05,), samples=8, width=40, depth=10, source="network")
    (row,) = r.data["rows"]
    assert row["median"] <= 0.25 and row["p10"] <= row["median"]


def test_run_figure_rejects_unknown_figures_and_sources():
    with pytest.raises(ValueError, match="figure must be one of"):
        run_figure(6)
    with pytest.raises(ValueError, match="source"):
        figure5(gammas=(0.5,), samples=2, width=20, depth=4, source="magic")


def test_ks_test_drops_non_finite_values():
    out = ks_test([0.0, 1.0, np.nan, 2.0], [0.5, np.inf, 1.5])
    assert out["n1"] == 3 and out["n2"] == 2


@pytest.mark.slow
def test_figure1_reproduction_at_the_papers_settings():
    """Fig. 1 at n = 200, d = 150, gamma = 1/sqrt 8, tau0 = 1, rho0 = 0.2, dt = 0.01, 2^12 samples."""
    r = figure1()
    assert r.data["ks"]["statistic"] <= r.data["ks"]["critical"]
    assert r.checks["unshaped_collapses"]
    for d in r.data["dt_check"].values():
        assert d["diff"] <= Z * d["se_diff"]


@pytest.mark.slow
def test_figure3_reproduction_at_the_papers_settings():
    """Fig. 3 at n = 300, d = 100, c+ = 0, c- = -1, 2^13 samples: KS within the alpha = 0.001 critical value at
    gamma in {1/sqrt 8, 1/2, 1/sqrt 2}. (gamma = 1, no skip connection, measured KS 0.033 against a critical value
    0.031 at seed 0: the finite-width correction is largest there; it is reported, not asserted.)"""
    r = figure3()
    for row in r.data["rows"]:
        if any(abs(row["gamma"] - g) < 1e-9 for g in r.setup["ks_gammas"]):
            assert row["ks"]["statistic"] <= row["ks"]["critical"], row


def test_figure3_judges_the_gammas_asked_for():
    """γs asked for that are not the caption's acceptance γs are judged themselves (not "no" for want of overlap),
    and the dt/2 check runs at the first of them; 0.7071 counts as the caption's 1/√2."""
    r = figure3(width=40, depth=8, gammas=(0.3,), samples=256, seed=1)
    assert r.data["dt_check"]["gamma"] == 0.3
    assert r.checks["ks_le_0.05_at_ks_gammas"] == (r.data["rows"][0]["ks"]["statistic"] <= 0.05)
    r = figure3(width=40, depth=8, gammas=(0.3, 0.7071), samples=256, seed=1, check_dt=False)
    assert r.checks["ks_le_0.05_at_ks_gammas"] == (r.data["rows"][1]["ks"]["statistic"] <= 0.05)
