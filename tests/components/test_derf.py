"""Derf rules: identities, closed forms against quadrature, and Monte Carlo on the real module."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate, special

from sigprop.components.derf import (
    Derf,
    derf_backward,
    derf_forward,
    erf_cov,
    erf_expectations,
    erf_p_hat,
    erf_p_tilde,
    erf_q_hat,
    erf_q_tilde,
)
from sigprop.core.gaussian import bvn_cdf, norm_cdf
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import assert_close_mc, mc_mean

# (pre-activation mean m, variance v, correlation r): centred, shifted, saturated, wide, anti-correlated, narrow
POINTS = [(0.0, 1.0, 0.5), (1.3, 0.4, 0.9), (-2.0, 3.0, 0.3), (0.5, 40.0, 0.99), (0.7, 2.0, -0.6),
          (3.0, 0.01, 0.2)]


def _dphi(x):
    return 2.0 / math.sqrt(math.pi) * np.exp(-x * x)


# ------------------------------------------------------------------------------------------------------------
# tier 1: identities
# ------------------------------------------------------------------------------------------------------------

def test_zero_mean_is_alekseev_eq89_eq90():
    q, p, a = np.array([0.3, 1.0, 7.0]), np.array([0.1, -0.4, 6.9]), np.array([0.3, 1.0, 1.9])
    e = erf_expectations(0.0, a**2 * q, p / q)
    assert np.allclose(e.phi, 0.0, atol=1e-15)
    assert np.allclose(e.phi2, erf_q_tilde(q, a), rtol=1e-13)
    assert np.allclose(e.phi12, erf_p_tilde(p, q, a), rtol=1e-12, atol=1e-15)
    assert np.allclose(a**2 * e.dphi2, erf_q_hat(q, a), rtol=1e-13)
    assert np.allclose(a**2 * e.dphi12, erf_p_hat(p, q, a), rtol=1e-13)


def test_rules_equal_alekseev_helpers_at_zero_mean_and_shift():
    m = Moments(0.0, np.array([0.2, 1.0, 5.0]), np.array([0.0, 0.5, 0.95]), corr_hidden=np.array([0.1, 0.0, 0.3]))
    a = np.array([0.3, 1.0, 1.9])
    g = GradMoments(np.array([1.0, 2.0, 0.5]), np.array([0.2, 0.9, 0.5]))
    for approx in ("exact", "alekseev"):
        f = derf_forward(m, a, approx=approx)
        q, p = m.var, m.corr * m.var
        assert np.allclose(f.mean, 0.0, atol=1e-15)
        assert np.allclose(f.var, erf_q_tilde(q, a), rtol=1e-13)
        assert np.allclose(f.corr, erf_p_tilde(p, q, a) / erf_q_tilde(q, a), rtol=1e-12, atol=1e-15)
        assert np.allclose(f.corr_hidden, erf_p_tilde(m.corr_hidden * q, q, a) / erf_q_tilde(q, a), atol=1e-13)
        b = derf_backward(g, m, a, approx=approx)
        assert np.allclose(b.var, g.var * erf_q_hat(q, a), rtol=1e-13)
        assert np.allclose(b.corr, g.corr * erf_p_hat(p, q, a) / erf_q_hat(q, a), rtol=1e-13)


def test_alekseev_uses_second_moments_when_mean_nonzero():
    """approx='alekseev' is Eq. 89 on q = σ² + μ², p = rσ² + μ² (the paper's convention), not the exact rule."""
    m = Moments(0.8, 0.5, 0.3)
    f = derf_forward(m, 1.2, approx="alekseev")
    assert f.mean == 0.0
    assert np.isclose(f.var, erf_q_tilde(0.5 + 0.64, 1.2), rtol=1e-14)
    assert not np.isclose(f.var, derf_forward(m, 1.2).var, rtol=1e-3)


def test_symmetries_limits_and_affine():
    # odd function: m -> -m flips the mean, keeps variance and correlations
    e_p, e_m = erf_expectations(1.1, 0.7, 0.4), erf_expectations(-1.1, 0.7, 0.4)
    assert np.isclose(e_p.phi, -e_m.phi) and np.isclose(e_p.var, e_m.var) and np.isclose(e_p.cov, e_m.cov)
    # r = 1: covariance = variance; r = 0: independent tokens
    e1 = erf_expectations(0.9, 0.5, 1.0)
    assert np.isclose(e1.cov, e1.var, rtol=1e-14) and np.isclose(e1.dphi12, e1.dphi2, rtol=1e-14)
    assert abs(erf_cov(0.9, 0.5, 0.0)) < 1e-300
    # v -> inf: erf -> sign, correlation -> arcsine law (2/π) asin r
    m = Moments(0.0, 1e12, 0.6)
    assert np.isclose(derf_forward(m, 1.0).corr, 2.0 / np.pi * np.arcsin(0.6), rtol=1e-5)
    # v -> 0: linearisation σ²_y = γ² α² σ² erf'(αμ + s)², with a relative O(v) correction (here v = 1e-12)
    m = Moments(0.4, 1e-10, 0.3)
    f = derf_forward(m, 0.1, shift=0.7, gamma=2.0, beta=-1.0)
    assert np.isclose(f.mean, 2.0 * special.erf(0.74) - 1.0, rtol=1e-10)
    assert np.isclose(f.var, 4.0 * 0.01 * 1e-10 * _dphi(0.74) ** 2, rtol=1e-9)
    assert np.isclose(f.corr, 0.3, rtol=1e-9)
    # γ scales the spread, β shifts the mean, neither changes correlations; β does not enter the backward pass
    m = Moments(0.3, 1.5, 0.5, corr_hidden=0.2)
    f0, f1 = derf_forward(m, 0.8, 0.2), derf_forward(m, 0.8, 0.2, gamma=-3.0, beta=0.5)
    assert np.isclose(f1.mean, -3.0 * f0.mean + 0.5) and np.isclose(f1.var, 9.0 * f0.var)
    assert np.isclose(f1.corr, f0.corr) and np.isclose(f1.corr_hidden, f0.corr_hidden)
    g = GradMoments(2.0, 0.4)
    assert np.isclose(derf_backward(g, m, 0.8, 0.2, gamma=-3.0).var, 9.0 * derf_backward(g, m, 0.8, 0.2).var)


def test_saturated_variance_has_no_cancellation():
    """Deep in saturation E[erf²] − E[erf]² is lost to round-off; the Plackett form keeps full precision."""
    e = erf_expectations(7.0, 0.4, 0.99)
    assert e.var > 0.0
    k, rho = np.sqrt(2.0) * 7.0 / np.sqrt(1.8), 0.8 / 1.8
    ref = integrate.quad(lambda t: np.exp(-(k**2) / (1.0 + t)) / np.sqrt(1.0 - t * t), 0.0, rho,
                         epsabs=0.0, epsrel=1e-13)[0] * 2.0 / np.pi
    assert np.isclose(e.var, ref, rtol=1e-11)


def test_vectorised_over_configurations():
    m = Moments(np.linspace(-1, 1, 5), np.linspace(0.1, 10, 5), np.linspace(0, 0.99, 5))
    a, s = np.linspace(0.1, 2, 5), np.linspace(-1, 1, 5)
    f = derf_forward(m, a, s)
    for i in range(5):
        fi = derf_forward(Moments(m.mean[i], m.var[i], m.corr[i]), a[i], s[i])
        assert np.isclose(f.var[i], fi.var, rtol=1e-14) and np.isclose(f.corr[i], fi.corr, rtol=1e-14)


# ------------------------------------------------------------------------------------------------------------
# tier 2: closed forms against numerical integration
# ------------------------------------------------------------------------------------------------------------

def _quad(f, m, v):
    sd = math.sqrt(v)
    with warnings.catch_warnings():  # scipy flags round-off once it reaches ~1e-14; the tolerances below are wider
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        return integrate.quad(lambda x: f(x) * math.exp(-((x - m) ** 2) / (2 * v)) / math.sqrt(2 * math.pi * v),
                              m - 12 * sd, m + 12 * sd, epsabs=0.0, epsrel=1e-12, limit=400)[0]


def _quad2(f, g, m, v, r):
    """E[f(h1) g(h2)] by nested quadrature over h1 and h2 | h1."""
    b = v * (1.0 - r * r)
    return _quad(lambda x1: f(x1) * _quad(g, m + r * (x1 - m), b), m, v)


@pytest.mark.parametrize("m, v, r", POINTS[:5])
def test_erf_expectations_against_scipy_quad(m, v, r):
    e = erf_expectations(m, v, r)
    erf = special.erf
    mu = _quad(erf, m, v)
    assert np.isclose(e.phi, mu, rtol=1e-10, atol=1e-14)
    assert np.isclose(e.var, _quad(lambda x: (erf(x) - mu) ** 2, m, v), rtol=1e-9)
    assert np.isclose(e.cov, _quad2(lambda x: erf(x) - mu, lambda x: erf(x) - mu, m, v, r), rtol=1e-8, atol=1e-14)
    assert np.isclose(e.dphi2, _quad(lambda x: _dphi(x) ** 2, m, v), rtol=1e-9)
    assert np.isclose(e.dphi12, _quad2(_dphi, _dphi, m, v, r), rtol=1e-8)


@pytest.mark.parametrize("m, v, r", POINTS)
def test_plackett_form_equals_bivariate_cdf(m, v, r):
    """E[erf h1 erf h2] = 4Φ₂(k, k; ρ) − 4Φ(k) + 1 (gaussian.bvn_cdf, Owen's T) vs the Plackett integral."""
    k, rho = np.sqrt(2) * m / np.sqrt(1 + 2 * v), 2 * r * v / (1 + 2 * v)
    assert np.isclose(erf_expectations(m, v, r).phi12, 4 * bvn_cdf(k, k, rho) - 4 * norm_cdf(k) + 1,
                      rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------------------------------
# tier 3: Monte Carlo
# ------------------------------------------------------------------------------------------------------------

N_MC = 2**20


def _pairs(m, v, r, n, gen):
    z1 = torch.randn(n, generator=gen, dtype=torch.float64)
    z2 = torch.randn(n, generator=gen, dtype=torch.float64)
    s = math.sqrt(v)
    return m + s * z1, m + s * (r * z1 + math.sqrt(1 - r * r) * z2)


@pytest.mark.parametrize("m, v, r", POINTS)
def test_erf_gaussian_expectations_monte_carlo(m, v, r):
    """E[φ²], E[φ(h1)φ(h2)], E[φ'²], E[φ'(h1)φ'(h2)] for φ = erf: closed form vs 2^20 sampled pairs."""
    gen = torch.Generator().manual_seed(11)
    h1, h2 = _pairs(m, v, r, N_MC, gen)
    e = erf_expectations(m, v, r)
    d1, d2 = 2 / math.sqrt(math.pi) * torch.exp(-h1 * h1), 2 / math.sqrt(math.pi) * torch.exp(-h2 * h2)
    for name, pred, samples in (("E[phi^2]", e.phi2, torch.erf(h1) ** 2),
                                ("E[phi1 phi2]", e.phi12, torch.erf(h1) * torch.erf(h2)),
                                ("E[phi'^2]", e.dphi2, d1 * d1),
                                ("E[phi'1 phi'2]", e.dphi12, d1 * d2)):
        est, se = mc_mean(samples)
        assert_close_mc(float(pred), est, se, what=f"{name} at m={m}, v={v}, r={r}")


def _module_moments_mc(module, mean, var, corr, gvar, gcorr, hidden_corr=0.0, n=2**16, d=16, seed=5):
    """Run the real module on (C, n, 2 tokens, d) float64 inputs with per-configuration moments; return per config
    the samples whose means are E[y], Var y, Cov(y_t, y_s), Cov(y_i, y_j) (hidden), σ²_gin, Cov(g_t, g_s)."""
    gen = torch.Generator().manual_seed(seed)
    c = len(mean)

    def col(v):
        return torch.as_tensor(np.asarray(v, dtype=np.float64)).reshape(c, 1, 1, 1)

    def gauss(mu, s2, rt, rh):
        # token-shared, hidden-shared and independent parts: token corr rt, hidden corr rh (separable when rh = 0)
        tok = torch.randn(c, n, 1, d, generator=gen, dtype=torch.float64)
        hid = torch.randn(c, n, 2, 1, generator=gen, dtype=torch.float64)
        ind = torch.randn(c, n, 2, d, generator=gen, dtype=torch.float64)
        z = torch.sqrt(rt) * tok + torch.sqrt(rh) * hid + torch.sqrt(1 - rt - rh) * ind
        return mu + torch.sqrt(s2) * z

    x = gauss(col(mean), col(var), col(corr), col(hidden_corr)).requires_grad_(True)
    y = module(x)
    g = gauss(col(np.zeros(c)), col(gvar), col(gcorr), col(np.zeros(c)))
    y.backward(g)
    return x.grad.detach(), y.detach()


def _check_module(module, m: Moments, g: GradMoments, fwd: Moments, bwd: GradMoments, hidden: bool):
    gx, y = _module_moments_mc(module, m.mean, m.var, m.corr, g.var, g.corr,
                               hidden_corr=m.corr_hidden if hidden else np.zeros_like(m.var))
    for i in range(len(m.var)):
        yi, gi, mu = y[i], gx[i], float(fwd.mean[i])
        checks = [("mean", fwd.mean[i], yi),
                  ("var", fwd.var[i], (yi - mu) ** 2),
                  ("grad var", bwd.var[i], gi**2)]
        if hidden:
            checks.append(("hidden cov", fwd.corr_hidden[i] * fwd.var[i],
                           (yi[..., 0::2] - mu) * (yi[..., 1::2] - mu)))
        else:
            checks += [("token cov", fwd.corr[i] * fwd.var[i], (yi[:, 0] - mu) * (yi[:, 1] - mu)),
                       ("grad token cov", bwd.corr[i] * bwd.var[i], gi[:, 0] * gi[:, 1])]
        for name, pred, samples in checks:
            est, se = mc_mean(samples)
            assert_close_mc(float(pred), est, se, what=f"Derf config {i}: {name}")


def test_module_forward_backward_monte_carlo_per_configuration():
    """The real Derf module with per-configuration α, s, γ, β (leading config dimension), autograd backward."""
    alpha = np.array([0.3, 1.0, 1.9])
    shift = np.array([0.0, 0.5, -1.0])
    gamma, beta = np.array([1.0, 2.0, 0.5]), np.array([0.0, -0.3, 1.0])
    m = Moments(np.array([0.0, 1.0, 0.3]), np.array([1.0, 0.4, 3.0]), np.array([0.5, 0.9, 0.2]))
    g = GradMoments(np.array([1.0, 3.0, 0.2]), np.array([0.3, 0.8, 0.95]))
    module = Derf(alpha=torch.tensor(alpha).reshape(3, 1, 1, 1), shift=torch.tensor(shift).reshape(3, 1, 1, 1),
                  gamma=torch.tensor(gamma).reshape(3, 1, 1, 1), beta=torch.tensor(beta).reshape(3, 1, 1, 1),
                  dtype=torch.float64)
    fwd, bwd = module.forward_moments(m), module.backward_moments(g, m)
    assert np.allclose(fwd.var, derf_forward(m, alpha, shift, gamma, beta).var)
    _check_module(module, m, g, fwd, bwd, hidden=False)


def test_module_hidden_correlation_monte_carlo():
    m = Moments(np.array([0.5, -0.2]), np.array([2.0, 0.5]), np.array([0.0, 0.0]),
                corr_hidden=np.array([0.4, 0.8]))
    g = GradMoments(np.ones(2), np.zeros(2))
    module = Derf(alpha=torch.tensor([0.7, 1.5], dtype=torch.float64).reshape(2, 1, 1, 1),
                  shift=torch.tensor([0.3, 0.0], dtype=torch.float64).reshape(2, 1, 1, 1), dtype=torch.float64)
    _check_module(module, m, g, module.forward_moments(m), module.backward_moments(g, m), hidden=True)


def test_module_default_and_per_channel_parameters():
    module = Derf(8)
    assert module.alpha.shape == () and float(module.alpha.detach()) == 0.5 and float(module.shift.detach()) == 0.0
    assert module.gamma.shape == (8,) and torch.all(module.gamma == 1) and torch.all(module.beta == 0)
    x = torch.randn(2, 3, 8)
    assert torch.allclose(module(x), torch.erf(0.5 * x))
    f = module.forward_moments(Moments(0.0, 1.0, 0.3))
    assert np.isclose(f.var, erf_q_tilde(1.0, 0.5))
    with torch.no_grad():
        module.gamma[0] = 2.0
    with pytest.raises(ValueError, match="gamma"):
        module.forward_moments(Moments())


# ------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------

def test_bad_input_raises():
    m, g = Moments(0.0, 1.0, 0.3), GradMoments(1.0, 0.2)
    with pytest.raises(ValueError, match="alpha"):
        derf_forward(m, 0.0)
    with pytest.raises(ValueError, match="gamma"):
        derf_forward(m, 1.0, gamma=0.0)
    with pytest.raises(ValueError, match="beta"):
        derf_forward(m, 1.0, beta=float("nan"))
    with pytest.raises(ValueError, match="shift"):
        derf_backward(g, m, 1.0, shift=float("inf"))
    with pytest.raises(ValueError, match="approx"):
        derf_forward(m, 1.0, approx="kedia")
    with pytest.raises(ValueError, match="shift s = 0"):
        derf_forward(m, 1.0, shift=0.5, approx="alekseev")
    with pytest.raises(ValueError, match="shift s = 0"):
        derf_backward(g, m, 1.0, shift=0.5, approx="alekseev")
    with pytest.raises(ValueError, match="q"):
        erf_q_tilde(0.0, 1.0)
    with pytest.raises(ValueError, match="p"):
        erf_p_hat(2.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="m_in"):
        Derf().backward_moments(g)
