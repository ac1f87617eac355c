"""Large-depth asymptotics (Alekseev Results 3.3–3.5, App. D): Eq. 15's root, ζ, C_α, λ^{−1}, and the recurrences'
approach to Eqs. 14, 16, 18 and to the convergence exponent μ of Eq. 86.

The recurrences are deterministic, so "tolerances" here are statements about asymptotic orders: a quantity whose
leading correction is ∝ b^{−μ} has consecutive error ratios (at b and 4b) 4^{−μ}(1 + O(b^{−ν})), where ν is the
relative order of the next correction (ν = min(μ, 1 − μ) below: the nonlinear term of the cosine map, O(b^{−μ}),
and the O(1/q) = O(1/b) terms of p̃ and of Q^b's offset, relative order b^{μ−1}); the tests take the O(·) with
coefficient one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special

from sigprop.apjn.asymptotics import (
    PhaseMap,
    c_alpha,
    c_star,
    convergence_exponent,
    g_function,
    lambda_inv,
    p_tilde_limit,
    phase_map,
    preln_backward_asymptotic,
    preln_forward_asymptotic,
    q_slope,
    saturation_coefficient,
    stretched_backward_asymptotic,
    stretched_forward_asymptotic,
    zeta,
)
from sigprop.apjn.elementwise import propagate
from sigprop.apjn.recurrence import apjn_profile, kappa

S21 = np.geomspace(0.02, 8.0, 25)[:, None]
SOV = np.concatenate([[0.0], np.geomspace(0.01, 8.0, 24)])[None, :]


def _erf_dphi(u):
    return 2.0 / math.sqrt(math.pi) * np.exp(-u * u)


# ------------------------------------------------------------------------------------------------------------
# Eq. 15 and its stability (App. D.2)
# ------------------------------------------------------------------------------------------------------------

def test_c_star_solves_eq15_to_1e10():
    cs = c_star(sigma_21=S21, sigma_ov=SOV, norm="erf")
    pt = p_tilde_limit(cs, "erf")
    rhs = (0.5 * S21**2 * kappa(pt) + SOV**2 * pt) / (0.5 * S21**2 + SOV**2 * pt)  # Eq. 15
    assert np.all(np.abs(cs - rhs) <= 1e-10)
    assert np.all((cs > 0.0) & (cs <= 1.0))
    assert np.all(np.abs(g_function(cs, sigma_21=S21, sigma_ov=SOV, norm="erf")) <= 1e-10)
    # stable: g decreases through zero (μ = −g'/Δq > 0, Eq. 86) wherever c_⋆ < 1 is resolvable in float64
    mu = convergence_exponent(sigma_21=S21, sigma_ov=SOV, norm="erf")
    assert np.all(mu[cs < 1.0 - 1e-9] > 0.0)


def test_c_star_special_cases():
    # LayerNorm: the unique root (κ(c) > c below 1)
    assert np.all(c_star(sigma_21=S21, sigma_ov=SOV, norm="layernorm") == 1.0)
    # p ≥ 0
    assert np.all(g_function(np.linspace(0.0, 0.999, 50)[:, None], sigma_21=0.7, sigma_ov=0.4, norm="layernorm") > 0.0)
    assert c_star(sigma_21=0.0, sigma_ov=0.5, norm="erf") == 1.0  # no MLP: attention adds p̃ to q and p alike
    assert math.isnan(c_star(sigma_21=0.0, sigma_ov=0.0, norm="erf")) and math.isnan(zeta(sigma_21=0.0, sigma_ov=0.0))
    vit = {"sigma_21": 0.61, "sigma_ov": 0.31}
    assert c_star(**vit, norm="tanh") == c_star(**vit, norm=np.tanh) == c_star(**vit, norm="erf")  # tanh-like
    # σ_OV = 0: c_⋆ solves κ((2/π) asin c) = c, independent of σ_21
    c0 = c_star(sigma_21=np.array([0.1, 1.0, 5.0]), sigma_ov=0.0)
    assert np.allclose(c0, c0[0], rtol=0, atol=1e-14)
    assert kappa(2.0 / np.pi * np.arcsin(c0[0])) == pytest.approx(c0[0], abs=1e-12)


def test_convergence_exponent_layernorm_closed_form():
    """App. D.2.2: μ = σ_OV²/(σ_OV² + ½σ_21²) = 1 − ζ for LayerNorm."""
    mu = convergence_exponent(sigma_21=S21, sigma_ov=SOV, norm="layernorm")
    assert np.allclose(mu, SOV**2 / (SOV**2 + 0.5 * S21**2), rtol=1e-13, atol=1e-15)
    assert np.allclose(mu, 1.0 - zeta(sigma_21=S21, sigma_ov=SOV), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("norm", ["layernorm", "erf_saturated"])
def test_recurrence_cosine_approaches_c_star_at_rate_mu(norm):
    """c^b = P^b/Q^b → c_⋆ with |c^b − c_⋆| ∝ b^{−μ} (Eqs. 84–86). The tanh-like case uses erf with α = 1000, for
    which q̃, p̃ take their saturated forms (Eq. 79) from the first layer, so that the O(1/(α√q)) transient of q̃ does
    not mask the homogeneous b^{−μ} mode. Also: Q^b increments → S (Eq. 14) at the same rate. Configurations with
    c_⋆ near 1 are excluded: there the nonlinear term (∝ p̃'' ∝ (1 − c²)^{−3/2}) is large."""
    s21, sov = np.array([0.61, 1.0, 1.0]), np.array([0.31, 1.0, 0.6])
    nm, alpha = ("layernorm", 1.0) if norm == "layernorm" else ("erf", 1000.0)
    pr = apjn_profile(sigma_21=s21, sigma_ov=sov, blocks=4 * 4096, norm=nm, alpha=alpha, q0=1.0, p0=0.2)
    sig = {"sigma_21": s21, "sigma_ov": sov, "norm": nm}
    cs, mu, s = c_star(**sig), convergence_exponent(**sig), q_slope(**sig)
    tol_order = np.minimum(mu, 1.0 - mu)
    for b in (256, 1024, 4096):
        u = pr.P[[b, 4 * b]] / pr.Q[[b, 4 * b]] - cs
        assert np.all(np.abs(u[1]) < np.abs(u[0]))
        assert np.all(np.abs(u[1] / u[0] / 4.0**-mu - 1.0) <= b**-tol_order), f"cosine ratio at b={b}"
        inc = (pr.Q[[2 * b, 4 * b]] - pr.Q[[b // 2, b]]) / (1.5 * np.array([[b], [2 * b]])) / s - 1.0
        assert np.all(np.abs(inc[1] / inc[0] / 2.0**-mu - 1.0) <= b**-tol_order), f"Q slope ratio at b={b}"


def test_c_equal_one_is_unstable_for_tanh_like():
    """App. D.2.3: starting from almost identical tokens (c ≈ 1), a tanh-like network de-correlates them (c falls
    towards c_⋆ < 1), while a LayerNorm network keeps c → 1."""
    erf = apjn_profile(sigma_21=0.61, sigma_ov=0.31, blocks=2000, norm="erf", alpha=1.0, q0=1.0, p0=0.999)
    c = erf.P / erf.Q
    assert c[-1] < 0.9 and abs(c[-1] - c_star(sigma_21=0.61, sigma_ov=0.31)) < abs(c[1] - c_star(sigma_21=0.61,
                                                                                                 sigma_ov=0.31))
    ln = apjn_profile(sigma_21=0.61, sigma_ov=0.31, blocks=2000, norm="layernorm", q0=1.0, p0=0.999)
    assert np.all(ln.P / ln.Q > 0.998)


# ------------------------------------------------------------------------------------------------------------
# ζ, C_α, D_α, λ^{−1}
# ------------------------------------------------------------------------------------------------------------

def test_zeta_identities():
    z = zeta(sigma_21=S21, sigma_ov=SOV)
    assert np.allclose(z[:, 0], 1.0)  # no attention: ζ = 1 (the residual-MLP exponent)
    assert np.all((z > 0.0) & (z <= 1.0))
    assert np.all(np.diff(z, axis=1) < 0.0) and np.all(np.diff(z[:, 1:], axis=0) > 0.0)
    assert zeta(sigma_21=1.0, sigma_ov=math.sqrt(0.5)) == pytest.approx(0.5)  # σ_OV² = ½σ_21²
    assert zeta(sigma_21=0.0, sigma_ov=0.3) == 0.0
    # p̃_⋆ = c_⋆ = 1
    assert q_slope(sigma_21=0.61, sigma_ov=0.31, norm="layernorm") == pytest.approx(0.5 * 0.61**2 + 0.31**2)


@pytest.mark.parametrize("norm", ["erf", "tanh"])
def test_c_alpha_and_d_alpha_closed_forms(norm):
    """C_α (Eq. 19) and D_α by quadrature of their definitions, and as the large-q coefficients of q̂ ≈ C_α/√q
    (Eq. 73) and 1 − q̃ ≈ D_α/√q; the next terms are O(1/(α²q)) relative (expand the Gaussian weight e^{−h²/2q}),
    so at q = 1e6 the tolerance is 10/q."""
    a = 1.7
    if norm == "erf":
        def dphi2(h):
            return (a * _erf_dphi(a * h)) ** 2

        def one_minus_phi2(h):
            return special.erfc(a * abs(h)) * (1.0 + special.erf(a * abs(h)))
    else:
        def sech2(x):
            e = math.exp(-2.0 * abs(x))
            return 4.0 * e / (1.0 + e) ** 2

        def dphi2(h):
            return (a * sech2(a * h)) ** 2

        def one_minus_phi2(h):
            return sech2(a * h)
    c_quad = integrate.quad(dphi2, -np.inf, np.inf, epsabs=0, epsrel=1e-13)[0] / math.sqrt(2 * math.pi)
    d_quad = integrate.quad(one_minus_phi2, -np.inf, np.inf, epsabs=0, epsrel=1e-13)[0] / math.sqrt(2 * math.pi)
    assert c_alpha(norm, a) == pytest.approx(c_quad, rel=1e-11)
    assert saturation_coefficient(norm, a) == pytest.approx(d_quad, rel=1e-11)
    q = 1e6
    r = propagate(q, 0.5 * q, norm, a)
    assert r.q_hat * math.sqrt(q) == pytest.approx(c_alpha(norm, a), rel=10.0 / q)
    assert (1.0 - r.q_tilde) * math.sqrt(q) == pytest.approx(saturation_coefficient(norm, a), rel=10.0 / q)
    assert c_alpha(norm, -a) == c_alpha(norm, a) and c_alpha(norm, 2 * a) == pytest.approx(2 * c_alpha(norm, a))


def test_c_alpha_callable_and_errors():
    assert c_alpha(special.erf, 0.8, dphi=_erf_dphi) == pytest.approx(c_alpha("erf", 0.8), rel=1e-10)
    assert saturation_coefficient(special.erf, 0.8, dphi=_erf_dphi) == pytest.approx(
        saturation_coefficient("erf", 0.8), rel=1e-10)
    assert c_alpha("erf", 1.0) == pytest.approx(2.0 / math.pi)
    for fn in (c_alpha, saturation_coefficient):
        with pytest.raises(ValueError, match="layernorm"):
            fn("layernorm", 1.0)
        with pytest.raises(ValueError, match="alpha"):
            fn("erf", 0.0)


def test_lambda_inv_identities():
    """Eq. 19: λ^{−1} = C_α²σ_21⁴/(½σ_21² + σ_OV² p̃_⋆); without attention 2C_α²σ_21²; ∝ α²; 0 without MLP."""
    s21 = np.array([0.3, 0.61, 2.0])
    assert np.allclose(lambda_inv(sigma_21=s21, sigma_ov=0.0, norm="erf", alpha=1.3),
                       2 * c_alpha("erf", 1.3) ** 2 * s21**2, rtol=1e-14)
    li = lambda_inv(sigma_21=S21, sigma_ov=SOV, norm="erf", alpha=1.0)
    assert np.allclose(lambda_inv(sigma_21=S21, sigma_ov=SOV, norm="erf", alpha=0.5), 0.25 * li, rtol=1e-14)
    s = 0.5 * S21**2 + SOV**2 * (2.0 / np.pi) * np.arcsin(c_star(sigma_21=S21, sigma_ov=SOV))
    assert np.allclose(li, (2.0 / np.pi) ** 2 * S21**4 / s, rtol=1e-13)
    assert lambda_inv(sigma_21=0.0, sigma_ov=0.7, norm="erf") == 0.0 and lambda_inv(sigma_21=0.0, sigma_ov=0.0,
                                                                                    norm="erf") == 0.0
    assert np.all(np.diff(li, axis=1) < 0.0)  # attention slows the stretched exponential down


def test_asymptotic_curves():
    b = np.arange(1.0, 65.0)
    assert np.allclose(preln_backward_asymptotic(64, b, 0.66), (64 / b) ** 0.66)
    assert np.allclose(preln_forward_asymptotic(b, 0.66) * preln_backward_asymptotic(64, b, 0.66), 64**0.66)
    li = 0.25
    plain = stretched_backward_asymptotic(64, b, li)
    assert np.allclose(np.log(plain), (8.0 - np.sqrt(b)) * 0.5)
    assert np.allclose(stretched_backward_asymptotic(64, b, li, refined=True) / plain, (64 / b) ** (-li / 8))
    assert np.allclose(stretched_forward_asymptotic(b, li, refined=True), b ** (-li / 8) * np.exp(np.sqrt(b * li)))
    assert stretched_backward_asymptotic(64, 64, li) == 1.0
    with pytest.raises(ValueError, match="lam_inv"):
        stretched_forward_asymptotic(b, -1.0)
    with pytest.raises(ValueError, match="b must be"):
        preln_forward_asymptotic(0.0, 0.5)


def test_phase_map_is_vectorised_and_matches_pointwise():
    s21, sov = np.linspace(0.0, 2.0, 11), np.linspace(0.0, 1.5, 7)
    pm = phase_map(sigma_21=s21, sigma_ov=sov, norm="erf", alpha=1.0)
    assert isinstance(pm, PhaseMap) and pm.zeta.shape == (11, 7) and pm.lambda_inv.shape == (11, 7)
    assert np.isnan(pm.zeta[0, 0]) and pm.lambda_inv[0, 0] == 0.0
    assert pm.zeta[6, 2] == pytest.approx(zeta(sigma_21=s21[6], sigma_ov=sov[2]), rel=1e-15)
    assert pm.lambda_inv[6, 2] == pytest.approx(lambda_inv(sigma_21=s21[6], sigma_ov=sov[2], norm="erf", alpha=1.0),
                                                rel=1e-14)
    with pytest.raises(ValueError, match="elementwise"):
        phase_map(sigma_21=s21, sigma_ov=sov, norm="layernorm")
    with pytest.raises(ValueError, match="sigma_ov"):
        phase_map(sigma_21=s21, sigma_ov=-sov - 1.0)


# ------------------------------------------------------------------------------------------------------------
# APJN growth of the recurrences vs Eqs. 16 and 18
# ------------------------------------------------------------------------------------------------------------

def test_preln_log_log_slope_approaches_zeta():
    """Result 3.4: the local slope s(b) = [log 𝒥^{4b,0} − log 𝒥^{b,0}]/log 4 → ζ. Its error is driven by c → 1
    (p̃ = c for LayerNorm), ∝ b^{−μ} with μ = 1 − ζ (Eq. 86), so consecutive error ratios → 4^{−μ}."""
    s21, sov = np.array([0.61, 1.0, 0.6]), np.array([0.31, 1.0, 1.2])
    pr = apjn_profile(sigma_21=s21, sigma_ov=sov, blocks=16 * 1024, norm="layernorm", q0=1.0, p0=0.2)
    lj = pr.log_forward()
    z, mu = zeta(sigma_21=s21, sigma_ov=sov), convergence_exponent(sigma_21=s21, sigma_ov=sov, norm="layernorm")

    def err(b):
        return (lj[4 * b] - lj[b]) / math.log(4.0) - z

    for b in (64, 256, 1024):
        assert np.all(np.abs(err(4 * b)) < np.abs(err(b)))
        assert np.all(np.abs(err(4 * b) / err(b) / 4.0**-mu - 1.0) <= b ** -np.minimum(mu, 1 - mu))
    # backward APJN is the same product read from the other end (Eq. 48): 𝒥^{B,b} = 𝒥^{B,0}/𝒥^{b,0}
    assert np.allclose(pr.log_backward(), lj[-1] - lj, rtol=0, atol=1e-9)


def test_stretched_exponential_without_attention_next_order():
    """Result 3.5 at σ_OV = 0, where the next order is fully determined: increments of log 𝒥^{b,0} from b to 4b are

        (√(4b) − √b)/√λ + γ log 4 + O(log b/√b),   γ = −1/(8λ) + C_α D_α,

    where −1/(8λ) is Eq. 75's second-order term of log(1 + x) and C_αD_α (erf: 4/π²) comes from q̃ ≈ 1 − D_α/√q:
    Q^b ≈ Sb − (σ_21²D_α/√S)√b adds C_αD_α/b to ½σ_21² q̂ at S = ½σ_21² (derivation in the docstring of
    sigprop.apjn.asymptotics). Eq. 76 omits this piece, so its residual tends to C_αD_α·log 4 ≈ 0.56 instead of 0.
    The remainder is checked against the next-next order, |γ log 4|·log b/√b (coefficient one)."""
    s21 = np.array([0.61, 1.0, 2.0])
    alpha = np.array([1.0, 0.5, 1.5])
    pr = apjn_profile(sigma_21=s21, sigma_ov=0.0, blocks=16384, norm="erf", alpha=alpha)
    lj = pr.log_forward()
    li = lambda_inv(sigma_21=s21, sigma_ov=0.0, norm="erf", alpha=alpha)
    gamma = -li / 8.0 + c_alpha("erf", alpha) * saturation_coefficient("erf", alpha)
    assert np.allclose(c_alpha("erf", alpha) * saturation_coefficient("erf", alpha), 4.0 / math.pi**2)
    for b in (1024, 4096):
        inc = lj[4 * b] - lj[b]
        lead = (math.sqrt(4 * b) - math.sqrt(b)) * np.sqrt(li)
        resid = inc - lead - gamma * math.log(4.0)
        assert np.all(np.abs(resid) <= np.abs(gamma) * math.log(4.0) * math.log(b) / math.sqrt(b)), resid


def test_stretched_exponential_leading_order_vit_setting():
    """Result 3.5, Eq. 18, in the paper's ViT setting (σ_21, σ_OV) = (0.61, 0.31), Derf α = 1: the ratio R(b) of the
    recurrence's log-APJN increment (b → 4b) to Eq. 18's (√(4b) − √b)/√λ approaches 1. With attention the next
    order includes an initial-condition-dependent b^{1/2−μ} term (μ ≈ ½, Eq. 86; not fully determined by the
    theory), so only the monotone approach and the leading order's dominance (|R − 1| below the size of an O(1)
    log-coefficient term, log 4/lead) are asserted; the measured values are in the report."""
    pr = apjn_profile(sigma_21=0.61, sigma_ov=0.31, blocks=16384, norm="erf", alpha=1.0, q0=1.0, p0=0.2)
    lj = pr.log_forward()
    li = lambda_inv(sigma_21=0.61, sigma_ov=0.31, norm="erf", alpha=1.0)
    dev = []
    for b in (256, 1024, 4096):
        lead = (math.sqrt(4 * b) - math.sqrt(b)) * math.sqrt(li)
        dev.append(abs((lj[4 * b] - lj[b]) / lead - 1.0))
    assert dev[0] > dev[1] > dev[2]
    assert dev[2] <= math.log(4.0) / ((math.sqrt(4 * 4096) - math.sqrt(4096)) * math.sqrt(li))
