"""DyT rules: identities, quadrature against scipy.integrate, and Monte Carlo on the real module."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate

from sigprop.components.dyt import DyT, dyt_backward, dyt_forward, tanh_expectations
from sigprop.core.gaussian import expect_1d, expect_2d
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import assert_close_mc, mc_mean

# (pre-activation mean m, variance v, correlation r): centred, shifted, saturated (tanh ≈ 1 − 2e^{−2h}),
# wide (where plain Gauss–Hermite fails), anti-correlated, narrow
POINTS = [(0.0, 1.0, 0.5), (1.3, 0.4, 0.9), (6.0, 0.4, 0.99), (0.5, 40.0, 0.99), (-2.0, 3.0, -0.5),
          (0.2, 0.001, 0.2)]

#: Relative accuracy the quadrature of dyt.py is documented to reach (its trapezoid error bound, ~1e-11 at worst).
QUAD_RTOL = 1e-9


def _sech2(x):
    return 1.0 / np.cosh(x) ** 2


# ------------------------------------------------------------------------------------------------------------
# tier 1: identities
# ------------------------------------------------------------------------------------------------------------

def test_zero_mean_special_values():
    e = tanh_expectations(0.0, np.array([0.5, 4.0]), np.array([1.0, 0.0]))
    assert np.allclose(e.phi, 0.0, atol=1e-15)
    assert np.isclose(e.cov[0], e.var[0], rtol=1e-14)  # r = 1
    assert e.cov[1] == 0.0  # r = 0: independent tokens
    # v -> 0: linearisation Var tanh(h) = sech⁴(m) v (relative O(v) correction; v = 1e-12 here)
    f = dyt_forward(Moments(0.8, 1e-10, 0.4), alpha=0.1, gamma=3.0, beta=0.5)
    assert np.isclose(f.mean, 3.0 * np.tanh(0.08) + 0.5, rtol=1e-12)
    assert np.isclose(f.var, 9.0 * _sech2(0.08) ** 2 * 1e-12, rtol=1e-9)
    assert np.isclose(f.corr, 0.4, rtol=1e-9)
    # v -> inf: tanh -> sign, correlation -> arcsine law (2/π) asin r, up to O(1/√v)
    assert np.isclose(dyt_forward(Moments(0.0, 1e8, 0.6), 1.0).corr, 2 / np.pi * np.arcsin(0.6), atol=1e-3)


def test_alekseev_equals_exact_at_zero_mean_and_uses_second_moments_otherwise():
    m0 = Moments(0.0, np.array([0.3, 2.0]), np.array([0.2, 0.9]), corr_hidden=np.array([0.0, 0.5]))
    g = GradMoments(np.array([1.0, 0.5]), np.array([0.5, 0.1]))
    a = np.array([0.3, 1.9])
    fe, fa = dyt_forward(m0, a), dyt_forward(m0, a, approx="alekseev")
    be, ba = dyt_backward(g, m0, a), dyt_backward(g, m0, a, approx="alekseev")
    for x, y in ((fe.var, fa.var), (fe.corr, fa.corr), (fe.corr_hidden, fa.corr_hidden), (be.var, ba.var),
                 (be.corr, ba.corr)):
        assert np.allclose(x, y, rtol=1e-13, atol=1e-15)
    m = Moments(0.7, 0.5, 0.3)
    fa = dyt_forward(m, 1.2, approx="alekseev")
    q = 0.5 + 0.49
    assert fa.mean == 0.0
    assert np.isclose(fa.var, expect_1d(lambda x: np.tanh(x) ** 2, 0.0, 1.44 * q, n=400), rtol=1e-12)
    assert not np.isclose(fa.var, dyt_forward(m, 1.2).var, rtol=1e-3)


def test_affine_parameters_and_symmetry():
    m = Moments(0.3, 1.5, 0.5, corr_hidden=0.2)
    f0, f1 = dyt_forward(m, 0.8), dyt_forward(m, 0.8, gamma=-2.0, beta=0.5)
    assert np.isclose(f1.mean, -2.0 * f0.mean + 0.5) and np.isclose(f1.var, 4.0 * f0.var)
    assert np.isclose(f1.corr, f0.corr) and np.isclose(f1.corr_hidden, f0.corr_hidden)
    g = GradMoments(2.0, 0.4)
    assert np.isclose(dyt_backward(g, m, 0.8, gamma=-2.0).var, 4.0 * dyt_backward(g, m, 0.8).var)
    fm = dyt_forward(Moments(-0.3, 1.5, 0.5), 0.8)
    assert np.isclose(fm.mean, -f0.mean) and np.isclose(fm.var, f0.var) and np.isclose(fm.corr, f0.corr)
    # α and −α give the same statistics up to the sign of the mean
    fn = dyt_forward(m, -0.8)
    assert np.isclose(fn.mean, -f0.mean) and np.isclose(fn.var, f0.var)


def test_agrees_with_gauss_hermite_where_that_converges():
    """For a narrow pre-activation (√v ≤ 1) plain Gauss–Hermite (gaussian.expect_*) is accurate: both must agree."""
    m, v, r = 0.6, 0.8, 0.7
    e = tanh_expectations(m, v, r)
    assert np.isclose(e.phi2, expect_1d(lambda x: np.tanh(x) ** 2, m, v, n=200), rtol=1e-12)
    assert np.isclose(e.phi12, expect_2d(lambda a, b: np.tanh(a) * np.tanh(b), m, v, r, n=120), rtol=1e-12)
    assert np.isclose(e.dphi12, expect_2d(lambda a, b: _sech2(a) * _sech2(b), m, v, r, n=120), rtol=1e-10)


def test_vectorised_over_configurations():
    m = Moments(np.linspace(-1, 1, 4), np.linspace(0.1, 10, 4), np.linspace(0, 0.99, 4))
    a = np.linspace(0.1, 2, 4)
    f, b = dyt_forward(m, a), dyt_backward(GradMoments(1.0, 0.5), m, a)
    for i in range(4):
        mi = Moments(m.mean[i], m.var[i], m.corr[i])
        assert np.isclose(f.corr[i], dyt_forward(mi, a[i]).corr, rtol=1e-13)
        assert np.isclose(b.var[i], dyt_backward(GradMoments(1.0, 0.5), mi, a[i]).var, rtol=1e-13)


# ------------------------------------------------------------------------------------------------------------
# tier 2: quadrature against scipy.integrate
# ------------------------------------------------------------------------------------------------------------

def _quad(f, m, v, pts=(-3.0, -1.0, 0.0, 1.0, 3.0)):
    sd = math.sqrt(v)
    # f e^{−k|x|}-tailed (k ≤ 4) tilts the Gaussian towards 0 by up to 4v: cover that side as well
    lo, hi = min(m - 12 * sd, m - 4 * v - 10 * sd), max(m + 12 * sd, m + 4 * v + 10 * sd)
    pts = [p for p in pts if lo < p < hi] or None
    with warnings.catch_warnings():  # scipy flags round-off once it reaches ~1e-14; the tolerance below is wider
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        return integrate.quad(lambda x: f(x) * math.exp(-((x - m) ** 2) / (2 * v)) / math.sqrt(2 * math.pi * v),
                              lo, hi, points=pts, epsabs=0.0, epsrel=1e-12, limit=500)[0]


def _quad2(f, g, m, v, r):
    b = v * (1.0 - r * r)
    return _quad(lambda x1: f(x1) * _quad(g, m + r * (x1 - m), b), m, v)


@pytest.mark.parametrize("m, v, r", POINTS)
def test_tanh_expectations_against_scipy_quad(m, v, r):
    e = tanh_expectations(m, v, r)
    mu = _quad(math.tanh, m, v)
    assert np.isclose(e.phi, mu, rtol=QUAD_RTOL, atol=1e-14)
    assert np.isclose(e.var, _quad(lambda x: (math.tanh(x) - mu) ** 2, m, v), rtol=QUAD_RTOL)
    assert np.isclose(e.dphi2, _quad(lambda x: _sech2(x) ** 2, m, v), rtol=QUAD_RTOL)
    if v <= 3.0:  # the nested scipy integral is slow for wide v; the 1-D checks above cover that regime
        cov = _quad2(lambda x: math.tanh(x) - mu, lambda x: math.tanh(x) - mu, m, v, r)
        assert np.isclose(e.cov, cov, rtol=QUAD_RTOL, atol=1e-15)
        assert np.isclose(e.dphi12, _quad2(_sech2, _sech2, m, v, r), rtol=QUAD_RTOL)


@pytest.mark.parametrize("m, v, r", [(22.0, 0.3, 0.5), (30.0, 0.3, 0.9), (12.0, 0.6, -0.9), (40.0, 9.0, 0.5)])
def test_saturated_tails_against_scipy_quad(m, v, r):
    """Far in the saturated tail (tanh = 1 − O(e^{−2m})) the rules keep their relative accuracy."""
    e = tanh_expectations(m, v, r)
    sd = math.sqrt(v)
    pts = tuple(np.linspace(m - 4 * v - 10 * sd, m + 10 * sd, 25)[1:-1])

    def u(x):  # 1 − tanh x without cancellation
        return 2.0 / (1.0 + math.exp(min(2.0 * x, 700.0)))

    mu_u = _quad(u, m, v, pts)
    assert np.isclose(e.phi, 1.0 - mu_u, rtol=1e-15)
    assert np.isclose(e.var, _quad(lambda x: (u(x) - mu_u) ** 2, m, v, pts), rtol=QUAD_RTOL)
    assert np.isclose(e.dphi2, _quad(lambda x: _sech2(x) ** 2, m, v, pts), rtol=QUAD_RTOL)
    if v < 1.0:
        b = v * (1 - r * r)
        ref = _quad(lambda x1: _sech2(x1) * _quad(_sech2, m + r * (x1 - m), b), m, v, pts)
        assert np.isclose(e.dphi12, ref, rtol=QUAD_RTOL)


def test_plain_gauss_hermite_would_fail_for_wide_preactivations():
    """Documents why dyt.py does not use expect_1d: at v = 40 the 96-point rule misses E[sech⁴] badly."""
    ref = _quad(lambda x: _sech2(x) ** 2, 0.0, 40.0)
    assert abs(expect_1d(lambda x: _sech2(x) ** 2, 0.0, 40.0) / ref - 1) > 0.1
    assert np.isclose(tanh_expectations(0.0, 40.0, 0.0).dphi2, ref, rtol=QUAD_RTOL)


# ------------------------------------------------------------------------------------------------------------
# tier 3: Monte Carlo
# ------------------------------------------------------------------------------------------------------------

N_MC = 2**20


@pytest.mark.parametrize("m, v, r", POINTS)
def test_tanh_gaussian_expectations_monte_carlo(m, v, r):
    """E[φ²], E[φ(h1)φ(h2)], E[φ'²], E[φ'(h1)φ'(h2)] for φ = tanh: quadrature vs 2^20 sampled pairs."""
    gen = torch.Generator().manual_seed(13)
    z1 = torch.randn(N_MC, generator=gen, dtype=torch.float64)
    z2 = torch.randn(N_MC, generator=gen, dtype=torch.float64)
    h1, h2 = m + math.sqrt(v) * z1, m + math.sqrt(v) * (r * z1 + math.sqrt(1 - r * r) * z2)
    e = tanh_expectations(m, v, r)
    d1, d2 = 1 / torch.cosh(h1) ** 2, 1 / torch.cosh(h2) ** 2
    for name, pred, samples in (("E[phi^2]", e.phi2, torch.tanh(h1) ** 2),
                                ("E[phi1 phi2]", e.phi12, torch.tanh(h1) * torch.tanh(h2)),
                                ("E[phi'^2]", e.dphi2, d1 * d1),
                                ("E[phi'1 phi'2]", e.dphi12, d1 * d2)):
        est, se = mc_mean(samples)
        assert_close_mc(float(pred), est, se, what=f"{name} at m={m}, v={v}, r={r}")


def _run_module(module, m: Moments, g: GradMoments, n=2**16, d=16, seed=7):
    """The real module on (C, n, 2 tokens, d) float64 Gaussian inputs with per-configuration moments (token
    correlation m.corr, hidden correlation m.corr_hidden), backward with correlated Gaussian output gradients."""
    gen = torch.Generator().manual_seed(seed)
    c = len(m.var)

    def col(v):
        return torch.as_tensor(np.asarray(v, dtype=np.float64)).reshape(c, 1, 1, 1)

    def gauss(mu, s2, rt, rh):
        tok = torch.randn(c, n, 1, d, generator=gen, dtype=torch.float64)
        hid = torch.randn(c, n, 2, 1, generator=gen, dtype=torch.float64)
        ind = torch.randn(c, n, 2, d, generator=gen, dtype=torch.float64)
        return mu + torch.sqrt(s2) * (torch.sqrt(rt) * tok + torch.sqrt(rh) * hid + torch.sqrt(1 - rt - rh) * ind)

    zero = np.zeros(c)
    x = gauss(col(m.mean), col(m.var), col(m.corr), col(m.corr_hidden + zero)).requires_grad_(True)
    y = module(x)
    y.backward(gauss(col(zero), col(g.var), col(g.corr), col(zero)))
    return y.detach(), x.grad.detach()


def _check(module, m: Moments, g: GradMoments, hidden: bool):
    fwd, bwd = module.forward_moments(m), module.backward_moments(g, m)
    y, gx = _run_module(module, m, g)
    for i in range(len(m.var)):
        yi, gi, mu = y[i], gx[i], float(fwd.mean[i])
        checks = [("mean", fwd.mean[i], yi), ("var", fwd.var[i], (yi - mu) ** 2), ("grad var", bwd.var[i], gi**2)]
        if hidden:
            checks.append(("hidden cov", fwd.corr_hidden[i] * fwd.var[i],
                           (yi[..., 0::2] - mu) * (yi[..., 1::2] - mu)))
        else:
            checks += [("token cov", fwd.corr[i] * fwd.var[i], (yi[:, 0] - mu) * (yi[:, 1] - mu)),
                       ("grad token cov", bwd.corr[i] * bwd.var[i], gi[:, 0] * gi[:, 1])]
        for name, pred, samples in checks:
            est, se = mc_mean(samples)
            assert_close_mc(float(pred), est, se, what=f"DyT config {i}: {name}")


def test_module_forward_backward_monte_carlo_per_configuration():
    """The real DyT with per-configuration α, γ, β (leading config dimension) and autograd backward."""
    def col(v):
        return torch.tensor(v, dtype=torch.float64).reshape(3, 1, 1, 1)

    module = DyT(alpha=col([0.3, 1.0, 2.0]), gamma=col([1.0, 2.0, 0.5]), beta=col([0.0, -0.3, 1.0]),
                 dtype=torch.float64)
    m = Moments(np.array([0.0, 1.0, -1.0]), np.array([1.0, 0.4, 3.0]), np.array([0.5, 0.9, 0.2]))
    g = GradMoments(np.array([1.0, 3.0, 0.2]), np.array([0.3, 0.8, 0.95]))
    _check(module, m, g, hidden=False)


def test_module_hidden_correlation_monte_carlo():
    module = DyT(alpha=torch.tensor([0.7, 1.5], dtype=torch.float64).reshape(2, 1, 1, 1), dtype=torch.float64)
    m = Moments(np.array([0.5, -0.2]), np.array([2.0, 0.5]), np.zeros(2), corr_hidden=np.array([0.4, 0.8]))
    _check(module, m, GradMoments(np.ones(2), np.zeros(2)), hidden=True)


def test_module_defaults():
    module = DyT(8, alpha=1.2)
    assert module.alpha.shape == () and float(module.alpha.detach()) == pytest.approx(1.2)
    assert module.gamma.shape == (8,) and torch.all(module.gamma == 1) and torch.all(module.beta == 0)
    x = torch.randn(2, 3, 8)
    assert torch.allclose(module(x), torch.tanh(1.2 * x))
    assert float(DyT().alpha.detach()) == 0.5


# ------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------

def test_bad_input_raises():
    m, g = Moments(0.0, 1.0, 0.3), GradMoments(1.0, 0.2)
    with pytest.raises(ValueError, match="alpha"):
        dyt_forward(m, 0.0)
    with pytest.raises(ValueError, match="alpha"):
        dyt_backward(g, m, np.array([1.0, float("nan")]))
    with pytest.raises(ValueError, match="gamma"):
        dyt_forward(m, 1.0, gamma=0.0)
    with pytest.raises(ValueError, match="approx"):
        dyt_backward(g, m, 1.0, approx="kedia")
    with pytest.raises(ValueError, match="m_in"):
        DyT().backward_moments(g)
    module = DyT(4)
    with torch.no_grad():
        module.beta[1] = 0.3
    with pytest.raises(ValueError, match="beta"):
        module.forward_moments(m)
