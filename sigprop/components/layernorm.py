"""LayerNorm: the module and its moment rules (Kedia et al. App. A.6, Tables 15–20), exact at finite width.

Kedia et al. replace the sample standard deviation σ̂ by σ ("σ̂ → σ a.s. for large d", App. A.6), which gives
r_out = r(1 − 1/d) and σ²_gin = σ²_g/σ²_x. Here the Gaussian case is solved exactly at finite d.

Set-up (all of this module). One token's input x ∈ R^d is Gaussian with exchangeable hidden units and the separable
covariance of :mod:`sigprop.core.moments`: Cov(x_ti, x_sj) = σ² R_ts H_ij, H_ij = c (= corr_hidden) for i ≠ j. LayerNorm
first centres, u = x − x̄1 = Px with P = I − 11ᵀ/d. The mean μ and the shared part c of H are in the 1-direction that
P removes, so μ drops out exactly and u is an isotropic Gaussian in the n = d − 1 dimensional range of P with
per-direction variance σ²_eff = σ²(1 − c); |u|² ~ σ²_eff χ²_n. The output is y = u/σ̂ with σ̂² = |u|²/d + eps.
Two tokens t ≠ s give two such vectors u, v with correlation ρ = r (the input token correlation) in every direction;
θ is the angle between them. Then cos θ has the law of Pearson's sample correlation of d bivariate normal pairs
(n = d − 1 degrees of freedom), whose moments are classical (Hotelling 1953; Olkin & Pratt 1958):

    E[cos θ]          = ρ (2/n) (Γ((n+1)/2)/Γ(n/2))² ₂F₁(½, ½; n/2 + 1; ρ²)           ≈ ρ(1 − (1 − ρ²)/(2n)),
    E[1/(|u||v|)]     = ½ (Γ((n−1)/2)/Γ(n/2))² ₂F₁(½, ½; n/2; ρ²)                      (σ_eff = 1),
    E[cos²θ/(|u||v|)] = (1/2n)(Γ((n−1)/2)/Γ(n/2))² [(1−z)(G + 2zG') + (n − 4) z G],   z = ρ², (σ_eff = 1)
                        G = ₂F₁(3/2, 3/2; n/2 + 1; z),  G' = (9/4)/(n/2 + 1) ₂F₁(5/2, 5/2; n/2 + 2; z),
    E[1/|u|²] = 1/(n − 2),  E[1/|u|⁴] = 1/((n − 2)(n − 4))                             (σ_eff = 1).

All of them follow from the Wishart density of (a, b, cos θ) = (|u|², |v|², cos θ): expanding exp(ρ u·v/(1−ρ²)) in
powers of ρ separates the integrals into Gamma and Beta functions,

    E[(ab)^s cos^m θ] = (1−ρ²)^(n/2+2s) 4^s/(Γ(n/2)√π)
                        · Σ_{k ≡ m mod 2} (2ρ)^k/k! Γ(n/2+s+k/2)² Γ((m+k+1)/2)/Γ((n+m+k)/2),

and the resulting ₂F₁ (m = 0, 1) and ₃F₂(…, 3/2; 1/2, …) = (1 + 2z d/dz)₂F₁ (m = 2) series are brought to the forms
above by Euler's transformation ₂F₁(a, b; c; z) = (1−z)^(c−a−b) ₂F₁(c−a, c−b; c; z) (s = 0, m = 1 gives Olkin–Pratt;
s = −½, m = 0 and 2 the two inverse-norm moments). tests/components/test_layernorm.py sums this series numerically and
checks every closed form against it, against Hotelling's density of cos θ, and against product quadrature.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import NormChecks, check_range, clip_corr
from ..walk.protocol import Rules

__all__ = ["LayerNorm", "layernorm_forward", "layernorm_backward", "layernorm_forward_postnorm",
           "layernorm_backward_postnorm", "LAYERNORM_APPROX"]

#: The approximations the LayerNorm rules offer (see :func:`layernorm_forward`).
LAYERNORM_APPROX = ("exact", "kedia", "kedia_table1")

#: Smallest width the exact rules accept: they need E[1/|u|⁴] (n > 4), and G' stays finite at ρ = ±1 for n > 6.
MIN_WIDTH = 8


_CHECKS = NormChecks("layernorm", "a LayerNorm", MIN_WIDTH, LAYERNORM_APPROX)

#: Nodes of the trapezoid rule in t = log U over which the eps factors are averaged (:func:`_eps_factors`): the
#: density of U ~ Gamma(k) in t is smooth and decays exponentially on both sides, so the rule converges
#: geometrically (checked against adaptive quadrature in tests/components/test_layernorm.py).
EPS_NODES = 512


def _eps_factors(var_eff: Stat, d: Stat, eps: Stat) -> tuple[Stat, Stat]:
    """The factors eps puts on the output variance and on the input gradient's variance, exact in eps (App. A.6).

    With |u|² = σ²_eff χ²_n (n = d − 1), σ̂² = |u|²/d + eps = θ(U + c), U = χ²_n/2 ~ Gamma(k = n/2), θ = 2σ²_eff/d and
    c = eps/θ = d·eps/(2σ²_eff), and f = |y|²/d = U/(U + c):
      forward  σ²_out = E[f] = 1 − c E[1/(U + c)],
      backward σ²_gin/σ²_gin(eps = 0) = (k − 1) E[(d − 2 + (1 − f)²)/(U + c)]/(d − 2)
               = 1 − (k − 1) c E[1/(U (U + c))] + (k − 1) c² E[1/(U + c)³]/(d − 2),
    using tr(M²) = d − 1 − 2f + f² for M = I − 11ᵀ/d − y yᵀ/d and E[1/U] = 1/(k − 1). To first order both are
    1 − x with x = d·eps/(σ²_eff (d − 3)) and 1 − d·eps/(σ²_eff (d − 5)); those first-order forms are off by O(x²),
    which an input of small variance (a token table of standard deviation ~0.01 at eps = 1e-5) makes visible. The
    expectations are a trapezoid rule in t = log U (:data:`EPS_NODES`) over a window of ±14/√k around the mode log k
    (and 40/(k − 3) to the left, where E[1/(U + c)³] decays as e^{(k − 3)t} when c is small); eps = 0 gives exactly 1
    and 1.
    """
    var_eff, d, eps = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (var_eff, d, eps)))
    if not np.any(eps > 0):
        one = np.ones(var_eff.shape)
        return one, one
    k = (d - 1.0) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        c = d * eps / (2.0 * var_eff)
    left = np.maximum(14.0 / np.sqrt(k), 40.0 / (k - 3.0))
    right = 14.0 / np.sqrt(k)
    grid = np.linspace(0.0, 1.0, EPS_NODES)
    t = (np.log(k) - left)[..., None] + (left + right)[..., None] * grid
    w = np.exp(k[..., None] * t - np.exp(t) - special.gammaln(k)[..., None])
    w[..., 0] *= 0.5
    w[..., -1] *= 0.5
    w /= w.sum(axis=-1, keepdims=True)
    u, cc = np.exp(t), c[..., None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = 1.0 / (u + cc)
        forward = 1.0 - c * (w * inv).sum(axis=-1)
        backward = (1.0 - (k - 1.0) * c * (w * inv / u).sum(axis=-1)
                    + (k - 1.0) * c * c * (w * inv**3).sum(axis=-1) / (d - 2.0))
    zero_eps, no_spread = eps == 0, ~np.isfinite(c)  # a constant input: eps is all of σ̂², the output 0
    return (np.where(zero_eps, 1.0, np.where(no_spread, 0.0, forward)),
            np.where(zero_eps, 1.0, np.where(no_spread, np.inf, backward)))


def _gamma_ratio_sq(a: Stat, b: Stat) -> Stat:
    """(Γ(a)/Γ(b))², stable for large arguments."""
    return np.exp(2.0 * (special.gammaln(a) - special.gammaln(b)))


#: Below this c scipy's hyp2f1 is accurate on 0 ≤ z ≤ 1 for a = b ∈ {½, 3/2, 5/2}; above it, it returns NaN for
#: z > 0.9 (scipy 1.17), where the power series converges fast instead.
_SERIES_FROM_C = 50.0


def hyp2f1_equal(a: float, c: Stat, z: Stat) -> Stat:
    """₂F₁(a, a; c; z) for 0 ≤ z ≤ 1 and c − 2a > 0, broadcasting over ``c`` and ``z``.

    scipy for c < 50, and for c ≥ 50 the power series Σ_k (a)_k² z^k/((c)_k k!), whose terms fall like
    k^(2a−1−c) z^k, summed to a relative 1e-17 (scipy's routine returns NaN there for z > 0.9).
    """
    c, z = np.broadcast_arrays(np.asarray(c, dtype=np.float64), np.asarray(z, dtype=np.float64))
    out = np.empty(c.shape)
    small = c < _SERIES_FROM_C
    out[small] = special.hyp2f1(a, a, c[small], z[small])
    big = ~small
    if np.any(big):
        cb, zb = c[big], z[big]
        term = np.ones_like(cb)
        total = np.ones_like(cb)
        for k in range(100_000):
            term = term * (a + k) ** 2 * zb / ((cb + k) * (k + 1.0))
            total += term
            if np.all(term <= 1e-17 * total):
                break
        out[big] = total
    return out if out.ndim else float(out)


def expected_cosine(n: Stat, rho: Stat) -> Stat:
    """E[cos θ] for two Gaussian vectors in ``n`` dimensions, i.i.d. components with correlation ``rho`` (any scale).

    Olkin & Pratt (1958): E[cos θ] = ρ (2/n)(Γ((n+1)/2)/Γ(n/2))² ₂F₁(½, ½; n/2 + 1; ρ²) = ρ(1 − (1−ρ²)/(2n)) + O(n⁻²).
    cos θ is Pearson's sample correlation with n degrees of freedom. Exact; broadcasts over ``n`` and ``rho``.
    """
    n = np.asarray(n, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    return rho * (2.0 / n) * _gamma_ratio_sq((n + 1.0) / 2.0, n / 2.0) * hyp2f1_equal(0.5, n / 2.0 + 1.0, rho**2)


def expected_inv_norms(n: Stat, rho: Stat) -> tuple[Stat, Stat]:
    """E[1/(|u||v|)] and E[cos²θ/(|u||v|)] for unit-variance Gaussian u, v ∈ R^n with correlation ``rho``.

    E[1/(|u||v|)] = ½ (Γ((n−1)/2)/Γ(n/2))² ₂F₁(½, ½; n/2; ρ²);
    E[cos²θ/(|u||v|)] = (1/2n)(Γ((n−1)/2)/Γ(n/2))² [(1−z)(G + 2zG') + (n−4) z G], z = ρ²,
    G = ₂F₁(3/2, 3/2; n/2+1; z), G' = dG/dz = (9/4)/(n/2+1) ₂F₁(5/2, 5/2; n/2+2; z). Both reduce to 1/(n−2) at
    ρ = ±1. Exact (Wishart series, see the module docstring); needs n > 6.
    """
    n = np.asarray(n, dtype=np.float64)
    z = np.asarray(rho, dtype=np.float64) ** 2
    k = _gamma_ratio_sq((n - 1.0) / 2.0, n / 2.0)
    e1 = 0.5 * k * hyp2f1_equal(0.5, n / 2.0, z)
    c = n / 2.0 + 1.0
    g = hyp2f1_equal(1.5, c, z)
    gp = 2.25 / c * hyp2f1_equal(2.5, c + 1.0, z)
    e2 = k / (2.0 * n) * ((1.0 - z) * (g + 2.0 * z * gp) + (n - 4.0) * z * g)
    return e1, e2


def normalised_grad_corr(n: Stat, rho: Stat) -> Stat:
    """r_gin / r_g for a normaliser whose Jacobian is (1/σ̂)(Π − a aᵀ), a = y/√d a unit vector in an n-dimensional
    subspace Π in which the input is an isotropic Gaussian with token correlation ``rho`` (eps = 0).

    tr(M_t M_s) = n − 2 + cos²θ and tr(M²) = n − 1, so
    r_gin/r_g = E[(n − 2 + cos²θ)/(|u||v|)] / ((n − 1) E[1/|u|²])
              = (n − 2)((n − 2) E[1/(|u||v|)] + E[cos²θ/(|u||v|)])/(n − 1).
    LayerNorm uses n = d − 1; RMSNorm with a zero-mean input n = d. Exact for gradients independent of x.
    """
    n = np.asarray(n, dtype=np.float64)
    e1, e2 = expected_inv_norms(n, rho)
    return (n - 2.0) * ((n - 2.0) * e1 + e2) / (n - 1.0)


def layernorm_forward(m: Moments, d: Stat, eps: Stat = 1e-5, approx: str = "exact") -> Moments:
    """Moments after LayerNorm over ``d`` hidden units, y = (x − x̄)/√(mean((x − x̄)²) + eps) (App. A.6).

    ``approx="exact"`` (default; Gaussian input, exact at finite d and in eps for the variance):
      μ_out = 0 (Σ_i y_i = 0 exactly),
      σ²_out = E[|u|²/(|u|² + d·eps)] = 1 − d·eps/(σ²_eff (d − 3)) + O(eps²),   σ²_eff = σ²(1 − corr_hidden),
      r_out = E[cos θ] = r (2/n)(Γ((n+1)/2)/Γ(n/2))² ₂F₁(½, ½; n/2 + 1; r²),   n = d − 1
            = r(1 − (1 − r²)/(2(d−1))) + O(d⁻²)   (the paper's r(1 − 1/d) is off at O(1/d) unless r = 0),
      corr_hidden_out = −1/(d − 1) exactly (Table 19).
    σ²_out is exact in eps (an average over χ²_n: :func:`_eps_factors`); r_out neglects an eps correction of
    O(eps/(σ²_eff d)). The input mean drops out exactly.
    ``approx="kedia"``: Tables 15, 16, 18, 19 as printed: μ 0, σ² 1, r(1 − 1/d), corr_hidden −1/(d − 1).
    ``approx="kedia_table1"``: Table 1: μ 0, σ² 1, r, corr_hidden −1/(d − 1).

    Assumes: Gaussian input with the separable covariance of :mod:`sigprop.core.moments`, affine parameters at their
    initial values (γ = 1, β = 0, which Kedia et al. note do not change the derivation). Raises ``ValueError`` for
    d < 8, eps < 0, an unknown ``approx``, or corr_hidden outside [−1/(d−1), 1) (exact form).
    """
    d, eps = _CHECKS.rule(d, eps, approx)
    zero = np.zeros(np.broadcast(m.mean, m.var, m.corr, m.corr_hidden, d).shape)
    corr_hidden = clip_corr(zero - 1.0 / (d - 1.0))
    if approx == "kedia":
        return Moments(mean=zero, var=zero + 1.0, corr=clip_corr(zero + m.corr * (1.0 - 1.0 / d)),
                       corr_hidden=corr_hidden)
    if approx == "kedia_table1":
        return Moments(mean=zero, var=zero + 1.0, corr=clip_corr(zero + m.corr), corr_hidden=corr_hidden)
    _CHECKS.corr_hidden(m.corr_hidden, d)
    var_eff = m.var * (1.0 - m.corr_hidden)
    var = _eps_factors(var_eff, d, eps)[0] + zero
    corr = expected_cosine(d - 1.0, m.corr) + zero
    return Moments(mean=zero, var=var, corr=clip_corr(corr), corr_hidden=corr_hidden)


def layernorm_forward_postnorm(skip: Moments, branch: Moments, lam: Stat, beta: Stat, d: Stat,
                               eps: Stat = 1e-5) -> Moments:
    """Moments of LayerNorm(λ·x̂ + β·f) when x̂ is itself a LayerNorm output (a Post-LN residual, Kedia et al.
    App. E.2, E.4) and f is a Gaussian branch output independent of x̂.

    :func:`layernorm_forward` is exact for a Gaussian input, whose squared norm fluctuates like χ²: that
    fluctuation is what lowers E[cos θ] below r (Olkin–Pratt, −r(1 − r²)/(2n)). The skip part x̂ here has a
    fixed norm, so the sum's norm fluctuates much less and the correlation is barely lowered; applying the Gaussian
    rule at every one of a Post-LN model's 2N norms accumulates the Gaussian bias (what it did to a 192-layer
    DeepScaleLM Post-LN prediction: docs/results/whole-models.md, "Post-LN needs its own LayerNorm rules"). To first
    order in 1/n (n = d − 1), with P = λ²σ²_x̂, Q = β²σ²_f, A = P + Q, R = (P r_x̂ + Q r_f)/A and
    cos θ = (R + c)(1 + a)^{−½}(1 + b)^{−½},

        E a² = (4PQ + 2Q²)/(nA²),   E ab = (4PQ r_f r_x̂ + 2Q² r_f²)/(nA²),   E ca = (2PQ(r_f + r_x̂) + 2Q² r_f)/(nA²),
        E[cos θ] − R = (3/8)R(E a² + E b²) + R·E ab/4 − (E ca + E cb)/2 = (3/4)R·E a² + R·E ab/4 − E ca,

    which reduces to Olkin–Pratt's −R(1 − R²)/(2n) for P = 0 and to 0 for Q = 0. We keep the exact Gaussian rule
    and replace its first-order bias by this one: r_out = r_exact(R) + [E cos θ − R]_mixture + R(1 − R²)/(2n).
    The variance and hidden correlation are those of :func:`layernorm_forward` (unchanged at this order).

    Assumes: x̂ with exactly fixed squared norm and mean-zero tokens (a LayerNorm output with γ = 1, β = 0), f
    Gaussian with exchangeable hidden units, independent of x̂ (true at initialisation in expectation over the
    branch's weights).
    """
    from .residual import residual_forward

    lam = np.asarray(lam, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    total = residual_forward(skip, branch, lam, beta)
    out = layernorm_forward(total, d, eps)
    n = np.asarray(d, dtype=np.float64) - 1.0
    P = lam**2 * skip.var * (1.0 - skip.corr_hidden)
    Q = beta**2 * branch.var * (1.0 - branch.corr_hidden)
    A = P + Q
    rx, rf = skip.corr, branch.corr
    R = (P * rx + Q * rf) / A
    ea2 = (4.0 * P * Q + 2.0 * Q**2) / (n * A**2)
    eab = (4.0 * P * Q * rf * rx + 2.0 * Q**2 * rf**2) / (n * A**2)
    eca = (2.0 * P * Q * (rf + rx) + 2.0 * Q**2 * rf) / (n * A**2)
    bias_mixture = 0.75 * R * ea2 + R * eab / 4.0 - eca
    bias_gauss = -R * (1.0 - R**2) / (2.0 * n)
    # the exact Gaussian rule at R, the correlation in the centred (d − 1)-dimensional space: the skip's hidden units
    # are anticorrelated (−1/(d − 1)), so R differs from the sum's element-wise correlation at O(1/d)
    corr = expected_cosine(n, R) + bias_mixture - bias_gauss + 0.0 * out.corr
    return Moments(mean=out.mean, var=out.var, corr=clip_corr(corr), corr_hidden=out.corr_hidden)


def layernorm_backward_postnorm(g: GradMoments, skip: Moments, branch: Moments, lam: Stat, beta: Stat, d: Stat,
                                eps: Stat = 1e-5,
                                skip_fraction: Stat = 1.0) -> GradMoments:
    """Gradient moments through LayerNorm(λ·x̂ + β·f) in a Post-LN stack (x̂ a LayerNorm output, f a Gaussian
    branch output), the backward companion of :func:`layernorm_forward_postnorm`.

    :func:`layernorm_backward` assumes the output gradient independent of the input: its projection
    g ↦ (P − ŷŷᵀ/d)g/σ̂ then removes 2/d of the gradient's variance (the mean and the ŷ direction), divides by a χ²
    norm (E[1/σ̂²] with the Gaussian excess 2/n) and lowers the token correlation by F = :func:`normalised_grad_corr`.
    In a Post-LN stack the part of the gradient that reached this norm through the next residual's skip path
    (variance fraction φ = ``skip_fraction``) has already been projected by the next norm: it is mean-zero and
    orthogonal to the next direction ŷ' ∝ x̂ + (β/λ)f, so here only the fresh fraction w = Q/A of the direction
    removes anything (ŷ·g = −(β/λ)f·g, E(f·g)² ∝ w). The input's squared norm fluctuates with relative variance
    e = (4PQ + 2Q²)/(nA²) (P = λ²σ²_x̂, Q = β²σ²_f, A = P + Q, n = d − 1) instead of χ²'s. To first order in 1/d:

        σ²_gin = σ²_g [φ(1 − w/d) + (1 − φ)(1 − 2/d)] (1 + e) d/(σ²_eff (d − 1)) · (1 − d·eps/(σ²_eff(d − 5)) + …)
        (the eps factor of :func:`layernorm_backward`, exact in eps: :func:`_eps_factors`),
        r_gin  = r_g (1 − (φ w + 1 − φ)(1 − F)),

    which is the Gaussian rule's correlation at φ = 0 or w = 1. Checked on chains of Post-LN steps on real tensors
    (tests/components/test_layernorm_postnorm.py): the Gaussian rule's per-step variance error (a fraction of a
    percent at d = 256, β = 1), which compounds over a deep stack, and its correlation drift vanish (what they did
    to a 192-layer prediction: docs/results/whole-models.md, "Post-LN needs its own LayerNorm rules").

    Assumes: as :func:`layernorm_forward_postnorm`; the skip-path gradient has passed the next norm.
    """
    from .residual import residual_forward

    lam = np.asarray(lam, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    phi = check_range(skip_fraction, "skip_fraction", lo=0.0, hi=1.0)
    d = _CHECKS.width(d)
    m_in = residual_forward(skip, branch, lam, beta)
    _CHECKS.corr_hidden(m_in.corr_hidden, d)
    P = lam**2 * skip.var * (1.0 - skip.corr_hidden)
    Q = beta**2 * branch.var * (1.0 - branch.corr_hidden)
    A = P + Q
    w = Q / A
    n = d - 1.0
    e = (4.0 * P * Q + 2.0 * Q**2) / (n * A**2)
    var_eff = m_in.var * (1.0 - m_in.corr_hidden)
    kept = phi * (1.0 - w / d) + (1.0 - phi) * (1.0 - 2.0 / d)
    var = g.var * kept * (1.0 + e) * d / (var_eff * (d - 1.0)) * _eps_factors(var_eff, d, eps)[1]
    factor = normalised_grad_corr(n, m_in.corr)
    corr = g.corr * (1.0 - (phi * w + 1.0 - phi) * (1.0 - factor))
    return GradMoments(var=var, corr=clip_corr(corr))


def layernorm_backward(g: GradMoments, m_in: Moments, d: Stat, eps: Stat = 1e-5, approx: str = "exact") -> GradMoments:
    """Gradient moments through LayerNorm: g_in = (1/σ̂)(I − 11ᵀ/d − y yᵀ/d) g_out (Xu et al. 2019 Eq. 17; App. A.6).

    ``approx="exact"`` (default): with n = d − 1, σ²_eff = σ²(1 − corr_hidden) and g_out independent of x,
      σ²_gin = σ²_g (d − 2)/(σ²_eff (d − 3)) · (1 − d·eps/(σ²_eff (d − 5)) + O(eps²))
        [E|g_in|² = σ²_g E[tr(M²)/σ̂²], tr(M²) = d − 2 + (1 − f)², f = |y|²/d, E[1/χ²_n] = 1/(n−2),
        E[1/χ⁴_n] = 1/((n−2)(n−4)); the eps factor exact, an average over χ²_n: :func:`_eps_factors`],
      r_gin = r_g (n−2)((n−2) E[1/(|u||v|)] + E[cos²θ/(|u||v|)])/(n − 1)   (:func:`normalised_grad_corr`),
        exact at eps = 0; the eps corrections of numerator and denominator cancel to O(eps/(σ²_eff d)).
      At r = 1 this gives r_gin = r_g; at r = 0, r_gin = r_g (n−2)²Γ((n−1)/2)²/(2(n−1)Γ(n/2)²)·(1 + 1/(n(n−2))).
    ``approx="kedia"`` / ``"kedia_table1"``: Tables 1, 17, 20: σ²_gin = σ²_g/σ², r_gin = r_g.

    Assumes: Gaussian input (moments ``m_in``), zero-mean output gradient independent of x with i.i.d. hidden
    units. Raises ``ValueError`` as :func:`layernorm_forward`.
    """
    d, eps = _CHECKS.rule(d, eps, approx)
    zero = np.zeros(np.broadcast(g.var, g.corr, m_in.var, m_in.corr, m_in.corr_hidden, d).shape)
    if approx in ("kedia", "kedia_table1"):
        return GradMoments(var=g.var / m_in.var + zero, corr=clip_corr(g.corr + zero))
    _CHECKS.corr_hidden(m_in.corr_hidden, d)
    var_eff = m_in.var * (1.0 - m_in.corr_hidden)
    var = g.var * (d - 2.0) / (var_eff * (d - 3.0)) * _eps_factors(var_eff, d, eps)[1] + zero
    corr = g.corr * normalised_grad_corr(d - 1.0, m_in.corr) + zero
    return GradMoments(var=var, corr=clip_corr(corr))


class LayerNorm(nn.LayerNorm):
    """``torch.nn.LayerNorm`` over the last dimension that also transforms moments (:func:`layernorm_forward`,
    :func:`layernorm_backward`). ``d`` is the number of normalised elements (the product of ``normalized_shape``).

    The moment rules assume the affine parameters at their initial values (weight 1, bias 0).
    """

    rules = Rules(fixes_length=True, postnorm=True)

    def __init__(self, normalized_shape: int | list[int] | torch.Size, eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                 approx: str = "exact") -> None:
        _CHECKS.eps(eps)
        _CHECKS.approx(approx)
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias,
                         device=device, dtype=dtype)
        self.approx = approx

    @property
    def d(self) -> int:
        return int(np.prod(self.normalized_shape))

    def forward_moments(self, m: Moments) -> Moments:
        return layernorm_forward(m, self.d, self.eps, self.approx)

    def backward_moments(self, g: GradMoments, m_in: Moments) -> GradMoments:
        return layernorm_backward(g, m_in, self.d, self.eps, self.approx)

    def forward_moments_postnorm(self, skip: Moments, branch: Moments, lam: Stat, beta: Stat) -> Moments:
        """:func:`layernorm_forward_postnorm` (exact form only; other approximations use the plain rule)."""
        if self.approx != "exact":
            from .residual import residual_forward

            return self.forward_moments(residual_forward(skip, branch, lam, beta))
        return layernorm_forward_postnorm(skip, branch, lam, beta, self.d, self.eps)

    def backward_moments_postnorm(self, g: GradMoments, skip: Moments, branch: Moments, lam: Stat, beta: Stat,
                                  skip_fraction: Stat = 1.0) -> GradMoments:
        """:func:`layernorm_backward_postnorm` (exact form only; other approximations use the plain rule)."""
        from .residual import residual_forward

        if self.approx != "exact":
            return self.backward_moments(g, residual_forward(skip, branch, lam, beta))
        return layernorm_backward_postnorm(g, skip, branch, lam, beta, self.d, self.eps, skip_fraction)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 (inherited behaviour)
        return super().forward(x)
