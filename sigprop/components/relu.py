"""ReLU: the module and its moment rules (Kedia et al. App. A.4, Tables 15–20 row "ReLU", Table 1).

Notation: the input x is Gaussian with mean μ, variance σ² and correlation ρ between the two elements of a pair (two
tokens: ρ = r^l, or two hidden units of one token: ρ = r^d); a = μ/σ is the standardised mean. φ, Φ are the
standard normal density and distribution function, Φ₂(h, k; ρ) the standard bivariate normal distribution function.

The "exact" rules hold for any mean μ. They rest on the moments of a standard bivariate normal pair (Z₁, Z₂) with
correlation ρ truncated to {Z₁ > −a, Z₂ > −a} (Rosenbaum 1961), given in closed form by
:func:`truncated_bvn_moments`. At μ = 0 they reduce to the paper's printed forms (``approx="kedia"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from ..core.gaussian import bvn_cdf, norm_cdf, norm_pdf
from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_approx, clip_corr
from ..walk.protocol import TOKEN_WISE

__all__ = [
    "ReLU",
    "ActivationMoments",
    "relu_forward",
    "relu_backward",
    "relu_cross_moment",
    "truncated_bvn_moments",
    "RELU_APPROX",
    "MIN_STANDARDIZED_MEAN",
]

#: Approximations offered by the ReLU rules.
RELU_APPROX = ("exact", "kedia", "kedia_table1")

#: Most negative standardised mean μ/σ the exact rules accept. Below it the element is positive with probability
#: < Φ(−8) ≈ 6e-16; its output moments are then differences of numbers that agree to ~16 digits and the computed
#: correlations lose all precision in float64 (at μ/σ = −8 their absolute error is still ~2e-11,
#: checked against 40-digit mpmath quadrature).
MIN_STANDARDIZED_MEAN = -8.0


def check_standardized_mean(a: Stat, what: str, why: str = "the element is positive with probability < 1e-15 and "
                            "the output correlations are not computable in float64") -> None:
    """Raise ``ValueError`` if a standardised mean lies below :data:`MIN_STANDARDIZED_MEAN` (see there)."""
    a_arr = np.asarray(a)
    if np.any(a_arr < MIN_STANDARDIZED_MEAN):
        got = float(a_arr[a_arr < MIN_STANDARDIZED_MEAN].flat[0])
        raise ValueError(f"{what} must be >= {MIN_STANDARDIZED_MEAN} for the exact rules (got {got:.4g}): {why}")


def truncated_bvn_moments(a: Stat, rho: Stat) -> tuple[Stat, Stat, Stat, Stat]:
    """Truncated moments of a standard bivariate normal (Z₁, Z₂) with correlation ρ over {Z₁ > −a, Z₂ > −a}.

    Returns (L, m₁, m₁₁, m₁₂) = (P, E[Z₁ 1], E[Z₁² 1], E[Z₁Z₂ 1]) with 1 the indicator of the region (by symmetry
    E[Z₂ 1] = m₁ and E[Z₂² 1] = m₁₁). With λ = √((1−ρ)/(1+ρ)) (Rosenbaum 1961, at equal truncation points h = k = −a):

        L   = Φ₂(a, a; ρ)
        m₁  = (1+ρ) φ(a) Φ(aλ)
        m₁₁ = L − a(1+ρ²) φ(a) Φ(aλ) + ρ√(1−ρ²) φ(a) φ(aλ)
        m₁₂ = ρL − 2ρa φ(a) Φ(aλ) + √(1−ρ²) φ(a) φ(aλ),   φ(a) φ(aλ) = exp(−a²/(1+ρ))/(2π).

    Valid for ρ ∈ [−1, 1] (ρ = 1 gives the one-dimensional truncated moments). Broadcasts over arrays.
    """
    a = np.asarray(a, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    lam = np.sqrt((1.0 - rho) / np.maximum(1.0 + rho, 1e-300))
    with np.errstate(invalid="ignore"):
        a_lam = np.where(a == 0.0, 0.0, a * lam)
    big_l = bvn_cdf(a, a, rho)
    pa = norm_pdf(a)
    cdf_al = norm_cdf(a_lam)
    joint = pa * norm_pdf(a_lam)
    s = np.sqrt(np.clip(1.0 - rho**2, 0.0, None))
    m1 = (1.0 + rho) * pa * cdf_al
    m11 = big_l - a * (1.0 + rho**2) * pa * cdf_al + rho * s * joint
    m12 = rho * big_l - 2.0 * rho * a * pa * cdf_al + s * joint
    return big_l, m1, m11, m12


def _relu_cov_nonpositive(a: Stat, rho: Stat) -> Stat:
    """Cov(relu(Z₁ + a), relu(Z₂ + a)) for standard (Z₁, Z₂) with correlation ρ and a ≤ 0 (unit input variance).

    E[relu relu] = a²L + 2a m₁ + m₁₂ (:func:`truncated_bvn_moments`) and E[relu] = aΦ(a) + φ(a).
    """
    big_l, m1, _, m12 = truncated_bvn_moments(a, rho)
    mean = a * norm_cdf(a) + norm_pdf(a)
    return a * a * big_l + 2.0 * a * m1 + m12 - mean * mean


def relu_cross_moment(mean: Stat, var: Stat, rho: Stat) -> Stat:
    """Cov(relu(X), relu(Y)) for (X, Y) bivariate normal with common mean μ, variance σ² and correlation ρ.

    With a = μ/σ, for a ≤ 0 (:func:`truncated_bvn_moments`)

        Cov = σ² [ (a² + ρ) Φ₂(a, a; ρ) + 2a φ(a) Φ(aλ) + √(1−ρ²) exp(−a²/(1+ρ))/(2π) − (aΦ(a) + φ(a))² ],

    and for a > 0 the reflection relu(x) = x + relu(−x) with Stein's lemma gives
    Cov(μ) = ρσ² (1 − 2Φ(−a)) + Cov(−μ), which keeps the result free of the cancellation of the μ² terms.
    ρ = 1 gives the variance of the rectified Gaussian: σ²[(a²+1)Φ(a) + aφ(a) − (aΦ(a)+φ(a))²].
    """
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    a = mean / np.sqrt(var)
    a_neg = -np.abs(a)
    reflect = np.where(a > 0.0, rho * (1.0 - 2.0 * norm_cdf(a_neg)), 0.0)
    return var * (reflect + _relu_cov_nonpositive(a_neg, rho))


def _kedia_corr(r: Stat) -> Stat:
    """Kedia et al. App. A.4: r_out = (πr/2 + r sin⁻¹r + √(1−r²) − 1)/(π − 1) (zero-mean input)."""
    return (0.5 * np.pi * r + r * np.arcsin(r) + np.sqrt(np.clip(1.0 - r**2, 0.0, None)) - 1.0) / (np.pi - 1.0)


def relu_forward(m: Moments, approx: str = "exact") -> Moments:
    """Moments of relu(x) for Gaussian x (Kedia et al. App. A.4; Tables 15, 16, 18, 19; Table 1).

    ``approx="exact"`` (any mean; a = μ/σ):

        μ_out  = μ Φ(a) + σ φ(a)
        σ²_out = σ² [(a²+1) Φ(a) + a φ(a)] − μ²_out                       (rectified Gaussian)
        r_out  = Cov(relu x_t, relu x_s)/σ²_out with Cov from :func:`relu_cross_moment` at ρ = r^l,
        r^d_out likewise at ρ = r^d.

    ``approx="kedia"`` — the paper's printed zero-mean forms (Tables 15, 16, 18, 19, App. A.4), exact at μ = 0; the
    input mean is ignored, as in the paper:

        μ_out = σ/√(2π),  σ²_out = (π−1)/(2π) σ²,
        Cov_out = (1/4 + sin⁻¹(r)/(2π)) Cov_in − (1 − √(1−r²)) σ²/(2π),
        i.e. r_out = (πr/2 + r sin⁻¹r + √(1−r²) − 1)/(π−1), for r = r^l and r = r^d alike.

    ``approx="kedia_table1"`` — Table 1's simplification: the same mean and variance and r_out ≈ 0.7 r + 0.3 r²
    (a polynomial fit of the closed form, App. L.1; within 0.0061 of it for r ∈ [0, 1], off by up to 0.068
    for r < 0), applied to r^d as well.

    Assumes: Gaussian input with separable correlations (see :mod:`sigprop.core.moments`). Raises ``ValueError`` for an
    unknown ``approx`` or (exact) for μ/σ < :data:`MIN_STANDARDIZED_MEAN`.
    """
    check_approx(approx, RELU_APPROX, "relu_forward")
    if approx != "exact":
        sigma = np.sqrt(m.var)
        mean = sigma / np.sqrt(2.0 * np.pi)
        var = (np.pi - 1.0) / (2.0 * np.pi) * m.var
        if approx == "kedia":
            corr, corr_h = _kedia_corr(m.corr), _kedia_corr(m.corr_hidden)
        else:
            corr, corr_h = 0.7 * m.corr + 0.3 * m.corr**2, 0.7 * m.corr_hidden + 0.3 * m.corr_hidden**2
        return Moments(mean=mean, var=var, corr=clip_corr(corr), corr_hidden=clip_corr(corr_h))
    sigma = np.sqrt(m.var)
    a = m.mean / sigma
    check_standardized_mean(a, "relu input mean/std μ/σ")
    mean = m.mean * norm_cdf(a) + sigma * norm_pdf(a)
    var = relu_cross_moment(m.mean, m.var, 1.0)
    corr = relu_cross_moment(m.mean, m.var, m.corr) / var
    corr_h = relu_cross_moment(m.mean, m.var, m.corr_hidden) / var
    return Moments(mean=mean, var=var, corr=clip_corr(corr), corr_hidden=clip_corr(corr_h))


def relu_backward(g: GradMoments, m_in: Moments, approx: str = "exact") -> GradMoments:
    """Gradient moments through relu: g_in = 1{x > 0} g_out (Kedia et al. App. A.4; Tables 17, 20; Table 1).

    ``approx="exact"`` (any input mean; a = μ/σ, r = r^l of the input):

        σ²_gin = Φ(a) σ²_gout,     r_gin = Φ₂(a, a; r)/Φ(a) · r_gout,

    since E[1{x_t>0} 1{x_s>0}] = Φ₂(a, a; r). ``approx="kedia"`` and ``"kedia_table1"`` (zero-mean input, as
    printed in Tables 17, 20 and Table 1; the input mean is ignored): σ²_gin = σ²_gout/2,
    Cov_gin = (1/4 + sin⁻¹(r)/(2π)) Cov_gout, i.e. r_gin = (1/2 + sin⁻¹(r)/π) r_gout. Both coincide at μ = 0.

    Assumes: Gaussian input; the output gradient is zero-mean and independent of the input (as in the paper).
    """
    check_approx(approx, RELU_APPROX, "relu_backward")
    if approx != "exact":
        return GradMoments(var=0.5 * g.var, corr=clip_corr((0.5 + np.arcsin(m_in.corr) / np.pi) * g.corr))
    a = m_in.mean / np.sqrt(m_in.var)
    check_standardized_mean(a, "relu input mean/std μ/σ")
    p = norm_cdf(a)
    both = bvn_cdf(a, a, m_in.corr)
    return GradMoments(var=p * g.var, corr=clip_corr(both / p * g.corr))


class ActivationMoments:
    """The moment rules of an activation module, from its class's ``moment_rules``: its forward and backward rule
    (each taking ``approx``). A mixin, before the torch activation the module extends."""

    rules = TOKEN_WISE
    moment_rules: ClassVar[tuple[Callable[..., Moments], Callable[..., GradMoments]]]

    def forward_moments(self, m: Moments, approx: str = "exact") -> Moments:
        return self.moment_rules[0](m, approx=approx)

    def backward_moments(self, g: GradMoments, m_in: Moments, approx: str = "exact") -> GradMoments:
        return self.moment_rules[1](g, m_in, approx=approx)


class ReLU(ActivationMoments, nn.ReLU):
    """``torch.nn.ReLU`` that also transforms moments (:func:`relu_forward`, :func:`relu_backward`)."""

    moment_rules = (relu_forward, relu_backward)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 (inherited behaviour)
        return super().forward(x)
