"""GeLU (exact, erf form): the module and its moment rules (Kedia et al. App. A.5, Tables 15–18 and 20 row "GeLU").

GeLU(x) = x Φ(x) = G(x), G'(x) = Φ(x) + x φ(x). Notation: the input x is Gaussian with mean μ, variance s = σ² and
correlation ρ within a pair (two tokens, ρ = r^l, or two hidden units, ρ = r^d), so the pair covariance is c = ρs;
v = 1 + s, a = μ/√v, ρ' = c/v. The paper's forms are for μ = 0; the "exact" rules below hold for any μ and reduce
to them at μ = 0 (we checked every printed form against quadrature: they are correct; Table 19 has no GeLU entry).

Two equivalent any-mean evaluations are provided:

* :func:`gelu_cross_moment` / :func:`gelu_grad_cross_moment` (used by the rules) — Price's theorem
  ∂E[f(X)g(Y)]/∂c = E[f'(X)g'(Y)] integrates the closed-form E[G''(X)G''(Y)] over the pair covariance c with a
  48-node Gauss–Legendre rule. Every term is non-negative for c ≥ 0, so the result keeps full relative precision
  in the negative tail too (checked against 40-digit mpmath quadrature to ~1e-14 for σ² ∈ [1e-6, 1e4]).
* :func:`gelu_cross_moment_closed` / :func:`gelu_grad_cross_moment_closed` — fully closed forms, exact in exact
  arithmetic, but they subtract terms of size μ² Φ₂ and lose relative precision when μ/√(1+σ²) ≲ −3 (1e-10 at −3,
  1e-7 at −6, garbage at −8 for σ² = 0.01). Kept as an independent check (tests) and to display the derivation.

Derivation of the closed forms. Φ(x) = P(Z ≤ x) for an independent Z ~ N(0, 1), so with U = X − Z₁, V = Y − Z₂
(Z₁, Z₂ independent standard normals), G(X)G(Y) averages to E[X Y 1{U > 0, V > 0}]. (U, V) is bivariate normal
with mean μ, variance v and correlation ρ'; regressing X and Y on the standardised (U, V) reduces the expectation
to the truncated moments of :func:`sigprop.components.relu.truncated_bvn_moments` at (a, ρ'). The gradient terms
follow from Stein's lemma and Gaussian tilting by φ.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.gaussian import bvn_cdf, norm_cdf, norm_pdf
from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_approx, clip_corr
from .relu import ActivationMoments, check_standardized_mean, truncated_bvn_moments

__all__ = [
    "GELU",
    "gelu_forward",
    "gelu_backward",
    "gelu_mean",
    "gelu_cross_moment",
    "gelu_grad_cross_moment",
    "gelu_cross_moment_closed",
    "gelu_grad_cross_moment_closed",
    "PRICE_NODES",
    "GELU_APPROX",
]

#: Approximations offered by the GeLU rules (the paper's Table 1 has no GeLU row, so no "kedia_table1").
GELU_APPROX = ("exact", "kedia")

#: Gauss–Legendre nodes of the Price-theorem integral (32 already agree with 40-digit quadrature to ~1e-14).
PRICE_NODES = 48

_GUARD_WHY = ("the gate P(Z ≤ x) of GeLU(x) = x·P(Z ≤ x) is then below 1e-15 and the rules are not verified "
              "there (the fixed quadrature loses accuracy as the integrand spans hundreds of orders of magnitude)")


def gelu_mean(mean: Stat, var: Stat) -> Stat:
    """E[G(X)] for X ~ N(μ, s): μ Φ(a) + s φ(a)/√v (v = 1+s, a = μ/√v); at μ = 0: s/√(2π(s+1)) (Table 15)."""
    mean = np.asarray(mean, dtype=np.float64)
    v = 1.0 + np.asarray(var, dtype=np.float64)
    a = mean / np.sqrt(v)
    return mean * norm_cdf(a) + var * norm_pdf(a) / np.sqrt(v)


def _mean_grad(mean: Stat, var: Stat) -> Stat:
    """E[G'(X)] for X ~ N(μ, s) = d/dμ E[G(X)] = Φ(a) + a φ(a)/v."""
    v = 1.0 + var
    a = mean / np.sqrt(v)
    return norm_cdf(a) + a * norm_pdf(a) / v


def _cov_nonpositive(mean: Stat, var: Stat, rho: Stat) -> Stat:
    """Cov(G(X), G(Y)) by the truncated-moment formula (accurate for μ ≤ 0; see :func:`gelu_cross_moment`)."""
    s = var
    c = rho * s
    v = 1.0 + s
    rp = c / v
    a = mean / np.sqrt(v)
    big_l, m1, m11, m12 = truncated_bvn_moments(a, rp)
    den = np.sqrt(v) * (1.0 - rp**2)
    p = (s - c * rp) / den
    q = (c - s * rp) / den
    resid = c - 2.0 * p * q - rp * (p * p + q * q)
    second = (mean**2 * big_l + 2.0 * mean * (p + q) * m1 + 2.0 * p * q * m11 + (p * p + q * q) * m12
              + resid * big_l)
    mu_out = gelu_mean(mean, var)
    return second - mu_out * mu_out


def gelu_cross_moment_closed(mean: Stat, var: Stat, rho: Stat) -> Stat:
    """Cov(G(X), G(Y)) in closed form (precision: see the module docstring).

    (X, Y) bivariate normal with common mean μ, variance s and correlation ρ (c = ρs).

    With v = 1+s, a = μ/√v, ρ' = c/v and (L, m₁, m₁₁, m₁₂) = truncated_bvn_moments(a, ρ'), the regression
    coefficients of X−μ on the standardised (U, V) are (p, q) and of Y−μ are (q, p), where
    p = (s − cρ')/(√v(1−ρ'²)), q = (c − sρ')/(√v(1−ρ'²)), with residual covariance e = c − 2pq − ρ'(p² + q²); then

        E[G(X)G(Y)] = μ²L + 2μ(p+q) m₁ + 2pq m₁₁ + (p² + q²) m₁₂ + e L,   Cov = E[G(X)G(Y)] − E[G(X)]².

    For μ > 0 we use the reflection G(x) = x + G(−x) and Stein's lemma, Cov(μ) = c(1 − 2E[G'(X̃)]) + Cov(−μ) with
    X̃ ~ N(−μ, s), which avoids the cancellation of the μ² terms. At μ = 0 this equals Table 18's
    σ²/(4π)(πr + 2r sin⁻¹(rσ²/(σ²+1)) + 2σ²(σ²(1−r²)+1+r²)/((σ²+1)√((σ²+1)²−r²σ⁴)) − 2σ²/(σ²+1)), and at ρ = 1
    Table 16's variance.
    """
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    neg = -np.abs(mean)
    reflect = np.where(mean > 0.0, rho * var * (1.0 - 2.0 * _mean_grad(neg, var)), 0.0)
    return reflect + _cov_nonpositive(neg, var, rho)


def gelu_grad_cross_moment_closed(mean: Stat, var: Stat, rho: Stat) -> Stat:
    """E[G'(X) G'(Y)] in closed form (precision: see the module docstring).

    (X, Y) bivariate normal with common mean μ, variance s and correlation ρ (c = ρs).

    E[G'G'] = A + 2B + C with, writing D = v² − c² (v = 1+s, a = μ/√v, ρ' = c/v),

        A = E[Φ(X)Φ(Y)]   = Φ₂(a, a; ρ'),
        B = E[Φ(X) Yφ(Y)] = φ(a)/√v · [ (μ/v) Φ(u) + ρ' √(v/D) φ(u) ],   u = μ(1−ρ')√v/√D,
        C = E[Xφ(X) Yφ(Y)] = exp(−μ²/(v+c))/(2π√D) · [ (μ/(v+c))² + c/D ].

    At μ = 0: 1/4 + sin⁻¹(c/v)/(2π) + c((2s+3)(s+1) − 2c²)/(2π(s+1)D^{3/2}) (Table 20), and at ρ = 1 (c = s)
    1/4 + sin⁻¹(s/(s+1))/(2π) + s(5s+3)/(2π(s+1)(2s+1)^{3/2}) (Table 17).
    """
    mean = np.asarray(mean, dtype=np.float64)
    s = np.asarray(var, dtype=np.float64)
    c = np.asarray(rho, dtype=np.float64) * s
    v = 1.0 + s
    rp = c / v
    a = mean / np.sqrt(v)
    d = v * v - c * c
    u = mean * (1.0 - rp) * np.sqrt(v / d)
    big_a = bvn_cdf(a, a, rp)
    big_b = norm_pdf(a) / np.sqrt(v) * (mean / v * norm_cdf(u) + rp * np.sqrt(v / d) * norm_pdf(u))
    big_c = np.exp(-mean**2 / (v + c)) / (2.0 * np.pi * np.sqrt(d)) * ((mean / (v + c)) ** 2 + c / d)
    return big_a + 2.0 * big_b + big_c


def _gelu_second_derivative_cross(mean: Stat, var: Stat, u: Stat) -> Stat:
    """J(u) = E[G''(X)G''(Y)] for (X, Y) with common mean μ, variance s and covariance u; G''(x) = (2 − x²)φ(x).

    Tilting the Gaussian by φ(X)φ(Y): with v = 1+s, D = v² − u², J = exp(−μ²/(v+u))/(2π√D) · E'[(2−X²)(2−Y²)],
    where under the tilted law X, Y have mean m = μ/(v+u), variance τ = 1 − v/D and covariance κ = u/D, so
    E'[(2−X²)(2−Y²)] = (2 − m² − τ)² + 4m²κ + 2κ² (Isserlis). Non-negative for u ≥ 0.
    """
    v = 1.0 + var
    d = v * v - u * u
    m = mean / (v + u)
    tau = 1.0 - v / d
    kappa = u / d
    return np.exp(-mean**2 / (v + u)) / (2.0 * np.pi * np.sqrt(d)) * ((2.0 - m * m - tau) ** 2
                                                                    + 4.0 * m * m * kappa + 2.0 * kappa**2)


def _price_integrals(mean: Stat, var: Stat, rho: Stat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(∫₀^c J(u) du, ∫₀^c (c − u) J(u) du) with c = ρs, by Gauss–Legendre in t = log(v − |u|).

    The substitution maps the integrable growth of J near |u| → v = 1+s (reached only as s → ∞) to a smooth
    exponential in t, so a fixed rule stays accurate for every σ². Also returns c.
    """
    mean, var, rho = np.broadcast_arrays(*(np.asarray(t, dtype=np.float64) for t in (mean, var, rho)))
    x, w = special.roots_legendre(PRICE_NODES)
    c = (rho * var)[..., None]
    v = 1.0 + var[..., None]
    lo = np.log(v - np.abs(c))
    hi = np.log(v)
    half = 0.5 * (hi - lo)
    e = np.exp(half * x + 0.5 * (hi + lo))
    u = np.sign(c) * (v - e)
    jw = np.sign(c) * half * w * e * _gelu_second_derivative_cross(mean[..., None], var[..., None], u)
    return np.sum(jw, axis=-1), np.sum(jw * (c - u), axis=-1), c[..., 0]


def gelu_cross_moment(mean: Stat, var: Stat, rho: Stat) -> Stat:
    """Cov(G(X), G(Y)) for (X, Y) bivariate normal with common mean μ, variance s and correlation ρ (c = ρs).

    Price's theorem twice (d/dc E[G(X)G(Y)] = E[G'(X)G'(Y)], d/dc E[G'G'] = E[G''G''] = J(c)):

        Cov(c) = c E[G'(X)]² + ∫₀^c (c − u) J(u) du,   E[G'(X)] = Φ(a) + aφ(a)/v,

    with J from Gaussian tilting (closed form) and the integral by a Gauss–Legendre rule (:data:`PRICE_NODES`).
    Equals :func:`gelu_cross_moment_closed`; ρ = 1 gives the variance.
    """
    _, second, c = _price_integrals(mean, var, rho)
    return c * _mean_grad(np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)) ** 2 + second


def gelu_grad_cross_moment(mean: Stat, var: Stat, rho: Stat) -> Stat:
    """E[G'(X) G'(Y)] for (X, Y) bivariate normal with common mean μ, variance s and correlation ρ (c = ρs).

    Price's theorem: E[G'G'](c) = E[G'(X)]² + ∫₀^c J(u) du (see :func:`gelu_cross_moment`). Equals
    :func:`gelu_grad_cross_moment_closed`; ρ = 1 gives E[G'(X)²].
    """
    first, _, _ = _price_integrals(mean, var, rho)
    return _mean_grad(np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)) ** 2 + first


def _kedia_cov(s: Stat, r: Stat) -> Stat:
    """Table 18 (zero-mean input): Cov(G(x_t), G(x_s)) as printed."""
    rs = r * s
    return s / (4.0 * np.pi) * (np.pi * r + 2.0 * r * np.arcsin(rs / (s + 1.0))
                                + 2.0 * s * (s * (1.0 - r**2) + 1.0 + r**2)
                                / ((s + 1.0) * np.sqrt((s + 1.0) ** 2 - rs**2))
                                - 2.0 * s / (s + 1.0))


def _kedia_grad(s: Stat, r: Stat) -> Stat:
    """Tables 17 and 20 (zero-mean input): E[G'(x_t) G'(x_s)] as printed (r = 1 gives the variance factor)."""
    rs = r * s
    d = (s + 1.0) ** 2 - rs**2
    return (0.25 + np.arcsin(rs / (s + 1.0)) / (2.0 * np.pi)
            + rs * ((2.0 * s + 3.0) * (s + 1.0) - 2.0 * rs**2) / (2.0 * np.pi * (s + 1.0) * d**1.5))


def gelu_forward(m: Moments, approx: str = "exact") -> Moments:
    """Moments of GeLU(x) = xΦ(x) for Gaussian x (Kedia et al. App. A.5; Tables 15, 16, 18).

    ``approx="exact"`` (any mean): μ_out = :func:`gelu_mean`, σ²_out = :func:`gelu_cross_moment` at ρ = 1,
    r_out = Cov(ρ = r^l)/σ²_out and r^d_out = Cov(ρ = r^d)/σ²_out (Price's theorem over a closed-form integrand;
    equal to the closed forms :func:`gelu_cross_moment_closed`, which the module docstring derives).

    ``approx="kedia"`` — the paper's printed zero-mean forms (the input mean is ignored, as in the paper):
    μ_out = σ²/√(2π(σ²+1)),
    σ²_out = σ²/(2π) (π/2 − σ²/(1+σ²) + sin⁻¹(σ²/(1+σ²)) + 2σ²/((1+σ²)√(1+2σ²))),
    Cov_out as in Table 18 (:func:`gelu_cross_moment_closed`'s docstring); Table 19 has no GeLU entry, so the hidden
    correlation uses the same form with r^d. Equal to "exact" at μ = 0.

    Assumes: Gaussian input with separable correlations. Raises ``ValueError`` for an unknown ``approx`` or (exact)
    for μ/√(1+σ²) < :data:`sigprop.components.relu.MIN_STANDARDIZED_MEAN` = −8 (the gate P(Z ≤ x) is then below
    1e-15; the rules are verified to ~1e-14 down to that bound).
    """
    check_approx(approx, GELU_APPROX, "gelu_forward")
    s = m.var
    var: Stat
    if approx == "kedia":
        mean = s / np.sqrt(2.0 * np.pi * (s + 1.0))
        var = s / (2.0 * np.pi) * (0.5 * np.pi - s / (1.0 + s) + np.arcsin(s / (1.0 + s))
                                   + 2.0 * s / ((1.0 + s) * np.sqrt(1.0 + 2.0 * s)))
        return Moments(mean=mean, var=var, corr=clip_corr(_kedia_cov(s, m.corr) / var),
                       corr_hidden=clip_corr(_kedia_cov(s, m.corr_hidden) / var))
    check_standardized_mean(m.mean / np.sqrt(1.0 + s), "gelu input mean/√(1+σ²)", _GUARD_WHY)
    var = gelu_cross_moment(m.mean, s, 1.0)
    return Moments(mean=gelu_mean(m.mean, s), var=var,
                   corr=clip_corr(gelu_cross_moment(m.mean, s, m.corr) / var),
                   corr_hidden=clip_corr(gelu_cross_moment(m.mean, s, m.corr_hidden) / var))


def gelu_backward(g: GradMoments, m_in: Moments, approx: str = "exact") -> GradMoments:
    """Gradient moments through GeLU: g_in = G'(x) g_out, G'(x) = Φ(x) + xφ(x) (Kedia et al. App. A.5; Tables 17, 20).

    ``approx="exact"`` (any input mean): σ²_gin = E[G'(x)²] σ²_gout and
    r_gin = E[G'(x_t)G'(x_s)]/E[G'(x)²] · r_gout, both from :func:`gelu_grad_cross_moment`.
    ``approx="kedia"``: the printed zero-mean forms (input mean ignored):
    σ²_gin = [1/4 + sin⁻¹(σ²/(σ²+1))/(2π) + σ²(5σ²+3)/(2π(σ²+1)(2σ²+1)^{3/2})] σ²_gout and
    Cov_gin = [1/4 + sin⁻¹(rσ²/(σ²+1))/(2π) + rσ²((2σ²+3)(σ²+1) − 2r²σ⁴)/(2π(σ²+1)((σ²+1)² − r²σ⁴)^{3/2})] Cov_gout.

    Assumes: Gaussian input; the output gradient is zero-mean and independent of the input (as in the paper).
    """
    check_approx(approx, GELU_APPROX, "gelu_backward")
    s = m_in.var
    if approx == "kedia":
        e2 = _kedia_grad(s, 1.0)
        return GradMoments(var=e2 * g.var, corr=clip_corr(_kedia_grad(s, m_in.corr) / e2 * g.corr))
    check_standardized_mean(m_in.mean / np.sqrt(1.0 + s), "gelu input mean/√(1+σ²)", _GUARD_WHY)
    e2 = gelu_grad_cross_moment(m_in.mean, s, 1.0)
    cross = gelu_grad_cross_moment(m_in.mean, s, m_in.corr)
    return GradMoments(var=e2 * g.var, corr=clip_corr(cross / e2 * g.corr))


class GELU(ActivationMoments, nn.GELU):
    """``torch.nn.GELU`` in its exact erf form (x·Φ(x)) that also transforms moments (:func:`gelu_forward`,
    :func:`gelu_backward`). The tanh approximation is not offered: the rules are for the erf form."""

    moment_rules = (gelu_forward, gelu_backward)

    def __init__(self) -> None:
        super().__init__(approximate="none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 (inherited behaviour)
        return super().forward(x)
