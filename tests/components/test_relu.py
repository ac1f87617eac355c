"""ReLU rules: identities and the paper's printed forms, quadrature (scipy.integrate), Monte Carlo on the real
module (including a nonzero input mean), bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from sigprop.components.relu import (
    MIN_STANDARDIZED_MEAN,
    ReLU,
    relu_backward,
    relu_cross_moment,
    relu_forward,
    truncated_bvn_moments,
)
from sigprop.core.gaussian import norm_cdf, norm_pdf
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import assert_close_mc, mc_mean

#: scipy.integrate tolerances used below, and the agreement they allow.
QUAD_TOL = 1e-12
QUAD_RTOL = 1e-9

S = np.geomspace(0.1, 10.0, 7)[:, None]
R = np.linspace(-1.0, 1.0, 9)[None, :]


# ------------------------------------------------------------------------------------------------------------
# tier 1: identities and the paper's printed zero-mean forms
# ------------------------------------------------------------------------------------------------------------

def test_zero_mean_equals_papers_printed_forms():
    """At μ = 0 the exact rules reduce to Kedia et al. App. A.4 / Tables 15–20 (written out here independently)."""
    m = Moments(0.0, S + 0 * R, R + 0 * S, corr_hidden=R[:, ::-1] + 0 * S)
    f = relu_forward(m)
    assert np.allclose(f.mean, np.sqrt(S / (2 * np.pi)), rtol=1e-14)
    assert np.allclose(f.var, (np.pi - 1) / (2 * np.pi) * S, rtol=1e-14)
    for r_in, r_out in ((m.corr, f.corr), (m.corr_hidden, f.corr_hidden)):
        # Table 18/19: Cov_out = (1/4 + asin(r)/(2π)) Cov_in − (1 − √(1−r²)) σ²/(2π)
        cov = (0.25 + np.arcsin(r_in) / (2 * np.pi)) * r_in * S - (1 - np.sqrt(1 - r_in**2)) * S / (2 * np.pi)
        assert np.allclose(r_out * f.var, cov, rtol=1e-12, atol=1e-15)
    kedia = relu_forward(m, approx="kedia")
    for q in ("mean", "var", "corr", "corr_hidden"):
        assert np.allclose(getattr(f, q), getattr(kedia, q), rtol=1e-12, atol=1e-15)
    g = GradMoments(2.0 + 0 * S, 0.7 + 0 * R)
    b, bk = relu_backward(g, m), relu_backward(g, m, approx="kedia")
    assert np.allclose(b.var, 1.0, rtol=1e-14)  # σ²_g / 2
    assert np.allclose(b.corr, (0.5 + np.arcsin(m.corr) / np.pi) * 0.7, rtol=1e-12, atol=1e-15)  # Table 20
    assert np.allclose(b.var, bk.var) and np.allclose(b.corr, bk.corr, atol=1e-15)


def test_special_correlations():
    for mean in (0.0, 1.3, -2.0):
        f = relu_forward(Moments(mean, 1.7, 1.0, corr_hidden=0.0))
        assert np.isclose(f.corr, 1.0, rtol=1e-12)  # identical inputs
        assert abs(f.corr_hidden) < 1e-12  # independent inputs
        b = relu_backward(GradMoments(1.0, 0.8), Moments(mean, 1.7, 1.0))
        assert np.isclose(b.corr, 0.8, rtol=1e-12)
        b0 = relu_backward(GradMoments(1.0, 0.8), Moments(mean, 1.7, 0.0))
        assert np.isclose(b0.corr, norm_cdf(mean / np.sqrt(1.7)) * 0.8, rtol=1e-12)  # P(x_s > 0) r_g
    # anti-correlated zero-mean inputs: r_out = −1/(π − 1), and the gradient gates never open together
    assert np.isclose(relu_forward(Moments(0.0, 1.0, -1.0)).corr, -1 / (np.pi - 1), rtol=1e-12)
    assert abs(relu_backward(GradMoments(1.0, 0.5), Moments(0.0, 1.0, -1.0)).corr) < 1e-15


def test_large_positive_mean_is_identity():
    m = Moments(40.0, 1.0, 0.37, corr_hidden=0.2)
    f = relu_forward(m)
    assert np.isclose(f.mean, 40.0, rtol=1e-15) and np.isclose(f.var, 1.0, rtol=1e-13)
    assert np.isclose(f.corr, 0.37, rtol=1e-13) and np.isclose(f.corr_hidden, 0.2, rtol=1e-13)
    b = relu_backward(GradMoments(3.0, 0.6), m)
    assert np.isclose(b.var, 3.0, rtol=1e-15) and np.isclose(b.corr, 0.6, rtol=1e-13)


def test_table1_simplification_is_the_stated_fit():
    r = np.linspace(0.0, 1.0, 1001)
    m = Moments(0.0, 2.0, r, corr_hidden=r[::-1])
    t1, exact = relu_forward(m, approx="kedia_table1"), relu_forward(m)
    assert np.allclose(t1.corr, 0.7 * r + 0.3 * r**2)
    assert np.allclose(t1.corr_hidden, 0.7 * r[::-1] + 0.3 * r[::-1] ** 2)
    assert np.max(np.abs(t1.corr - exact.corr)) < 0.0061  # the bound stated in relu_forward's docstring
    assert t1.mean == exact.mean and np.isclose(t1.var, exact.var)
    b = relu_backward(GradMoments(1.0, 0.5), m, approx="kedia_table1")
    assert np.allclose(b.corr, (0.5 + np.arcsin(r) / np.pi) * 0.5)


def test_rules_broadcast_like_scalar_calls():
    mean, var, corr = np.array([-1.0, 0.0, 2.5]), np.array([0.3, 1.0, 7.0]), np.array([0.1, 0.5, 0.95])
    f = relu_forward(Moments(mean, var, corr))
    b = relu_backward(GradMoments(np.array([1.0, 2.0, 0.5]), 0.4), Moments(mean, var, corr))
    for i in range(3):
        fi = relu_forward(Moments(mean[i], var[i], corr[i]))
        bi = relu_backward(GradMoments([1.0, 2.0, 0.5][i], 0.4), Moments(mean[i], var[i], corr[i]))
        assert np.isclose(f.var[i], fi.var, rtol=1e-15) and np.isclose(f.corr[i], fi.corr, rtol=1e-15)
        assert np.isclose(b.var[i], bi.var, rtol=1e-15) and np.isclose(b.corr[i], bi.corr, rtol=1e-15)


# ------------------------------------------------------------------------------------------------------------
# tier 2: closed forms against numerical quadrature
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,rho", [(0.0, 0.3), (1.2, 0.7), (-0.8, 0.2), (2.0, -0.5), (-2.5, 0.95), (0.4, 1.0)])
def test_truncated_bvn_moments_against_dblquad(a, rho):
    got = truncated_bvn_moments(a, rho)
    if rho == 1.0:  # one-dimensional truncated moments of Z over Z > −a
        want = [integrate.quad(lambda z, k=k: z**k * norm_pdf(z), -a, np.inf, epsabs=QUAD_TOL)[0] for k in (0, 1, 2)]
        want = want + [want[2]]
    else:
        s = math.sqrt(1 - rho**2)

        def dens(z2, z1):
            return norm_pdf(z1) * norm_pdf((z2 - rho * z1) / s) / s

        want = [integrate.dblquad(lambda z2, z1, f=f: f(z1, z2) * dens(z2, z1), -a, 12, -a, 12,
                                  epsabs=QUAD_TOL, epsrel=QUAD_TOL)[0]
                for f in (lambda z1, z2: 1.0, lambda z1, z2: z1, lambda z1, z2: z1 * z1, lambda z1, z2: z1 * z2)]
    assert np.allclose(got, want, rtol=QUAD_RTOL, atol=QUAD_RTOL)


def _relu_mean_1d(m, v):
    """E[relu(N(m, v))] = mΦ(m/√v) + √v φ(m/√v) (elementary)."""
    sd = math.sqrt(v)
    return m * norm_cdf(m / sd) + sd * norm_pdf(m / sd)


def _quad_moments(mean, var, rho):
    """Cov(relu X, relu Y) and P(X > 0, Y > 0) by 1-D quadrature over X with Y | X in closed form."""
    sd = math.sqrt(var)

    def cond(x):  # Y | X = x ~ N(μ + ρ(x − μ), σ²(1 − ρ²))
        return mean + rho * (x - mean), var * (1 - rho**2)

    def dens(x):
        return norm_pdf((x - mean) / sd) / sd

    lo, hi = 0.0, mean + 40 * sd
    exy = integrate.quad(lambda x: x * _relu_mean_1d(*cond(x)) * dens(x), lo, hi, epsabs=QUAD_TOL,
                         epsrel=QUAD_TOL, limit=200)[0]
    both = integrate.quad(lambda x: norm_cdf(cond(x)[0] / math.sqrt(cond(x)[1])) * dens(x), lo, hi,
                          epsabs=QUAD_TOL, epsrel=QUAD_TOL, limit=200)[0]
    return exy - _relu_mean_1d(mean, var) ** 2, both


@pytest.mark.parametrize("mean,var,rho", [(0.7, 2.0, 0.6), (-1.5, 0.5, 0.3), (2.0, 10.0, -0.4), (-3.0, 1.0, 0.9),
                                          (0.0, 0.1, 0.99), (5.0, 0.1, 0.2)])
def test_exact_forward_backward_against_quadrature(mean, var, rho):
    f = relu_forward(Moments(mean, var, rho, corr_hidden=rho / 2))
    cov, both = _quad_moments(mean, var, rho)
    cov_h, _ = _quad_moments(mean, var, rho / 2)
    assert np.isclose(f.mean, _relu_mean_1d(mean, var), rtol=1e-14)
    # the variance is the ρ → 1 limit; check it against the direct one-dimensional integral
    sd = math.sqrt(var)
    e2 = integrate.quad(lambda x: x * x * norm_pdf((x - mean) / sd) / sd, 0.0, np.inf, epsabs=QUAD_TOL)[0]
    assert np.isclose(f.var, e2 - f.mean**2, rtol=QUAD_RTOL)
    assert np.isclose(f.corr * f.var, cov, rtol=QUAD_RTOL, atol=QUAD_RTOL * f.var)
    assert np.isclose(f.corr_hidden * f.var, cov_h, rtol=QUAD_RTOL, atol=QUAD_RTOL * f.var)
    b = relu_backward(GradMoments(1.0, 1.0), Moments(mean, var, rho))
    assert np.isclose(b.var, norm_cdf(mean / sd), rtol=1e-14)
    assert np.isclose(b.corr * b.var, both, rtol=QUAD_RTOL, atol=1e-14)


def test_reflection_identity_holds_for_the_unreflected_formula():
    """relu_cross_moment evaluates μ > 0 through Cov(μ) = ρσ²(1 − 2Φ(−a)) + Cov(−μ); check that identity against
    the direct truncated-moment formula, which is accurate for moderate μ > 0."""
    for mean, var, rho in ((0.9, 1.3, 0.4), (2.0, 0.5, -0.6), (0.3, 8.0, 0.97)):
        a = mean / math.sqrt(var)
        big_l, m1, _, m12 = truncated_bvn_moments(a, rho)
        direct = var * (a * a * big_l + 2 * a * m1 + m12 - (a * norm_cdf(a) + norm_pdf(a)) ** 2)
        assert np.isclose(relu_cross_moment(mean, var, rho), direct, rtol=1e-12)


# ------------------------------------------------------------------------------------------------------------
# tier 3: Monte Carlo on the real module
# ------------------------------------------------------------------------------------------------------------

def _chol2(r):
    return torch.tensor([[1.0, 0.0], [r, math.sqrt(1.0 - r * r)]], dtype=torch.float64)


def _simulate(module, m: Moments, g: GradMoments, rows: int = 2**18):
    """Rows of a (2 tokens × 2 hidden units) block with Cov = σ² R ⊗ H, pushed through ``module`` and back with
    zero-mean output gradients (token correlation g.corr, hidden units independent) drawn independently of x."""
    z = torch.randn(rows, 2, 2, dtype=torch.float64)
    x = m.mean + math.sqrt(m.var) * _chol2(m.corr) @ z @ _chol2(m.corr_hidden).T
    x.requires_grad_(True)
    y = module(x)
    gout = math.sqrt(g.var) * _chol2(g.corr) @ torch.randn(rows, 2, 2, dtype=torch.float64)
    y.backward(gout)
    return y.detach(), x.grad


def check_mc(module, forward, backward, m: Moments, g: GradMoments):
    """Every predicted moment against its Monte Carlo estimate, tolerance Z × standard error (tests/helpers.py).

    Second moments are estimated around the *predicted* mean, which the first assertion checks."""
    f, b = forward(m), backward(g, m)
    y, gin = _simulate(module, m, g)
    assert_close_mc(f.mean, *mc_mean(y), what="mean")
    c = y - f.mean
    assert_close_mc(f.var, *mc_mean(c * c), what="var")
    assert_close_mc(f.corr * f.var, *mc_mean(c[:, 0, :] * c[:, 1, :]), what="token covariance")
    assert_close_mc(f.corr_hidden * f.var, *mc_mean(c[:, :, 0] * c[:, :, 1]), what="hidden covariance")
    assert_close_mc(b.var, *mc_mean(gin * gin), what="grad var")
    assert_close_mc(b.corr * b.var, *mc_mean(gin[:, 0, :] * gin[:, 1, :]), what="grad token covariance")


@pytest.mark.parametrize("mean,var,corr,corr_h", [(0.0, 2.0, 0.6, 0.3), (0.8, 1.5, 0.4, -0.3),
                                                  (-1.2, 3.0, 0.9, 0.5)])
def test_monte_carlo_on_module(mean, var, corr, corr_h):
    check_mc(ReLU(), relu_forward, relu_backward, Moments(mean, var, corr, corr_h), GradMoments(1.7, 0.55))


def test_module_is_torch_relu_and_forwards_moments():
    mod = ReLU()
    assert isinstance(mod, torch.nn.ReLU)
    x = torch.randn(5, 3, dtype=torch.float64)
    assert torch.equal(mod(x), torch.relu(x))
    m = Moments(0.3, 2.0, 0.5)
    assert mod.forward_moments(m) == relu_forward(m)
    assert mod.forward_moments(m, approx="kedia") == relu_forward(m, approx="kedia")
    assert mod.backward_moments(GradMoments(1.0, 0.2), m) == relu_backward(GradMoments(1.0, 0.2), m)


# ------------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------------

def test_bad_input_raises():
    m = Moments(0.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="approx"):
        relu_forward(m, approx="nope")
    with pytest.raises(ValueError, match="approx"):
        relu_backward(GradMoments(), m, approx="kedia_table2")
    far = Moments(1.01 * MIN_STANDARDIZED_MEAN, 1.0, 0.5)
    with pytest.raises(ValueError, match="mean"):
        relu_forward(far)
    with pytest.raises(ValueError, match="mean"):
        relu_backward(GradMoments(), far)
    relu_forward(Moments(0.99 * MIN_STANDARDIZED_MEAN, 1.0, 0.5))  # just inside: fine
    with pytest.raises(ValueError, match="Moments.var"):
        relu_forward(Moments(0.0, 0.0, 0.5))
