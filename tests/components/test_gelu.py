"""GeLU rules: identities and the paper's printed forms, closed forms vs Price-theorem evaluation vs quadrature
(scipy.integrate, Gauss–Hermite), Monte Carlo on the real module (including a nonzero input mean), bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from sigprop.components.gelu import (
    GELU,
    gelu_backward,
    gelu_cross_moment,
    gelu_cross_moment_closed,
    gelu_forward,
    gelu_grad_cross_moment,
    gelu_grad_cross_moment_closed,
    gelu_mean,
)
from sigprop.components.relu import MIN_STANDARDIZED_MEAN
from sigprop.core.gaussian import expect_1d, expect_2d, norm_cdf, norm_pdf
from sigprop.core.moments import GradMoments, Moments
from tests.components.test_relu import check_mc

QUAD_TOL = 1e-13
QUAD_RTOL = 1e-9

S = np.geomspace(0.1, 10.0, 7)[:, None]
R = np.linspace(-1.0, 1.0, 9)[None, :]


def gelu(x):
    return x * norm_cdf(x)


def dgelu(x):
    return norm_cdf(x) + x * norm_pdf(x)


# ------------------------------------------------------------------------------------------------------------
# tier 1: identities and the paper's printed zero-mean forms
# ------------------------------------------------------------------------------------------------------------

def test_zero_mean_equals_papers_printed_forms():
    """At μ = 0 the exact rules equal Kedia et al. App. A.5 / Tables 15–18, 20 (written out here independently)."""
    s, r = S + 0 * R, R + 0 * S
    m = Moments(0.0, s, r, corr_hidden=r[:, ::-1])
    f, fk = gelu_forward(m), gelu_forward(m, approx="kedia")
    var = s / (2 * np.pi) * (np.pi / 2 - s / (1 + s) + np.arcsin(s / (1 + s)) + 2 * s / ((1 + s) * np.sqrt(1 + 2 * s)))
    cov = s / (4 * np.pi) * (np.pi * r + 2 * r * np.arcsin(r * s / (s + 1))
                             + 2 * s * (s * (1 - r**2) + 1 + r**2) / ((s + 1) * np.sqrt((s + 1) ** 2 - (r * s) ** 2))
                             - 2 * s / (s + 1))
    for out in (f, fk):
        assert np.allclose(out.mean, s / np.sqrt(2 * np.pi * (s + 1)), rtol=1e-13)
        assert np.allclose(out.var, var, rtol=1e-12)
        assert np.allclose(out.corr * out.var, cov, rtol=1e-10, atol=1e-13)
        assert np.allclose(out.corr_hidden, out.corr[:, ::-1], rtol=1e-10, atol=1e-13)
    g = GradMoments(2.0 + 0 * s, 0.7 + 0 * r)
    b, bk = gelu_backward(g, m), gelu_backward(g, m, approx="kedia")
    g2 = 0.25 + np.arcsin(s / (s + 1)) / (2 * np.pi) + s * (5 * s + 3) / (2 * np.pi * (s + 1) * (2 * s + 1) ** 1.5)
    d = (s + 1) ** 2 - (r * s) ** 2
    gg = (0.25 + np.arcsin(r * s / (s + 1)) / (2 * np.pi)
          + r * s * ((2 * s + 3) * (s + 1) - 2 * (r * s) ** 2) / (2 * np.pi * (s + 1) * d**1.5))
    for out in (b, bk):
        assert np.allclose(out.var, 2.0 * g2, rtol=1e-12)
        assert np.allclose(out.corr * out.var, 2.0 * 0.7 * gg, rtol=1e-10, atol=1e-13)


def test_limits():
    # σ² → 0: G(x) ≈ G(μ) + G'(μ)(x − μ) + G''(μ)(x − μ)²/2 with G'' = (2 − x²)φ: mean → G(μ) + G''(μ)σ²/2,
    # var → G'(μ)² σ² (relative O(σ²) corrections), correlations unchanged
    for mean in (0.0, 0.9, -1.4):
        s = 1e-8
        f = gelu_forward(Moments(mean, s, 0.3, corr_hidden=-0.6))
        b = gelu_backward(GradMoments(1.0, 0.8), Moments(mean, s, 0.3))
        assert np.isclose(f.mean, gelu(mean) + (2 - mean**2) * norm_pdf(mean) * s / 2, rtol=1e-6, atol=1e-15)
        assert np.isclose(f.var, dgelu(mean) ** 2 * s, rtol=1e-6)
        assert np.isclose(f.corr, 0.3, atol=1e-6) and np.isclose(f.corr_hidden, -0.6, atol=1e-6)
        assert np.isclose(b.var, dgelu(mean) ** 2, rtol=1e-6) and np.isclose(b.corr, 0.8, atol=1e-6)
    # μ → +∞: identity
    m = Moments(60.0, 2.0, 0.37, corr_hidden=0.2)
    f, b = gelu_forward(m), gelu_backward(GradMoments(3.0, 0.6), m)
    assert np.isclose(f.mean, 60.0, rtol=1e-15) and np.isclose(f.var, 2.0, rtol=1e-13)
    assert np.isclose(f.corr, 0.37, rtol=1e-13) and np.isclose(f.corr_hidden, 0.2, rtol=1e-13)
    assert np.isclose(b.var, 3.0, rtol=1e-13) and np.isclose(b.corr, 0.6, rtol=1e-13)
    # r = 1 and r = 0
    for mean in (0.0, 1.5, -2.0):
        f = gelu_forward(Moments(mean, 1.7, 1.0, corr_hidden=0.0))
        assert np.isclose(f.corr, 1.0, rtol=1e-13) and abs(f.corr_hidden) < 1e-13
        b = gelu_backward(GradMoments(1.0, 0.8), Moments(mean, 1.7, 0.0))
        e_grad = expect_1d(dgelu, mean, 1.7, n=200)
        assert np.isclose(b.corr, e_grad**2 / expect_1d(lambda x: dgelu(x) ** 2, mean, 1.7, n=200) * 0.8,
                          rtol=1e-9)


def test_rules_broadcast_like_scalar_calls():
    mean, var, corr = np.array([-1.0, 0.0, 2.5]), np.array([0.3, 1.0, 7.0]), np.array([0.1, 0.5, 0.95])
    f = gelu_forward(Moments(mean, var, corr))
    b = gelu_backward(GradMoments(np.array([1.0, 2.0, 0.5]), 0.4), Moments(mean, var, corr))
    for i in range(3):
        fi = gelu_forward(Moments(mean[i], var[i], corr[i]))
        bi = gelu_backward(GradMoments([1.0, 2.0, 0.5][i], 0.4), Moments(mean[i], var[i], corr[i]))
        assert np.isclose(f.var[i], fi.var, rtol=1e-14) and np.isclose(f.corr[i], fi.corr, rtol=1e-14)
        assert np.isclose(b.var[i], bi.var, rtol=1e-14) and np.isclose(b.corr[i], bi.corr, rtol=1e-14)


# ------------------------------------------------------------------------------------------------------------
# tier 2: closed forms, the Price-theorem evaluation and numerical quadrature
# ------------------------------------------------------------------------------------------------------------

def test_price_evaluation_equals_closed_forms():
    """Two independent derivations of the same any-mean expectations (where the closed forms are well conditioned)."""
    mean = np.linspace(-2.5, 3.0, 12)[:, None, None]
    s = np.geomspace(1e-3, 1e3, 13)[None, :, None]
    r = np.array([-1.0, -0.6, 0.0, 0.3, 0.9, 0.999, 1.0])
    var = gelu_cross_moment_closed(mean, s, 1.0)
    assert np.allclose(gelu_cross_moment(mean, s, r) / var, gelu_cross_moment_closed(mean, s, r) / var,
                       rtol=0, atol=1e-9)
    g2 = gelu_grad_cross_moment_closed(mean, s, 1.0)
    assert np.allclose(gelu_grad_cross_moment(mean, s, r) / g2, gelu_grad_cross_moment_closed(mean, s, r) / g2,
                       rtol=0, atol=1e-12)


def test_mean_against_gauss_hermite():
    mean, s = np.array([-3.0, -0.5, 0.0, 1.2, 4.0]), np.array([0.1, 2.0, 10.0, 0.5, 3.0])
    assert np.allclose(gelu_mean(mean, s), expect_1d(gelu, mean, s, n=200), rtol=1e-12)


def _quad_pair(mean, var, rho):
    """(Cov(G(X), G(Y)), E[G'(X)G'(Y)]) by 1-D scipy quadrature over X, with Y | X handled by the elementary
    one-dimensional identities E[G(N(m, v))] = mΦ(m/√(1+v)) + vφ(m/√(1+v))/√(1+v) and its m-derivative."""
    sd = math.sqrt(var)
    vc = var * (1 - rho**2)

    def cond_mean(x):
        return mean + rho * (x - mean)

    def eg(m):
        return m * norm_cdf(m / math.sqrt(1 + vc)) + vc * norm_pdf(m / math.sqrt(1 + vc)) / math.sqrt(1 + vc)

    def edg(m):
        u = m / math.sqrt(1 + vc)
        return norm_cdf(u) + u * norm_pdf(u) / (1 + vc)

    def dens(x):
        return norm_pdf((x - mean) / sd) / sd

    lo, hi = mean - 40 * sd, mean + 40 * sd
    kw = dict(epsabs=0.0, epsrel=QUAD_TOL, limit=400, points=sorted({0.0, mean}) if lo < 0 < hi else [mean])
    exy = integrate.quad(lambda x: gelu(x) * eg(cond_mean(x)) * dens(x), lo, hi, **kw)[0]
    egg = integrate.quad(lambda x: dgelu(x) * edg(cond_mean(x)) * dens(x), lo, hi, **kw)[0]
    m1 = integrate.quad(lambda x: gelu(x) * dens(x), lo, hi, **kw)[0]
    return exy - m1**2, egg


@pytest.mark.parametrize("mean,var,rho", [(0.7, 2.0, 0.6), (-1.5, 0.5, 0.3), (2.0, 10.0, -0.4), (-3.0, 1.0, 0.9),
                                          (0.0, 0.1, 0.99), (5.0, 0.1, 0.2)])
def test_exact_forward_backward_against_quadrature(mean, var, rho):
    f = gelu_forward(Moments(mean, var, rho))
    b = gelu_backward(GradMoments(1.0, 1.0), Moments(mean, var, rho))
    cov, egg = _quad_pair(mean, var, rho)
    var_q, g2_q = _quad_pair(mean, var, 1.0 - 1e-15)
    assert np.isclose(f.var, var_q, rtol=QUAD_RTOL) and np.isclose(b.var, g2_q, rtol=QUAD_RTOL)
    assert np.isclose(f.corr * f.var, cov, rtol=QUAD_RTOL, atol=QUAD_RTOL * f.var)
    assert np.isclose(b.corr * b.var, egg, rtol=QUAD_RTOL, atol=QUAD_RTOL * b.var)


@pytest.mark.parametrize("mean,var,rho", [(0.4, 1.0, 0.5), (-1.0, 0.3, -0.7), (1.5, 2.0, 0.95)])
def test_exact_against_gauss_hermite_2d(mean, var, rho):
    """Tensor Gauss–Hermite (accurate for the smooth GeLU at moderate σ²) as a second, independent quadrature."""
    cov = expect_2d(lambda x, y: gelu(x) * gelu(y), mean, var, rho, n=96) - expect_1d(gelu, mean, var, n=96) ** 2
    egg = expect_2d(lambda x, y: dgelu(x) * dgelu(y), mean, var, rho, n=96)
    assert np.isclose(gelu_cross_moment(mean, var, rho), cov, rtol=1e-10, atol=1e-12)
    assert np.isclose(gelu_grad_cross_moment(mean, var, rho), egg, rtol=1e-10)


def test_negative_tail_keeps_precision():
    """μ/√(1+σ²) = −6: the closed forms lose ~7 digits there (documented); the rules must not."""
    mean, var, rho = -6.0 * math.sqrt(1.1), 0.1, 0.2
    cov, egg = _quad_pair(mean, var, rho)
    var_q, g2_q = _quad_pair(mean, var, 1.0 - 1e-15)
    f = gelu_forward(Moments(mean, var, rho))
    b = gelu_backward(GradMoments(1.0, 1.0), Moments(mean, var, rho))
    assert np.isclose(f.var, var_q, rtol=1e-8) and np.isclose(f.corr, cov / var_q, rtol=1e-8)
    assert np.isclose(b.var, g2_q, rtol=1e-8) and np.isclose(b.corr, egg / g2_q, rtol=1e-8)


# ------------------------------------------------------------------------------------------------------------
# tier 3: Monte Carlo on the real module
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mean,var,corr,corr_h", [(0.0, 2.0, 0.6, 0.3), (0.8, 1.5, 0.4, -0.3),
                                                  (-1.5, 3.0, 0.9, 0.5)])
def test_monte_carlo_on_module(mean, var, corr, corr_h):
    check_mc(GELU(), gelu_forward, gelu_backward, Moments(mean, var, corr, corr_h), GradMoments(1.7, 0.55))


def test_module_is_exact_erf_gelu_and_forwards_moments():
    mod = GELU()
    assert isinstance(mod, torch.nn.GELU) and mod.approximate == "none"
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    assert torch.allclose(mod(x), torch.tensor(gelu(x.numpy())), rtol=1e-12, atol=1e-15)
    m = Moments(0.3, 2.0, 0.5)
    assert mod.forward_moments(m) == gelu_forward(m)
    assert mod.forward_moments(m, approx="kedia") == gelu_forward(m, approx="kedia")
    assert mod.backward_moments(GradMoments(1.0, 0.2), m) == gelu_backward(GradMoments(1.0, 0.2), m)


# ------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------

def test_bad_input_raises():
    m = Moments(0.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="approx"):
        gelu_forward(m, approx="kedia_table1")  # the paper's Table 1 has no GeLU row
    with pytest.raises(ValueError, match="approx"):
        gelu_backward(GradMoments(), m, approx="tanh")
    far = Moments(1.01 * MIN_STANDARDIZED_MEAN * math.sqrt(2.0), 1.0, 0.5)
    with pytest.raises(ValueError, match="mean"):
        gelu_forward(far)
    with pytest.raises(ValueError, match="mean"):
        gelu_backward(GradMoments(), far)
    gelu_forward(Moments(0.99 * MIN_STANDARDIZED_MEAN * math.sqrt(2.0), 1.0, 0.5))  # just inside: fine
    with pytest.raises(ValueError, match="Moments.corr"):
        gelu_forward(Moments(0.0, 1.0, 1.5))
