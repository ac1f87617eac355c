"""Softmax rules (Kedia et al. App. A.7): identities, quadrature, Monte Carlo on the real module, and the sweep's
control variates."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import special

from sigprop.components.softmax import SOFTMAX_APPROX, Softmax, softmax_backward, softmax_forward, softmax_power_moments
from sigprop.core.moments import GradMoments, Moments
from sigprop.verify.specs.softmax import surrogate_moments
from tests.helpers import Z, assert_close_mc, mc_mean

# ---------------------------------------------------------------- tier 1: identities


@pytest.mark.parametrize("approx", SOFTMAX_APPROX)
def test_exact_identities(approx):
    L = np.array([20.0, 300.0, 1e4])
    m = Moments(mean=3.0, var=np.array([0.5, 0.01, 1.0]), corr=np.array([0.0, 0.5, -0.5 / 1e4]))
    f = softmax_forward(m, L, approx)
    b = softmax_backward(GradMoments(2.0, 0.3), m, L, approx)
    np.testing.assert_allclose(f.mean, 1.0 / L, rtol=1e-14)
    np.testing.assert_allclose(f.corr, -1.0 / (L - 1.0), rtol=1e-14)
    np.testing.assert_allclose(b.corr, -1.0 / (L - 1.0), rtol=1e-14)


def test_quadrature_reproduces_the_mean():
    """E p = 1/L is not imposed: the Laplace quadrature must reproduce it."""
    s2 = np.array([1e-4, 0.01, 0.13, 1.0, 2.0])
    for L in (300.0, 1e4):
        np.testing.assert_allclose(softmax_power_moments(s2, L)["p1"] * L, 1.0, rtol=1e-11)
    np.testing.assert_allclose(softmax_power_moments(s2[:4], 10.0)["p1"] * 10.0, 1.0, rtol=1e-9)
    np.testing.assert_allclose(softmax_power_moments(s2, 2.0)["p1"] * 2.0, 1.0, rtol=1e-4)


def test_small_score_limit_is_the_linearisation():
    """p ≈ (1 + x − x̄)/L for small s: var = s²(1 − 1/L)/L² + O(s⁴/L²)."""
    for L in (2.0, 30.0, 300.0):
        s2 = 1e-6
        v = softmax_forward(Moments(0.0, s2, 0.0), L).var
        assert v == pytest.approx(s2 * (1.0 - 1.0 / L) / L**2, rel=1e-5)


def test_large_length_limit_is_table1():
    """As L → ∞ the exact variance tends to the paper's Table 1 form (e^{s²} − 1)/L²."""
    m = Moments(0.0, 0.8, 0.25)
    ex = softmax_forward(m, 1e7).var
    t1 = softmax_forward(m, 1e7, "kedia_table1").var
    assert ex == pytest.approx(t1, rel=1e-5)


def test_kedia_forms_as_printed():
    s2, L = 0.6 * 0.5, 500.0
    m = Moments(0.0, 0.6, 0.5)
    a = s2 * L / (L - 1)
    printed = (math.exp(a) - 1) * math.exp(2 * a) / ((L - 1) * math.exp(s2) + 1) ** 2
    assert softmax_forward(m, L, "kedia").var == pytest.approx(printed, rel=1e-14)
    assert softmax_backward(GradMoments(3.0, 0.0), m, L, "kedia").var == pytest.approx(3.0 * (printed + 1 / L**2))
    assert softmax_forward(m, L, "kedia_table1").var == pytest.approx((math.exp(s2) - 1) / L**2, rel=1e-14)
    assert softmax_backward(GradMoments(3.0, 0.0), m, L, "kedia_table1").var == pytest.approx(
        3.0 * math.exp(s2) / L**2, rel=1e-14)


def test_shared_gradient_cancels():
    m = Moments(0.0, 0.5, 0.1)
    a = softmax_backward(GradMoments(2.0, 0.75), m, 100.0).var
    b = softmax_backward(GradMoments(0.5, 0.0), m, 100.0).var
    assert a == pytest.approx(b, rel=1e-14)


def test_hidden_correlation_limits():
    m0 = Moments(0.0, 0.5, 0.2, corr_hidden=0.0)
    assert abs(softmax_forward(m0, 300.0).corr_hidden) < 1e-12
    m1 = Moments(0.0, 0.5, 0.2, corr_hidden=1.0)
    assert softmax_forward(m1, 300.0).corr_hidden == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------- tier 2: quadrature


def _brute_force_moments(s2, L, n=40):
    """E[p_1^k] and E[p_1² p_2²] for L = 3 by a tensor-product Gauss–Hermite rule over all three scores."""
    z, w = special.roots_hermitenorm(n)
    w = w / np.sqrt(2 * np.pi)
    s = math.sqrt(s2)
    grids = np.meshgrid(*([z] * L), indexing="ij")
    wt = np.ones_like(grids[0])
    for g in np.meshgrid(*([w] * L), indexing="ij"):
        wt = wt * g
    u = [np.exp(s * g) for g in grids]
    S = sum(u)
    p1, p2 = u[0] / S, u[1] / S
    return {"p1": np.sum(wt * p1), "p2": np.sum(wt * p1**2), "p3": np.sum(wt * p1**3), "p4": np.sum(wt * p1**4),
            "p2p2": np.sum(wt * p1**2 * p2**2)}


@pytest.mark.parametrize("s2", [0.01, 0.3, 1.0])
def test_power_moments_match_brute_force_quadrature(s2):
    ref = _brute_force_moments(s2, 3)
    got = softmax_power_moments(s2, 3.0)
    for k in ref:
        assert got[k] == pytest.approx(ref[k], rel=1e-6), k  # short rows are the hard case (see softmax._NT)


def test_delta_method_agrees_with_quadrature():
    """The delta form's documented error is O(s²/L²) relative in the variance."""
    for s2, L in itertools.product([0.01, 0.13, 1.0], [300.0, 3000.0]):
        m = Moments(0.0, s2, 0.0)
        ex = softmax_forward(m, L).var
        de = softmax_forward(m, L, "delta").var
        assert abs(de / ex - 1) < s2 / L  # documented: relative error O(s²/L)
        gex = softmax_backward(GradMoments(1.0, 0.0), m, L).var
        gde = softmax_backward(GradMoments(1.0, 0.0), m, L, "delta").var
        assert abs(gde / gex - 1) < 10 * s2 / L


# ---------------------------------------------------------------- tier 3: Monte Carlo on the real module


@pytest.mark.parametrize("var,r,L", [(1.0, 0.0, 300), (0.5, 0.6, 1000), (0.05, 0.3, 50)])
def test_module_monte_carlo(var, r, L):
    rows = 20000 if L <= 300 else 6000
    gen = torch.Generator().manual_seed(7)
    sm = Softmax(dim=-1, length=L)
    x = math.sqrt(var) * (math.sqrt(1 - r) * torch.randn(rows, L, generator=gen, dtype=torch.float64)
                          + math.sqrt(r) * torch.randn(rows, 1, generator=gen, dtype=torch.float64)) + 0.7
    x.requires_grad_(True)
    y = sm(x)
    rg, sg2 = 0.4, 2.0
    g = math.sqrt(sg2) * (math.sqrt(1 - rg) * torch.randn(rows, L, generator=gen, dtype=torch.float64)
                          + math.sqrt(rg) * torch.randn(rows, 1, generator=gen, dtype=torch.float64))
    y.backward(g)
    m = Moments(0.7, var, r)
    f = sm.forward_moments(m)
    b = sm.backward_moments(GradMoments(sg2, rg), m)
    # per-row statistics are independent samples
    est, se = mc_mean(((y.detach() - 1.0 / L) ** 2).mean(dim=1))
    assert_close_mc(f.var, est, se, what="var")
    est, se = mc_mean((x.grad**2).mean(dim=1))
    assert_close_mc(b.var, est, se, what="grad var")


def test_hidden_correlation_monte_carlo():
    L, rows, h, var, r = 200, 20000, 0.6, 1.0, 0.3
    gen = torch.Generator().manual_seed(3)
    # two softmax rows per sample whose inputs have hidden correlation h (equal positions) and token corr r
    cov2 = torch.tensor([[1.0, h], [h, 1.0]], dtype=torch.float64)
    chol = torch.linalg.cholesky(cov2)
    d = torch.randn(rows, L, 2, generator=gen, dtype=torch.float64) @ chol.T
    c = torch.randn(rows, 1, 2, generator=gen, dtype=torch.float64) @ chol.T
    x = math.sqrt(var) * (math.sqrt(1 - r) * d + math.sqrt(r) * c)
    y = torch.softmax(x, dim=1)
    f = softmax_forward(Moments(0.0, var, r, corr_hidden=h), L)
    cov_est, cov_se = mc_mean(((y[..., 0] - 1 / L) * (y[..., 1] - 1 / L)).mean(dim=1))
    assert_close_mc(f.corr_hidden * f.var, cov_est, cov_se, what="hidden covariance")


# ---------------------------------------------------------------- the sweep's control variates


@pytest.mark.parametrize("s2,L", [(0.3, 50), (1.0, 300)])
def test_surrogate_expectations(s2, L):
    """E of the bounded surrogate statistics used by the sweep (spec module docstring), against plain Monte Carlo."""
    rows = 40000
    gen = torch.Generator().manual_seed(11)
    s = math.sqrt(s2)
    u = torch.exp(s * torch.randn(rows, L, generator=gen, dtype=torch.float64))
    gam = math.sqrt(1.7) * torch.randn(rows, L, generator=gen, dtype=torch.float64)
    big_m = (L - 1) * math.exp(s2 / 2)
    qp = u / (u + big_m)
    srest = u.sum(1, keepdim=True) - u - big_m
    cv = ((qp - 1 / L) ** 2 - 2 * (qp - 1 / L) * qp * srest / (u + big_m)).sum(1)
    resid = gam - (qp * gam).sum(1, keepdim=True)
    cvg = (qp**2 * resid**2 * (1 - 2 * srest / (u + big_m))).sum(1)
    ex = surrogate_moments(s2, L, 1.7)
    for name, sample in (("cv", cv), ("cv_g", cvg)):
        est, se = mc_mean(sample)
        assert_close_mc(float(ex[name]), est, se, what=name)


def test_sweep_estimator_is_unbiased():
    """The sweep's variance-reduced estimate agrees with a plain (no control variate) estimate of the same module."""
    from sigprop.verify.spec import Budget
    from sigprop.verify.specs.softmax import _simulate

    n = 4
    prm = dict(var=np.array([1.0, 0.3, 0.01, 0.5]), corr=np.array([0.0, 0.5, 0.2, 0.9]), grad_var=np.ones(n),
               grad_corr=np.array([0.0, 0.3, 0.6, 0.9]), L=np.full(n, 300.0))
    gen = torch.Generator().manual_seed(5)
    cv = _simulate(prm, Budget(scale=1.0, replicates=8), gen)
    plain = _simulate(prm, Budget(scale=4.0, replicates=8), gen, control_variates=False)
    for q in ("var", "grad_var"):
        for i in range(n):
            tol = Z * math.hypot(cv[q].se[i], plain[q].se[i])
            assert abs(cv[q].value[i] - plain[q].value[i]) <= tol, (q, i)


# ---------------------------------------------------------------- validation


def test_invalid_inputs_raise():
    m = Moments(0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="softmax length L"):
        softmax_forward(m, 1.0)
    with pytest.raises(ValueError, match="approx"):
        softmax_forward(m, 10.0, approx="nope")
    with pytest.raises(ValueError, match="Moments.corr"):
        softmax_forward(Moments(0.0, 1.0, 1.0), 10.0)
    with pytest.raises(ValueError, match="Moments.corr"):
        softmax_forward(Moments(0.0, 1.0, -0.5), 10.0)
    with pytest.raises(ValueError, match="length L is needed"):
        Softmax(dim=-1).forward_moments(m)
    assert Z > 4  # tolerance policy of tests/helpers.py


def test_the_quadrature_refuses_rows_it_cannot_resolve():
    """E p = 1/L exactly; where the quadrature misses it by more than its tolerance (short rows with large
    scores, where E p² was off by 17% at L = 2, s² = 8), the rule refuses instead of answering wrong."""
    from sigprop.components.softmax import SOFTMAX_QUADRATURE_TOLERANCE, softmax_power_moments

    for s2, L in ((8.0, 2), (32.0, 64)):
        with pytest.raises(ValueError, match="outside the range the quadrature resolves"):
            softmax_power_moments(s2, L)
    ok = softmax_power_moments(2.0, 300)
    assert abs(ok["p1"] * 300 - 1.0) <= SOFTMAX_QUADRATURE_TOLERANCE
