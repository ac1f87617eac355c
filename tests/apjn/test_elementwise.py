"""Propagated covariance components (Alekseev Eqs. 10, 13, 40; App. E Eqs. 89–90): identities, closed forms and
quadrature against each other, and against Monte Carlo with Z × SE tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special

from sigprop.apjn.elementwise import (
    NORMS,
    _erf_raw,
    callable_propagated,
    erf_propagated,
    layernorm_propagated,
    moments_from_qp,
    propagate,
    propagate_validated,
    qp_from_moments,
    resolve_norm,
    tanh_propagated,
)
from sigprop.components.derf import erf_p_hat, erf_p_tilde, erf_q_hat, erf_q_tilde
from sigprop.core.moments import Moments
from tests.helpers import Z, assert_close_mc, mc_mean

# (q, p, alpha): the paper's input (1, 0.2), deep-layer sizes (q ~ 10), anti-correlated tokens, near-identical tokens
POINTS = [(1.0, 0.2, 1.0), (0.5, 0.25, 0.5), (10.0, 6.0, 1.5), (2.0, -0.8, 1.0), (3.0, 2.97, 0.7)]


def _erf_dphi(u):
    return 2.0 / math.sqrt(math.pi) * np.exp(-u * u)


def _sech2(u):
    return 1.0 / np.cosh(u) ** 2


# ------------------------------------------------------------------------------------------------------------
# tier 1: identities
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", ["erf", "tanh", "layernorm", "callable"])
def test_equal_tokens_give_equal_components(norm):
    """p = q (identical tokens) gives p̃ = q̃ and p̂ = q̂ for every map (Eq. 10 / Eq. 40 at Σ12 = Σ11)."""
    q = np.array([0.3, 1.0, 7.0])
    kw = {"dphi": _erf_dphi} if norm == "callable" else {}
    r = propagate(q, q, special.erf if norm == "callable" else norm, np.array([0.5, 1.0, 1.9]), **kw)
    assert np.allclose(r.p_tilde, r.q_tilde, rtol=1e-12, atol=0)
    assert np.allclose(r.p_hat, r.q_hat, rtol=1e-12, atol=0)


def test_uncorrelated_tokens():
    """p = 0: p̃ = E[φ]² = 0 for odd φ, p̂ = E[φ_α']² with E[erf_α'(h)] = 2α/√(π(1+2α²q)) (Gaussian integral)."""
    q, a = np.array([0.3, 1.0, 7.0]), np.array([0.5, 1.0, 1.9])
    for norm in ("erf", "tanh"):
        r = propagate(q, 0.0, norm, a)
        assert np.allclose(r.p_tilde, 0.0, atol=1e-15)
    r = propagate(q, 0.0, "erf", a)
    assert np.allclose(r.p_hat, (2.0 * a / np.sqrt(np.pi * (1.0 + 2.0 * a**2 * q))) ** 2, rtol=1e-13)


def test_layernorm_components():
    """LayerNorm: q̃ = 1, p̃ = p/q (Sec. 3.1), q̂ = p̂ = 1/q (Eq. 13; App. C.1 below Eq. 40)."""
    q, p = np.array([0.5, 2.0, 40.0]), np.array([0.1, -1.0, 39.0])
    r = layernorm_propagated(q, p)
    assert np.allclose(r.q_tilde, 1.0) and np.allclose(r.p_tilde, p / q)
    assert np.allclose(r.q_hat, 1.0 / q) and np.allclose(r.p_hat, 1.0 / q)
    for got, ref in zip(propagate(q, p, "ln", alpha=123.0), r, strict=True):  # α is ignored, aliases resolve
        assert np.array_equal(got, ref)


def test_erf_reuses_derf_closed_forms_and_fast_path_agrees():
    q = np.array([0.3, 1.0, 7.0, 2.0])
    p = np.array([0.1, -0.4, 6.9, 2.0])
    a = np.array([0.3, 1.0, 1.9, 0.8])
    r = erf_propagated(q, p, a)
    assert np.array_equal(r.q_tilde, erf_q_tilde(q, a)) and np.array_equal(r.p_tilde, erf_p_tilde(p, q, a))
    assert np.array_equal(r.q_hat, erf_q_hat(q, a)) and np.array_equal(r.p_hat, erf_p_hat(p, q, a))
    for fast, ref in zip(_erf_raw(q, p, a), r, strict=True):
        assert np.allclose(fast, ref, rtol=1e-14, atol=0)
    for fast, ref in zip(propagate_validated(q, p, resolve_norm("layernorm"), a), layernorm_propagated(q, p),
                         strict=True):
        assert np.allclose(fast, ref, rtol=1e-15, atol=0)


def test_broadcasting_over_q_p_alpha():
    q = np.array([0.5, 1.0, 4.0])[:, None]
    a = np.array([0.5, 1.0])[None, :]
    r = propagate(q, 0.3 * q, "erf", a)
    assert r.q_tilde.shape == (3, 2)
    for i in range(3):
        for j in range(2):
            one = propagate(float(q[i, 0]), float(0.3 * q[i, 0]), "erf", float(a[0, j]))
            assert math.isclose(one.p_hat, r.p_hat[i, j], rel_tol=1e-14)


def test_moments_conversions():
    """q = var + mean², p = corr·var + mean² (sigprop.core.moments); back to a zero-mean Moments with corr = p/q."""
    m = Moments(mean=0.5, var=2.0, corr=0.3)
    q, p = qp_from_moments(m)
    assert math.isclose(q, 2.25) and math.isclose(p, 0.85)
    back = moments_from_qp(q, p)
    assert back.mean == 0.0 and math.isclose(back.var, q) and math.isclose(back.corr, p / q)
    assert qp_from_moments(back) == pytest.approx((q, p), rel=1e-15)
    arr = moments_from_qp(np.array([1.0, 2.0]), np.array([0.2, -2.0]))
    assert np.allclose(arr.corr, [0.2, -1.0])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"q": 0.0, "p": 0.0}, "q must be"),
    ({"q": -1.0, "p": 0.0}, "q must be"),
    ({"q": 1.0, "p": 1.5}, "p must satisfy"),
    ({"q": 1.0, "p": -1.5}, "p must satisfy"),
    ({"q": 1.0, "p": 0.2, "alpha": 0.0}, "alpha"),
    ({"q": 1.0, "p": 0.2, "norm": "batchnorm"}, "norm must be one of"),
    ({"q": 1.0, "p": 0.2, "norm": np.tanh}, "needs dphi"),
    ({"q": 1.0, "p": np.nan}, "p must be"),
])
def test_bad_input_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        propagate(**kwargs)


def test_norm_names():
    assert NORMS == ("erf", "tanh", "layernorm")
    assert resolve_norm("Derf").kind == "erf" and resolve_norm("dyt").kind == "tanh"
    assert resolve_norm("rmsnorm").kind == "layernorm" and not resolve_norm("pre_ln").elementwise
    with pytest.raises(ValueError, match="only used with a callable"):
        resolve_norm("erf", dphi=_erf_dphi)


# ------------------------------------------------------------------------------------------------------------
# tier 2: closed form / accurate quadrature vs Gauss–Hermite quadrature of a callable
# ------------------------------------------------------------------------------------------------------------

def test_callable_erf_matches_closed_form():
    """Gauss–Hermite (96 nodes per dimension) on the entire function erf at α²q ≤ 5: geometric convergence, far below
    1e-9 (the tolerance is the quadrature's, sigprop.core.gaussian.expect_1d)."""
    for q, p, a in POINTS[:2] + POINTS[3:]:
        ref = erf_propagated(q, p, a)
        got = callable_propagated(q, p, special.erf, _erf_dphi, a)
        for g, r in zip(got, ref, strict=True):
            assert math.isclose(g, r, rel_tol=1e-9, abs_tol=1e-12)


def test_callable_tanh_matches_dyt_quadrature_where_gauss_hermite_converges():
    """tanh has poles at ±iπ/2, so Gauss–Hermite converges only for small α²q (sigprop.components.dyt); at
    α²q ≤ 1 the 96-node rule agrees with the accurate quadrature to 1e-8."""
    for q, p, a in [(1.0, 0.2, 1.0), (0.5, 0.25, 0.5), (2.0, -0.8, 0.7)]:
        ref = tanh_propagated(q, p, a)
        got = callable_propagated(q, p, np.tanh, _sech2, a)
        for g, r in zip(got, ref, strict=True):
            assert math.isclose(g, r, rel_tol=1e-8, abs_tol=1e-12)


# ------------------------------------------------------------------------------------------------------------
# tier 3: Monte Carlo on sampled Gaussian pairs (h1, h2) ~ N(0, [[q, p], [p, q]])
# ------------------------------------------------------------------------------------------------------------

def _pairs(q, p, n):
    z = torch.randn(n, 2, dtype=torch.float64)
    chol = torch.linalg.cholesky(torch.tensor([[q, p], [p, q]], dtype=torch.float64))
    h = z @ chol.T
    return h[:, 0], h[:, 1]


@pytest.mark.parametrize("norm", ["erf", "tanh"])
@pytest.mark.parametrize(("q", "p", "a"), [pt for pt in POINTS if pt[1] < pt[0] * 0.999])
def test_components_against_monte_carlo(norm, q, p, a):
    h1, h2 = _pairs(q, p, 400_000)
    if norm == "erf":
        phi1, phi2 = torch.erf(a * h1), torch.erf(a * h2)
        d1, d2 = a * _erf_dphi(a * h1.numpy()), a * _erf_dphi(a * h2.numpy())
    else:
        phi1, phi2 = torch.tanh(a * h1), torch.tanh(a * h2)
        d1, d2 = a * _sech2(a * h1.numpy()), a * _sech2(a * h2.numpy())
    pred = propagate(q, p, norm, a)
    checks = {"q_tilde": torch.cat([phi1**2, phi2**2]), "p_tilde": phi1 * phi2,
              "q_hat": np.concatenate([d1**2, d2**2]), "p_hat": d1 * d2}
    for name, samples in checks.items():
        est, se = mc_mean(samples)
        assert_close_mc(getattr(pred, name), est, se, what=f"{norm} {name} at q={q}, p={p}, alpha={a}")


def test_layernorm_jacobian_moments_against_monte_carlo():
    """q̂ = p̂ = 1/q for LayerNorm (mean-free/RMS reading, Eq. 53) from autograd Jacobians at width d.

    For h ~ N(0, qI_d), f(h) = √d h/‖h‖ has Jacobian √d/‖h‖ (I − ĥĥᵀ), so ‖J‖²_F/d = (d−1)/‖h‖² and
    E = (d−1)/((d−2)q) exactly (inverse χ²). For two tokens, tr(J_s J_tᵀ)/d = (d−2+cos²)/(‖h_s‖‖h_t‖), bracketed by
    Jensen and Cauchy–Schwarz: (d−2)/(dq) ≤ E ≤ (d−1)/((d−2)q); both bounds → 1/q = p̂ as d → ∞.
    """
    d, n, q, p = 64, 4000, 1.7, 0.6

    def rms(x):
        return x * math.sqrt(d) / x.norm()

    def eq53(x):  # Alekseev Eq. 53, batched: √d/‖h‖ (I − ĥĥᵀ)
        nrm = x.norm(dim=-1, keepdim=True)
        u = x / nrm
        return math.sqrt(d) / nrm[..., None] * (torch.eye(d, dtype=x.dtype) - u[..., :, None] * u[..., None, :])

    h1, h2 = (x.reshape(n, d) for x in _pairs(q, p, n * d))
    for x in h1[:4]:
        assert torch.allclose(torch.autograd.functional.jacobian(rms, x), eq53(x), rtol=1e-12, atol=1e-14)
    j1, j2 = eq53(h1), eq53(h2)
    est, se = mc_mean((j1**2).sum(dim=(1, 2)) / d)
    assert_close_mc((d - 1) / ((d - 2) * q), est, se, what="LayerNorm E||J||^2/d")
    est, se = mc_mean((j1 * j2).sum(dim=(1, 2)) / d)
    lo, hi = (d - 2) / (d * q), (d - 1) / ((d - 2) * q)
    assert lo - Z * se <= est <= hi + Z * se, f"LayerNorm p_hat {est} ± {se} outside [{lo}, {hi}]"
    assert lo <= layernorm_propagated(q, p).p_hat <= hi * (d - 2) / (d - 1) + 1e-15
