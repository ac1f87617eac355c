"""RMSNorm rules: identities, quadrature against closed forms (projected normal, noncentral χ², LayerNorm's forms at
μ = 0), convergence of the quadrature, and Monte Carlo on the real module (float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special

from sigprop.components.layernorm import expected_cosine, normalised_grad_corr
from sigprop.components.rmsnorm import (
    DEFAULT_EPS,
    RMSNorm,
    gamma_nodes,
    quadrature_orders,
    rmsnorm_backward,
    rmsnorm_expectations,
    rmsnorm_forward,
)
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import assert_close_mc, mc_mean

#: Quadrature error bound documented in :func:`quadrature_orders` for corr_hidden ≤ ½ (relative).
QUAD_REL = 1e-4


# ----------------------------------------------------------------------------------------------------------------
# Tier 1: identities
# ----------------------------------------------------------------------------------------------------------------

def test_zero_mean_identities():
    out = rmsnorm_forward(Moments(mean=0.0, var=2.0, corr=0.5), 100, eps=0.0)
    assert out.mean == pytest.approx(0.0, abs=1e-15)
    assert out.var == pytest.approx(1.0, rel=1e-13)  # Σ y_i² = d exactly when eps = 0
    assert rmsnorm_forward(Moments(mean=0.0, corr=0.0), 100).corr == pytest.approx(0.0, abs=1e-14)
    g = rmsnorm_backward(GradMoments(var=3.0, corr=0.4), Moments(mean=0.0, var=2.0), 100, eps=0.0)
    assert g.var == pytest.approx(3.0 / 2.0 * 99 / 98, rel=1e-10)  # σ²_g (d−1)/(σ²(d−2))


def test_identical_tokens():
    m = Moments(mean=1.5, var=0.7, corr=1.0)
    assert rmsnorm_forward(m, 64).corr == pytest.approx(1.0, abs=1e-12)
    assert rmsnorm_backward(GradMoments(1.0, 0.6), m, 64).corr == pytest.approx(0.6, rel=1e-12)


def test_mean_sign_and_scale_invariance():
    a = rmsnorm_forward(Moments(mean=2.0, var=3.0, corr=0.4), 128, eps=0.0)
    b = rmsnorm_forward(Moments(mean=-2.0, var=3.0, corr=0.4), 128, eps=0.0)
    c = rmsnorm_forward(Moments(mean=20.0, var=300.0, corr=0.4), 128, eps=0.0)
    assert b.mean == pytest.approx(-a.mean, rel=1e-13)
    for q in ("var", "corr", "corr_hidden"):
        assert getattr(b, q) == pytest.approx(getattr(a, q), rel=1e-12)
        assert getattr(c, q) == pytest.approx(getattr(a, q), rel=1e-12)
    assert c.mean == pytest.approx(a.mean, rel=1e-13)


def test_large_d_form_and_limit():
    m = Moments(mean=1.0, var=3.0, corr=0.5, corr_hidden=0.0)
    lim = rmsnorm_forward(m, 100, eps=0.0, approx="large_d")
    assert lim.mean == pytest.approx(0.5)
    assert lim.var == pytest.approx(0.75)
    assert lim.corr == 0.5
    glim = rmsnorm_backward(GradMoments(2.0, 0.3), m, 100, eps=0.0, approx="large_d")
    assert glim.var == pytest.approx(0.5)
    assert glim.corr == 0.3
    # the exact rule approaches the limit with an O(1/d) gap: doubling d halves it
    gaps = []
    for d in (1000, 2000, 4000):
        e = rmsnorm_forward(m, d, eps=0.0)
        gaps.append(np.array([e.mean - lim.mean, e.var - lim.var, e.corr - lim.corr]))
    ratio = gaps[2] / gaps[1]
    assert np.all((ratio > 0.45) & (ratio < 0.55)), ratio


def test_bad_input_raises():
    with pytest.raises(ValueError, match="rmsnorm d"):
        rmsnorm_forward(Moments(), 8)
    with pytest.raises(ValueError, match="rmsnorm eps"):
        rmsnorm_forward(Moments(), 64, eps=-1.0)
    with pytest.raises(ValueError, match="approx"):
        rmsnorm_backward(GradMoments(), Moments(), 64, approx="kedia")
    with pytest.raises(ValueError, match="corr_hidden"):
        rmsnorm_forward(Moments(corr_hidden=1.0), 64)
    with pytest.raises(ValueError, match="corr_hidden"):
        rmsnorm_backward(GradMoments(), Moments(corr_hidden=-0.1), 64)
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(64, eps=-1.0)


# ----------------------------------------------------------------------------------------------------------------
# Tier 2: quadrature against closed forms and against itself at higher order
# ----------------------------------------------------------------------------------------------------------------

def test_gamma_nodes_moments():
    for shape in (0.5, 7.5, 499.5):
        x, w = gamma_nodes(np.array([shape]), 8)
        for p in range(1, 16):  # exact for polynomials of degree < 16: E[X^p] = Γ(shape + p)/Γ(shape)
            exact = math.exp(special.gammaln(shape + p) - special.gammaln(shape))
            assert np.sum(w * x**p) == pytest.approx(exact, rel=1e-9)


def _hyp1f1_neg(a, b, x):
    """₁F₁(a; b; −x) from Euler's integral (t = s² for a = ½), by adaptive quadrature (independent of scipy's
    series): Γ(b)/(Γ(a)Γ(b−a)) ∫₀¹ e^{−xt} t^{a−1} (1−t)^{b−a−1} dt."""
    norm = math.exp(special.gammaln(b) - special.gammaln(a) - special.gammaln(b - a))
    if a == 0.5:
        f = lambda s: 2.0 * math.exp(-x * s * s) * (1 - s * s) ** (b - a - 1)  # noqa: E731
    else:
        f = lambda t: math.exp(-x * t) * t ** (a - 1) * (1 - t) ** (b - a - 1)  # noqa: E731
    pts = [min(0.5, 1.0 / math.sqrt(max(x, 1e-12))), min(0.9, 10.0 / max(x, 1e-12))]
    return norm * integrate.quad(f, 0.0, 1.0, points=sorted(set(pts)), epsabs=0.0, epsrel=1e-12, limit=400)[0]


@pytest.mark.parametrize("d", [16, 100, 1000])
def test_mean_and_grad_var_against_noncentral_closed_forms(d):
    """c = 0, eps = 0: μ_out = (δ/√2)Γ((d+1)/2)/Γ(d/2+1) ₁F₁(½; d/2+1; −δ²/2) (mean of the projected normal),
    σ²_out = 1 − μ_out², and σ²_gin = σ²_g (d − 1) E[1/|x|²] with E[1/|x|²] = ₁F₁(1; d/2; −δ²/2)/(σ²(d − 2))."""
    for mean, var in ((0.05, 1.0), (0.3, 0.5), (1.0, 1.0), (3.0, 0.2), (10.0, 0.1)):
        delta = math.sqrt(d) * mean / math.sqrt(var)
        m_ref = (delta / math.sqrt(2) * math.exp(special.gammaln((d + 1) / 2) - special.gammaln(d / 2 + 1))
                 * _hyp1f1_neg(0.5, d / 2 + 1, delta**2 / 2))
        gv_ref = (d - 1) * _hyp1f1_neg(1.0, d / 2, delta**2 / 2) / (var * (d - 2))
        m = Moments(mean=mean, var=var, corr=0.5)
        out = rmsnorm_forward(m, d, eps=0.0)
        g = rmsnorm_backward(GradMoments(1.0, 0.5), m, d, eps=0.0)
        tol = 1e-8 if d > 16 else 1e-6  # quadrature accuracy (quadrature_orders); slower convergence at d = 16
        assert out.mean == pytest.approx(m_ref, rel=tol)
        assert out.var == pytest.approx(1.0 - m_ref**2, rel=tol)
        assert g.var == pytest.approx(gv_ref, rel=tol)


@pytest.mark.parametrize("d", [16, 64, 500])
def test_zero_mean_matches_isotropic_closed_forms(d):
    """μ = 0, c = 0, eps = 0: x is isotropic in d dimensions, so the token and gradient correlations are
    LayerNorm's closed forms with n = d."""
    rho = np.array([0.0, 0.3, 0.8, 0.99])
    out = rmsnorm_forward(Moments(mean=0.0, var=1.3, corr=rho), d, eps=0.0)
    g = rmsnorm_backward(GradMoments(1.0, 1.0), Moments(mean=0.0, var=1.3, corr=rho), d, eps=0.0)
    tol = 1e-4 if d == 16 else 1e-6  # quadrature accuracy documented in quadrature_orders
    np.testing.assert_allclose(out.corr, expected_cosine(d, rho), rtol=tol, atol=1e-12)
    np.testing.assert_allclose(g.corr, normalised_grad_corr(d, rho), rtol=tol)


@pytest.mark.parametrize("d,c", [(64, 0.0), (64, 0.1), (256, 0.2), (1000, -0.001)])
def test_quadrature_converged(d, c):
    """Default orders against much higher ones, at means where the mean matters; error within the bound that
    quadrature_orders documents (1e-6 relative for corr_hidden ≤ 0.2)."""
    args = (np.array([0.0, 0.3, 1.0, 5.0]), 0.8, np.array([0.2, 0.5, 0.9, 0.99]), c, d, 1e-3)
    low = rmsnorm_expectations(*args)
    high = rmsnorm_expectations(*args, nodes_single=(128, 48), nodes_pair=(64, 12, 12, 12))
    for k in low:
        np.testing.assert_allclose(low[k], high[k], rtol=1e-6, atol=1e-12, err_msg=k)


def test_orders_grow_with_hidden_correlation():
    (s0, p0), (s1, p1) = quadrature_orders(256, 0.0), quadrature_orders(256, 0.5)
    assert p1[0] > p0[0] and s1[0] > s0[0]


# ----------------------------------------------------------------------------------------------------------------
# Tier 3: Monte Carlo through the real module
# ----------------------------------------------------------------------------------------------------------------

def _token_pairs(n_pairs, d, mean, var, corr, corr_hidden=0.0, dtype=torch.float64):
    """(n_pairs, 2, d) Gaussian token pairs with per-element N(mean, var), token correlation ``corr`` and hidden
    correlation ``corr_hidden`` ≥ 0 (a shared per-token component)."""
    def pair_noise(shape):
        shared = torch.randn(shape[:1] + (1,) + shape[2:], dtype=dtype)
        return math.sqrt(corr) * shared + math.sqrt(1 - corr) * torch.randn(shape, dtype=dtype)

    x = math.sqrt(1 - corr_hidden) * pair_noise((n_pairs, 2, d))
    if corr_hidden:
        x = x + math.sqrt(corr_hidden) * pair_noise((n_pairs, 2, 1))
    return mean + math.sqrt(var) * x


@pytest.mark.parametrize("d,mean,var,corr,corr_hidden,eps", [
    (64, 0.5, 1.0, 0.6, 0.0, 1e-6),
    (48, -2.0, 0.5, 0.9, 0.2, None),
    (96, 0.3, 0.05, 0.3, 0.0, 0.01),  # eps/σ² = 0.2: the eps terms matter and are exact in the rule
])
def test_monte_carlo_real_module(d, mean, var, corr, corr_hidden, eps):
    n_pairs = 20_000
    grad_var, grad_corr = 0.8, 0.7
    module = RMSNorm(d, eps=eps).double()
    m = Moments(mean=mean, var=var, corr=corr, corr_hidden=corr_hidden)
    fwd = module.forward_moments(m)
    bwd = module.backward_moments(GradMoments(grad_var, grad_corr), m)

    x = _token_pairs(n_pairs, d, mean, var, corr, corr_hidden).requires_grad_(True)
    y = module(x)
    y.backward(_token_pairs(n_pairs, d, 0.0, grad_var, grad_corr))
    y, gi = y.detach(), x.grad

    def check(pred, samples, what):
        est, se = mc_mean(samples)
        assert_close_mc(pred, est, se, model_err=QUAD_REL * abs(pred), what=what)

    mu2 = fwd.mean**2
    check(fwd.mean, y.mean(dim=-1), "mean")
    check(fwd.var + mu2, (y * y).mean(dim=-1), "second moment")
    check(fwd.corr * fwd.var + mu2, (y[:, 0] * y[:, 1]).mean(dim=-1), "token second moment")
    check(fwd.corr_hidden * fwd.var + mu2, (y.sum(-1) ** 2 - (y * y).sum(-1)) / (d * (d - 1)), "hidden pairs")
    check(bwd.var, (gi * gi).mean(dim=-1), "grad var")
    check(bwd.corr * bwd.var, (gi[:, 0] * gi[:, 1]).mean(dim=-1), "grad token covariance")


# ----------------------------------------------------------------------------------------------------------------
# The module
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not hasattr(torch.nn, "RMSNorm"), reason="torch.nn.RMSNorm needs torch >= 2.4")
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_module_matches_torch_rmsnorm(eps):
    ours = RMSNorm((4, 8), eps=eps)
    ref = torch.nn.RMSNorm((4, 8), eps=eps)
    with torch.no_grad():
        w = torch.rand(4, 8) + 0.5
        ours.weight.copy_(w)
        ref.weight.copy_(w)
    x = torch.randn(3, 5, 4, 8) * 0.01
    torch.testing.assert_close(ours(x), ref(x))


def test_module_details():
    mod = RMSNorm(64)
    assert mod.moment_eps == DEFAULT_EPS == torch.finfo(torch.float32).eps
    assert RMSNorm(64, dtype=torch.float64).moment_eps == torch.finfo(torch.float64).eps
    assert RMSNorm(64, elementwise_affine=False).weight is None
    m = Moments(mean=0.5, var=2.0, corr=0.3)
    assert mod.forward_moments(m) == rmsnorm_forward(m, 64, DEFAULT_EPS)
    x = torch.randn(2, 3, 64)
    y = RMSNorm(64, eps=0.0, elementwise_affine=False)(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(2, 3))
    large = RMSNorm(64, approx="large_d")
    assert large.forward_moments(m).corr == 0.3


@pytest.mark.parametrize("d,eps", [(64, 0.0), (128, 1e-6), (256, 1e-5), (1024, 1.2e-7), (256, 1e-6)])
def test_centred_closed_form_matches_the_quadrature(d, eps):
    """Zero-mean input with independent hidden units (the token-resolved state's pairs) takes the closed form: against
    the product quadrature it agrees to 1e-5 relative in the variances and 1e-5 absolute in the correlations, across
    correlations and variances down to where the eps term reaches its limit (d ≥ 64, where the quadrature itself is
    accurate to ~1e-7)."""
    from sigprop.components.rmsnorm import CENTRED_EPS_TERM, _centred, rmsnorm_expectations

    corr = np.array([0.0, 0.3, 0.7, 0.95, 0.99])
    var = np.maximum(np.array([1.0, 0.3, 4.0, 1e-2, 2.0]), 2.0 * d * eps / ((d - 2.0) * CENTRED_EPS_TERM))
    zero = np.zeros_like(corr)
    assert _centred(zero, var, zero, d, eps)
    f = rmsnorm_forward(Moments(zero, var, corr, zero), d, eps)
    b = rmsnorm_backward(GradMoments(1.0 + zero, 0.5 + zero), Moments(zero, var, corr, zero), d, eps)
    e = rmsnorm_expectations(zero, var, corr, zero, d, eps, pair=True)
    np.testing.assert_allclose(f.var, e["ey2"], rtol=1e-5)
    np.testing.assert_allclose(f.corr, e["eyy"] / e["ey2"], atol=1e-5)
    np.testing.assert_allclose(b.var, e["gv"] / var, rtol=1e-5)
    np.testing.assert_allclose(b.corr, 0.5 * e["gc"] / e["gv"], atol=1e-5)
    assert not _centred(zero + 0.1, var, zero, d, eps)


@pytest.mark.parametrize("d,eps,spread", [(256, 1e-5, 3.4), (64, 1e-3, 3.4), (256, 1e-5, 6.0)])
def test_many_pairs_above_the_eps_limit_take_the_table_and_match_the_quadrature(d, eps, spread):
    """A token-resolved state's pairs, thousands with distinct variances, whose eps term is above the closed form's
    limit (the first norms of a model with small embeddings): the table (:func:`_centred_table`) agrees with the
    product quadrature per configuration to 1e-6 relative in the variances and, in the correlations, to the 1e-5
    absolute the closed form below the limit is held to, across correlations in [−0.5, 1) and eps terms from 1.35
    times the limit up over a factor e^3.4 (30) or e^6 (400: eps up to four times the variance)."""
    from sigprop.components.rmsnorm import CENTRED_EPS_TERM, TABLE_ABOVE, _centred, rmsnorm_expectations

    rng = np.random.default_rng(0)
    n = TABLE_ABOVE + 44
    top = d * eps / ((d - 2.0) * CENTRED_EPS_TERM)  # variance at the closed form's limit
    var = top * np.exp(-rng.uniform(0.3, 0.3 + spread, n))  # eps terms from 1.35 times the limit up
    corr = rng.uniform(-0.5, 0.999, n)
    zero = np.zeros(n)
    assert not _centred(zero, var, zero, d, eps)
    m = Moments(zero, var, corr, zero)
    f = rmsnorm_forward(m, d, eps)
    b = rmsnorm_backward(GradMoments(1.0 + zero, 0.5 + zero), m, d, eps)
    e = rmsnorm_expectations(zero, var, corr, zero, d, eps, pair=True)
    np.testing.assert_allclose(f.var, e["ey2"], rtol=1e-6)
    np.testing.assert_allclose(f.corr, e["eyy"] / e["ey2"], atol=1e-5)
    np.testing.assert_allclose(b.var, e["gv"] / var, rtol=1e-6)
    np.testing.assert_allclose(b.corr, 0.5 * e["gc"] / e["gv"], atol=1e-5)
