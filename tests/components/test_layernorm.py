"""LayerNorm rules (Kedia et al. App. A.6): identities, closed forms against quadrature, and Monte Carlo on the real
module (torch.nn.LayerNorm through sigprop's subclass, float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special

from sigprop.components.layernorm import (
    LayerNorm,
    expected_cosine,
    expected_inv_norms,
    hyp2f1_equal,
    layernorm_backward,
    layernorm_forward,
    normalised_grad_corr,
)
from sigprop.components.rmsnorm import rmsnorm_expectations
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z, assert_close_mc, mc_mean

RHOS = (0.0, 0.3, 0.8, 0.99, 1.0)


# ----------------------------------------------------------------------------------------------------------------
# Tier 1: identities
# ----------------------------------------------------------------------------------------------------------------

def test_forward_identities():
    for d in (8, 64, 1000):
        out = layernorm_forward(Moments(mean=3.0, var=2.0, corr=0.4), d, eps=0.0)
        assert out.mean == 0.0
        assert out.var == 1.0  # Σ y_i² = d exactly when eps = 0
        assert out.corr_hidden == pytest.approx(-1.0 / (d - 1), rel=1e-15)  # Σ y_i = 0 (Table 19)
    assert layernorm_forward(Moments(corr=0.0), 64).corr == 0.0
    assert layernorm_forward(Moments(corr=1.0), 64).corr == pytest.approx(1.0, abs=1e-14)
    # the input mean drops out exactly
    a = layernorm_forward(Moments(mean=0.0, var=1.5, corr=0.6), 100)
    b = layernorm_forward(Moments(mean=-10.0, var=1.5, corr=0.6), 100)
    assert a == b


def test_cosine_special_cases():
    rho = np.linspace(-0.99, 0.99, 23)
    # n = 1: cos θ = sign(u v), E = (2/π) asin ρ
    np.testing.assert_allclose(expected_cosine(1, rho), 2 / np.pi * np.arcsin(rho), rtol=1e-13, atol=1e-15)
    # large n: ρ(1 − (1 − ρ²)/(2n)) with an O(n⁻²) remainder (the remainder shrinks 4× when n doubles)
    r1 = expected_cosine(1000, 0.5) - 0.5 * (1 - 0.75 / 2000)
    r2 = expected_cosine(2000, 0.5) - 0.5 * (1 - 0.75 / 4000)
    assert 0.2 < r2 / r1 < 0.3


def test_inverse_norm_special_cases():
    for n in (7.0, 20.0, 99.0, 999.0):
        e1, e2 = expected_inv_norms(n, 1.0)  # u = v: both are E[1/|u|²] = 1/(n − 2)
        assert e1 == pytest.approx(1 / (n - 2), rel=1e-12)
        assert e2 == pytest.approx(1 / (n - 2), rel=1e-12)
        e1, e2 = expected_inv_norms(n, 0.0)  # independent: E[1/|u|]², E[cos²θ] = 1/n
        e_inv = math.sqrt(0.5) * math.exp(special.gammaln((n - 1) / 2) - special.gammaln(n / 2))
        assert e1 == pytest.approx(e_inv**2, rel=1e-12)
        assert e2 == pytest.approx(e_inv**2 / n, rel=1e-12)
        assert normalised_grad_corr(n, 1.0) == pytest.approx(1.0, rel=1e-12)


def test_backward_identities():
    g = GradMoments(var=2.0, corr=0.7)
    # identical tokens (r = 1): both tokens share the Jacobian, so r_gin = r_g
    assert layernorm_backward(g, Moments(corr=1.0), 100).corr == pytest.approx(0.7, rel=1e-12)
    # exact variance: σ²_g (d−2)/(σ²(d−3)) at eps = 0, the input mean drops out
    out = layernorm_backward(g, Moments(mean=5.0, var=4.0, corr=0.3), 50, eps=0.0)
    assert out.var == pytest.approx(2.0 * 48 / (4.0 * 47), rel=1e-14)
    # hidden correlation c shrinks the centred variance to σ²(1 − c)
    out_c = layernorm_backward(g, Moments(var=4.0, corr=0.3, corr_hidden=0.25), 50, eps=0.0)
    assert out_c.var == pytest.approx(2.0 * 48 / (3.0 * 47), rel=1e-14)


def test_kedia_forms():
    m = Moments(mean=1.0, var=2.5, corr=0.6, corr_hidden=0.1)
    g = GradMoments(var=3.0, corr=0.4)
    k = layernorm_forward(m, 200, approx="kedia")
    assert (k.mean, k.var) == (0.0, 1.0)
    assert k.corr == pytest.approx(0.6 * (1 - 1 / 200))
    assert k.corr_hidden == pytest.approx(-1 / 199)
    assert layernorm_forward(m, 200, approx="kedia_table1").corr == pytest.approx(0.6)
    for approx in ("kedia", "kedia_table1"):
        b = layernorm_backward(g, m, 200, approx=approx)
        assert b.var == pytest.approx(3.0 / 2.5)
        assert b.corr == pytest.approx(0.4)
    # the exact and the paper's forms agree to O(1/d)
    e = layernorm_forward(m, 200)
    assert abs(e.corr - k.corr) < 1 / 200


def test_rules_broadcast():
    d = np.array([100.0, 200.0, 400.0])
    out = layernorm_forward(Moments(mean=np.zeros(3), var=np.ones(3), corr=np.full(3, 0.5)), d)
    assert out.corr.shape == (3,)
    b = layernorm_backward(GradMoments(var=1.0, corr=np.array([0.1, 0.5, 0.9])), Moments(corr=0.5), d)
    assert b.var.shape == b.corr.shape == (3,)
    assert np.all(np.diff(out.corr) > 0)  # r(1 − (1−r²)/(2n)) grows towards r with d


def test_bad_input_raises():
    with pytest.raises(ValueError, match="layernorm d"):
        layernorm_forward(Moments(), 4)
    with pytest.raises(ValueError, match="layernorm eps"):
        layernorm_forward(Moments(), 64, eps=-1.0)
    with pytest.raises(ValueError, match="approx"):
        layernorm_forward(Moments(), 64, approx="bogus")
    with pytest.raises(ValueError, match="corr_hidden"):
        layernorm_forward(Moments(corr_hidden=1.0), 64)
    with pytest.raises(ValueError, match="corr_hidden"):
        layernorm_backward(GradMoments(), Moments(corr_hidden=-0.5), 64)
    with pytest.raises(ValueError, match="layernorm d"):
        layernorm_backward(GradMoments(), Moments(), np.array([64.0, 2.0]))
    with pytest.raises(ValueError, match="eps"):
        LayerNorm(64, eps=-1e-5)


# ----------------------------------------------------------------------------------------------------------------
# Tier 2: closed forms against numerical integration
# ----------------------------------------------------------------------------------------------------------------

def test_hyp2f1_equal_against_scipy_where_scipy_is_reliable():
    z = np.array([0.0, 0.3, 0.7, 0.89])
    for a in (0.5, 1.5, 2.5):
        for c in (50.0, 80.0, 120.0):  # both branches meet here; scipy is reliable for z < 0.9
            np.testing.assert_allclose(hyp2f1_equal(a, c, z), special.hyp2f1(a, a, c, z), rtol=1e-13)
        # Gauss's sum at z = 1: Γ(c)Γ(c − 2a)/Γ(c − a)²
        for c in (60.0, 500.5):
            gauss = math.exp(special.gammaln(c) + special.gammaln(c - 2 * a) - 2 * special.gammaln(c - a))
            assert hyp2f1_equal(a, c, 1.0) == pytest.approx(gauss, rel=1e-12)


def _hotelling_density(r, n, rho):
    """Density of Pearson's sample correlation with n degrees of freedom (Hotelling 1953, Eq. 26)."""
    return ((n - 1) * math.exp(special.gammaln(n) - special.gammaln(n + 0.5)) / math.sqrt(2 * math.pi)
            * (1 - rho**2) ** (n / 2) * (1 - r * r) ** ((n - 3) / 2) * (1 - rho * r) ** (0.5 - n)
            * special.hyp2f1(0.5, 0.5, n + 0.5, (1 + rho * r) / 2))


@pytest.mark.parametrize("n", [5, 30, 99])
def test_expected_cosine_against_hotelling_density(n):
    """cos θ of two centred tokens has the law of Pearson's r; integrate r against its density by quadrature."""
    for rho in (0.0, 0.3, 0.9, 0.99):
        m = integrate.quad(lambda r, rho=rho: r * _hotelling_density(r, n, rho), -1, 1, epsabs=1e-13,
                           epsrel=1e-12, limit=200)[0]
        assert expected_cosine(n, rho) == pytest.approx(m, rel=1e-11, abs=1e-14)


def _wishart_series(n, rho, s, m, terms=4000):
    """E[(|u||v|)^{2s} cos^m θ] (unit variances, correlation ρ) by the series the closed forms come from.

    The Wishart density of (a, b, r) = (|u|², |v|², cos θ) is ∝ (ab)^{n/2−1}(1−r²)^{(n−3)/2} exp(−(a + b −
    2ρr√(ab))/(2(1−ρ²))); expanding the cross term in powers of ρ separates Gamma (a, b) and Beta (r) integrals:
    E = (1−ρ²)^{n/2+2s} 4^s/(Γ(n/2)√π) Σ_{k: m+k even} (2ρ)^k/k! Γ(n/2+s+k/2)² Γ((m+k+1)/2)/Γ((n+m+k)/2).
    Summed in log space; the closed forms follow from it by Euler's transformation.
    """
    k = np.arange(terms, dtype=np.float64)
    k = k[(k + m) % 2 == 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.where(k == 0, 0.0, k * np.log(2 * rho))  # (2ρ)^0 = 1 also at ρ = 0
    logt = (power - special.gammaln(k + 1) + 2 * special.gammaln(n / 2 + s + k / 2)
            + special.gammaln((m + k + 1) / 2) - special.gammaln((n + m + k) / 2))
    pre = (n / 2 + 2 * s) * np.log1p(-rho**2) + s * np.log(4.0) - special.gammaln(n / 2) - 0.5 * np.log(np.pi)
    return float(np.exp(special.logsumexp(logt) + pre))


@pytest.mark.parametrize("n", [9, 40])
def test_closed_forms_against_wishart_series(n):
    for rho in (0.0, 0.3, 0.8, 0.95):
        assert _wishart_series(n, rho, 0.0, 0) == pytest.approx(1.0, rel=1e-12)  # normalisation
        assert _wishart_series(n, rho, 0.0, 1) == pytest.approx(float(expected_cosine(n, rho)), rel=1e-11,
                                                                abs=1e-15)
        e1, e2 = expected_inv_norms(n, rho)
        assert _wishart_series(n, rho, -0.5, 0) == pytest.approx(float(e1), rel=1e-11)
        assert _wishart_series(n, rho, -0.5, 2) == pytest.approx(float(e2), rel=1e-11)


def test_closed_forms_against_product_quadrature():
    """The RMSNorm quadrature with μ = 0 integrates the same n-dimensional isotropic problem (n = d there), by an
    independent method (Gauss–Hermite × generalised Gauss–Laguerre over the vectors' components)."""
    rho = np.array(RHOS)
    for n in (64, 300):
        e = rmsnorm_expectations(0.0, 1.0, rho, 0.0, n, 0.0, nodes_single=(48, 32), nodes_pair=(16, 10, 10, 10))
        np.testing.assert_allclose(e["eyy"], expected_cosine(n, rho), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(e["gc"] / e["gv"], normalised_grad_corr(n, rho), rtol=1e-8)
        np.testing.assert_allclose(e["gv"], (n - 1) / (n - 2), rtol=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# Tier 3: Monte Carlo through the real module
# ----------------------------------------------------------------------------------------------------------------

def _token_pairs(n_pairs, d, mean, var, corr, corr_hidden=0.0, dtype=torch.float64):
    """(n_pairs, 2, d) Gaussian token pairs: per-element N(mean, var), token correlation ``corr``, hidden
    correlation ``corr_hidden`` ≥ 0 (a shared per-token component), i.i.d. across pairs."""
    def pair_noise(shape):
        shared = torch.randn(shape[:1] + (1,) + shape[2:], dtype=dtype)
        own = torch.randn(shape, dtype=dtype)
        return math.sqrt(corr) * shared + math.sqrt(1 - corr) * own

    x = math.sqrt(1 - corr_hidden) * pair_noise((n_pairs, 2, d))
    if corr_hidden:
        x = x + math.sqrt(corr_hidden) * pair_noise((n_pairs, 2, 1))
    return mean + math.sqrt(var) * x


@pytest.mark.parametrize("d,mean,var,corr,corr_hidden,eps", [
    (64, 3.0, 0.5, 0.6, 0.0, 1e-5),
    (32, -1.0, 2.0, 0.9, 0.3, 1e-5),
    (128, 0.0, 1.0, 0.2, 0.0, 1e-3),
])
def test_monte_carlo_real_module(d, mean, var, corr, corr_hidden, eps):
    n_pairs = 40_000
    grad_var, grad_corr = 1.7, 0.5
    m = Moments(mean=mean, var=var, corr=corr, corr_hidden=corr_hidden)
    fwd = layernorm_forward(m, d, eps)
    bwd = layernorm_backward(GradMoments(grad_var, grad_corr), m, d, eps)

    module = LayerNorm(d, eps=eps).double()
    x = _token_pairs(n_pairs, d, mean, var, corr, corr_hidden).requires_grad_(True)
    y = module(x)
    g = _token_pairs(n_pairs, d, 0.0, grad_var, grad_corr)
    y.backward(g)
    y, gi = y.detach(), x.grad

    # Documented first-order-in-eps bound: the dropped term of E[|u|²/(|u|² + d eps)] is ≤ (d eps)² E[1/|u|⁴].
    var_eff = var * (1 - corr_hidden)
    n = d - 1
    eps_bound = (d * eps / var_eff) ** 2 / ((n - 2) * (n - 4))

    est, se = mc_mean(y.mean(dim=-1))
    assert_close_mc(fwd.mean, est, se, what="mean")
    est, se = mc_mean((y * y).mean(dim=-1))
    assert_close_mc(fwd.var, est, se, model_err=eps_bound, what="var")
    est, se = mc_mean((y[:, 0] * y[:, 1]).mean(dim=-1))
    assert_close_mc(fwd.corr * fwd.var, est, se, model_err=eps_bound, what="token covariance")
    hidden = (y.sum(dim=-1) ** 2 - (y * y).sum(dim=-1)) / (d * (d - 1))
    est, se = mc_mean(hidden)
    assert_close_mc(fwd.corr_hidden * fwd.var, est, se, model_err=eps_bound, what="hidden covariance")
    est, se = mc_mean((gi * gi).mean(dim=-1))
    assert_close_mc(bwd.var, est, se, model_err=bwd.var * 2 * eps_bound, what="grad var")
    est, se = mc_mean((gi[:, 0] * gi[:, 1]).mean(dim=-1))
    # r_gin neglects eps corrections of relative size O(eps/(σ²_eff d)) (docstring)
    assert_close_mc(bwd.corr * bwd.var, est, se, model_err=bwd.var * (2 * eps_bound + d * eps / (var_eff * n**2)),
                    what="grad token covariance")


def test_module_delegates_to_rules():
    ln = LayerNorm(256, eps=1e-4, approx="kedia")
    m = Moments(mean=1.0, var=2.0, corr=0.5)
    assert ln.forward_moments(m) == layernorm_forward(m, 256, 1e-4, "kedia")
    g = GradMoments(1.0, 0.3)
    assert ln.backward_moments(g, m) == layernorm_backward(g, m, 256, 1e-4, "kedia")
    assert LayerNorm((4, 16)).d == 64
    x = torch.randn(3, 5, 256)
    torch.testing.assert_close(ln(x), torch.nn.functional.layer_norm(x, (256,), eps=1e-4))


@pytest.mark.parametrize(("d", "var"), [(64, 1e-6), (64, 1e-5), (64, 7.04e-5), (64, 1.05e-4), (512, 3.94e-5),
                                      (64, 1e-3), (8, 2e-5)])
def test_the_eps_factors_are_exact_at_any_input_variance(d, var):
    """The rules' variances are exact in eps (an average over χ²_n): checked against the real module's output second
    moment and input gradient over n rows, within Z standard errors, from x = d·eps/(σ²(d − 3)) ≈ 1e-2 to 10 (a
    tiny token table feeding the first norm). The first-order 1 − x was 2.3% off at x = 0.15 (σ² = 7.04e-5,
    d = 64), where it switched to 1/(1 + x); that resummation was 2.5% off at σ² = 1e-6."""
    from sigprop.components.layernorm import LayerNorm, layernorm_backward, layernorm_forward
    from sigprop.core.moments import GradMoments, Moments

    eps, n = 1e-5, 20000
    gen = torch.Generator().manual_seed(d)
    x = (torch.randn(n, d, dtype=torch.float64, generator=gen) * var**0.5).requires_grad_(True)
    g = torch.randn(n, d, dtype=torch.float64, generator=gen)
    y = LayerNorm(d, eps=eps).double()(x)
    (gx,) = torch.autograd.grad(y, x, g)
    for measured, rule in ((y.detach().pow(2).mean(dim=1), layernorm_forward(Moments(0.0, var, 0.0), d, eps=eps).var),
                           (gx.pow(2).mean(dim=1), layernorm_backward(GradMoments(1.0, 0.0), Moments(0.0, var, 0.0),
                                                                      d, eps=eps).var)):
        mean, se = float(measured.mean()), float(measured.std()) / n**0.5
        assert abs(float(rule) - mean) <= Z * se, (float(rule), mean, se)


@pytest.mark.parametrize("d", [8, 9, 64, 768, 16384])
def test_the_eps_factors_match_adaptive_quadrature(d):
    """The trapezoid rule in log U against scipy's adaptive quadrature of the same expectations over Gamma(k)."""
    from scipy import integrate, special

    from sigprop.components.layernorm import _eps_factors

    k = (d - 1) / 2

    def expect(h, c):
        def density(u):
            return np.exp((k - 1) * np.log(u) - u - special.gammaln(k))

        return sum(integrate.quad(lambda u: density(u) * h(u, c), lo, hi, epsabs=0, epsrel=1e-13, limit=400)[0]
                   for lo, hi in ((0, k), (k, np.inf)))

    for c in (1e-4, 0.05, 3.0, 300.0):
        var_eff = d * 1e-5 / (2 * c)
        forward, backward = _eps_factors(var_eff, d, 1e-5)
        want_f = 1 - c * expect(lambda u, c: 1 / (u + c), c)
        want_b = (1 - (k - 1) * c * expect(lambda u, c: 1 / (u * (u + c)), c)
                  + (k - 1) * c**2 * expect(lambda u, c: 1 / (u + c) ** 3, c) / (d - 2))
        assert float(forward) == pytest.approx(want_f, rel=1e-11, abs=1e-15), (c, float(forward), want_f)
        assert float(backward) == pytest.approx(want_b, rel=1e-11, abs=1e-15), (c, float(backward), want_b)
    one = _eps_factors(1.0, d, 0.0)
    assert float(one[0]) == 1.0 and float(one[1]) == 1.0
