"""Dynamic erf (Derf): the module and its moment rules (Chen et al. 2025; Alekseev 2026, Eqs. 10, 13, 40, 89, 90).

Derf(x) = γ·erf(α x + s) + β, with a learnable scalar scale α, a learnable scalar shift s (Chen et al.) and a
per-channel affine γ (init 1), β (init 0). The moment rules are closed forms: the pre-activation h = αx + s of a
Gaussian input x ~ N(μ, σ²) is Gaussian with mean m = αμ + s and variance v = α²σ², and every Gaussian expectation
of erf and of its derivative erf'(u) = (2/√π) e^{−u²} that the rules need has an exact closed form (below), for any
m, v and correlation r. Alekseev's App. E formulas (Eqs. 89, 90) are the special case m = 0 and are exposed as
:func:`erf_q_tilde`, :func:`erf_p_tilde`, :func:`erf_q_hat`, :func:`erf_p_hat` and as ``approx="alekseev"``.

Closed forms used by the ``"exact"`` rules, for (h1, h2) bivariate normal with common mean m, variance v and
correlation r, writing k = √2 m/√(1+2v) and ρ(r) = 2rv/(1+2v):

* E[erf(h)] = erf(m/√(1+2v))                                  (erf(u) = 2Φ(√2 u) − 1 and E Φ(aX) = Φ(aμ/√(1+a²σ²)));
* E[erf(h1) erf(h2)] = 4Φ₂(k, k; ρ(r)) − 4Φ(k) + 1            (a bivariate normal orthant probability);
* Cov(erf(h1), erf(h2)) = 4[Φ₂(k, k; ρ) − Φ(k)²] = (2/π) ∫₀^{asin ρ} exp(−k²/(1 + sin θ)) dθ
  (Plackett's identity ∂Φ₂/∂ρ = φ₂; the substitution t = sin θ removes the 1/√(1−t²) singularity). This form has no
  cancellation, so it stays accurate when erf saturates (|m| ≫ √v) where E[erf²] − E[erf]² would lose every digit;
  at m = 0 it reduces to (2/π) asin ρ, which is Eq. 89;
* E[erf'(h1) erf'(h2)] = (4/π) [(1+2v)² − 4v²r²]^{−1/2} exp(−2m²/(1 + 2v(1+r)))  (a Gaussian integral of
  exp(−h1² − h2²)); r = 1 gives E[erf'(h)²] = (4/π)(1+4v)^{−1/2} exp(−2m²/(1+4v)); at m = 0 this is Eq. 90.

The backward pass through Derf multiplies the output gradient g by γ α erf'(αx + s); the gradient is taken to be
zero-mean and independent of x (the usual mean-field assumption), so σ²_gin = γ²α²σ²_g E[erf'(h)²] and
r_gin = r_g E[erf'(h1) erf'(h2)]/E[erf'(h)²] (Alekseev Eq. 13 and Eq. 40).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, overload

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import TOKEN_WISE
from .dynamic_norm import (
    APPROXES,
    assemble_backward,
    assemble_forward,
    check_nonzero,
    check_rule,
    parameter_tensor,
    rule_value,
)

__all__ = [
    "Derf",
    "derf_forward",
    "derf_backward",
    "erf_expectations",
    "erf_cov",
    "erf_q_tilde",
    "erf_p_tilde",
    "erf_q_hat",
    "erf_p_hat",
    "PhiExpectations",
    "APPROXES",
]

#: Gauss–Legendre nodes of the Plackett θ-integral; the integrand exp(−k²/(1+sin θ)) is entire in θ, and 64 nodes
#: reach float64 round-off for |k| up to ~50 (tested against scipy.integrate.quad).
_PLACKETT_NODES = 64


class PhiExpectations(NamedTuple):
    """Gaussian expectations of an elementwise map φ and its derivative, for (h1, h2) bivariate normal with a common
    mean and variance and correlation r (the inputs of the elementwise rules).

    ``phi`` = E[φ(h)], ``phi2`` = E[φ(h)²], ``phi12`` = E[φ(h1)φ(h2)], ``var`` = Var φ(h), ``cov`` = Cov(φ(h1), φ(h2)),
    ``dphi2`` = E[φ'(h)²], ``dphi12`` = E[φ'(h1)φ'(h2)]. ``var`` and ``cov`` are computed directly (not as differences
    of the raw moments) wherever the rule has a cancellation-free form.
    """

    phi: Stat
    phi2: Stat
    phi12: Stat
    var: Stat
    cov: Stat
    dphi2: Stat
    dphi12: Stat


# ----------------------------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------------------------

def _check_shift(shift: Stat, approx: str, equation: str) -> Stat:
    """The shift s, finite, and 0 under ``approx="alekseev"`` (Alekseev's ``equation`` has none)."""
    shift = check_range(shift, "shift s")
    if approx == "alekseev" and np.any(np.asarray(shift) != 0.0):
        raise ValueError(f"approx='alekseev' ({equation}) assumes shift s = 0; use approx='exact'")
    return shift


# ----------------------------------------------------------------------------------------------------------------
# closed-form Gaussian expectations of erf
# ----------------------------------------------------------------------------------------------------------------

@lru_cache(maxsize=4)
def _legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1.0), 0.5 * w  # nodes and weights on [0, 1]


def _plackett_scaled(k: Stat, rho: Stat) -> tuple[Stat, Stat]:
    """(log-scale, integral) with Φ₂(k, k; ρ) − Φ(k)² = exp(log_scale) · integral / (2π), i.e.

    ∫₀^{asin ρ} exp(−k²/(1+sin θ)) dθ = exp(log_scale) · integral, where log_scale = −k²/(1 + max(ρ, 0)) is the
    integrand's largest value on the interval, so that ``integral`` neither underflows nor overflows.
    """
    k2 = np.asarray(k, dtype=np.float64) ** 2
    rho = np.asarray(rho, dtype=np.float64)
    k2, rho = np.broadcast_arrays(k2, rho)
    theta_max = np.arcsin(np.clip(rho, -1.0, 1.0))
    log_scale = -k2 / (1.0 + np.maximum(rho, 0.0))
    u, w = _legendre(_PLACKETT_NODES)
    theta = theta_max[..., None] * u
    expo = -k2[..., None] / (1.0 + np.sin(theta)) - log_scale[..., None]
    integral = theta_max * np.sum(w * np.exp(expo), axis=-1)
    return log_scale, integral


def erf_cov(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """Cov(erf(h1), erf(h2)) for (h1, h2) bivariate normal, common ``mean`` m and ``var`` v, correlation ``corr`` r.

    Cov = (2/π) ∫₀^{asin ρ} exp(−k²/(1+sin θ)) dθ with k = √2 m/√(1+2v), ρ = 2rv/(1+2v) (Plackett's identity; see
    the module docstring). ``corr = 1`` gives Var erf(h). Exact (64-point Gauss–Legendre on a smooth integrand).
    At m = 0: (2/π) asin(2rv/(1+2v)), Alekseev Eq. 89.
    """
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    k = np.sqrt(2.0) * mean / np.sqrt(1.0 + 2.0 * var)
    rho = 2.0 * np.asarray(corr, dtype=np.float64) * var / (1.0 + 2.0 * var)
    log_scale, integral = _plackett_scaled(k, rho)
    return (2.0 / np.pi) * np.exp(log_scale) * integral


def _erf_corr_ratio(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """Cov(erf h1, erf h2)/Var(erf h), computed from the scaled integrals (no 0/0 when both underflow)."""
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    k = np.sqrt(2.0) * mean / np.sqrt(1.0 + 2.0 * var)
    rho_r = 2.0 * np.asarray(corr, dtype=np.float64) * var / (1.0 + 2.0 * var)
    rho_1 = 2.0 * var / (1.0 + 2.0 * var)
    ls_r, i_r = _plackett_scaled(k, rho_r)
    ls_1, i_1 = _plackett_scaled(k, rho_1)
    return np.exp(ls_r - ls_1) * i_r / i_1


def _erf_dd_log(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """log E[erf'(h1) erf'(h2)] (closed Gaussian integral; see the module docstring)."""
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    r = np.asarray(corr, dtype=np.float64)
    det = (1.0 + 2.0 * var) ** 2 - 4.0 * var**2 * r**2  # = (1 + 2v(1+r)) (1 + 2v(1−r)) > 0
    return np.log(4.0 / np.pi) - 0.5 * np.log(det) - 2.0 * mean**2 / (1.0 + 2.0 * var * (1.0 + r))


def erf_expectations(mean: Stat, var: Stat, corr: Stat) -> PhiExpectations:
    """Exact Gaussian expectations of φ = erf for h ~ N(m, v) and (h1, h2) with correlation r (closed forms).

    E[erf h] = erf(m/√(1+2v)); Cov(erf h1, erf h2) by :func:`erf_cov`; E[erf h1 erf h2] = Cov + E[erf h]²;
    E[erf'(h1)erf'(h2)] = (4/π)[(1+2v)² − 4v²r²]^{−1/2} exp(−2m²/(1+2v(1+r))), and the r = 1 values for the squares.
    Assumes: Gaussian h. Alekseev App. E (Eqs. 89, 90) generalised to m ≠ 0; see the module docstring.
    """
    mean = np.asarray(mean, dtype=np.float64)
    var = np.asarray(var, dtype=np.float64)
    phi = special.erf(mean / np.sqrt(1.0 + 2.0 * var))
    v1 = erf_cov(mean, var, 1.0)
    c = erf_cov(mean, var, corr)
    return PhiExpectations(phi=phi, phi2=v1 + phi**2, phi12=c + phi**2, var=v1, cov=c,
                           dphi2=np.exp(_erf_dd_log(mean, var, 1.0)),
                           dphi12=np.exp(_erf_dd_log(mean, var, corr)))


# ----------------------------------------------------------------------------------------------------------------
# Alekseev App. E, Eqs. 89 and 90 (zero-mean pre-activation, φ_α(h) = erf(α h), h ~ N(0, q), Cov(h1, h2) = p)
# ----------------------------------------------------------------------------------------------------------------

@overload
def _check_qp(q: Stat, p: None = None) -> tuple[Stat, None]: ...


@overload
def _check_qp(q: Stat, p: Stat) -> tuple[Stat, Stat]: ...


def _check_qp(q: Stat, p: Stat | None = None) -> tuple[Stat, Stat | None]:
    q = check_range(q, "q", lo=0.0, lo_open=True, allowed="(0, inf)")
    if p is None:
        return q, None
    p = check_range(p, "p")
    if np.any(np.abs(p) > q * (1.0 + 1e-12)):
        raise ValueError("p must satisfy |p| <= q (p is a covariance, q the variance)")
    return q, p


def erf_q_tilde(q: Stat, alpha: Stat) -> Stat:
    """q̃ = E[erf(αh)²], h ~ N(0, q): (2/π) asin(2α²q/(1+2α²q)). Alekseev App. E, Eq. 89."""
    q, _ = _check_qp(q)
    a2 = check_nonzero(alpha, "alpha") ** 2
    return (2.0 / np.pi) * np.arcsin(2.0 * a2 * q / (1.0 + 2.0 * a2 * q))


def erf_p_tilde(p: Stat, q: Stat, alpha: Stat) -> Stat:
    """p̃ = E[erf(αh1) erf(αh2)], Var h = q, Cov(h1, h2) = p, zero mean: (2/π) asin(2α²p/(1+2α²q)).
    Alekseev App. E, Eq. 89."""
    q, p = _check_qp(q, p)
    a2 = check_nonzero(alpha, "alpha") ** 2
    return (2.0 / np.pi) * np.arcsin(2.0 * a2 * p / (1.0 + 2.0 * a2 * q))


def erf_q_hat(q: Stat, alpha: Stat) -> Stat:
    """q̂ = E[φ_α'(h)²] with φ_α = erf(α·), h ~ N(0, q): 4α²/(π√(1+4α²q)). Alekseev App. E, Eq. 90 (Eq. 13)."""
    q, _ = _check_qp(q)
    a2 = check_nonzero(alpha, "alpha") ** 2
    return 4.0 * a2 / (np.pi * np.sqrt(1.0 + 4.0 * a2 * q))


def erf_p_hat(p: Stat, q: Stat, alpha: Stat) -> Stat:
    """p̂ = E[φ_α'(h1) φ_α'(h2)], zero mean, Var h = q, Cov = p: 4α²/(π√((1+2α²q)² − 4α⁴p²)).
    Alekseev App. E, Eq. 90 (Eq. 40)."""
    q, p = _check_qp(q, p)
    a2 = check_nonzero(alpha, "alpha") ** 2
    return 4.0 * a2 / (np.pi * np.sqrt((1.0 + 2.0 * a2 * q) ** 2 - 4.0 * a2**2 * p**2))


# ----------------------------------------------------------------------------------------------------------------
# the rules
# ----------------------------------------------------------------------------------------------------------------

def derf_forward(m: Moments, alpha: Stat, shift: Stat = 0.0, gamma: Stat = 1.0, beta: Stat = 0.0,
                 approx: str = "exact") -> Moments:
    """Moments of y = γ·erf(α x + s) + β for Gaussian x (Chen et al. 2025; Alekseev Eq. 10 and App. E Eq. 89).

    ``approx="exact"`` (default): with m = αμ + s, v = α²σ², k = √2 m/√(1+2v) and ρ(r) = 2rv/(1+2v),

        μ_y  = γ erf(m/√(1+2v)) + β,
        σ²_y = γ² (2/π) ∫₀^{asin ρ(1)} exp(−k²/(1+sin θ)) dθ,
        r_y  = ∫₀^{asin ρ(r)} … dθ / ∫₀^{asin ρ(1)} … dθ     (and r^d_y likewise with r^d in place of r).

    Exact for any μ, s (no zero-mean assumption) and free of cancellation when erf saturates.

    ``approx="alekseev"``: Alekseev's Eq. 89 evaluated on q = σ² + μ², p = rσ² + μ² (his recurrences' convention):
    μ_y = β, σ²_y = γ² q̃, r_y = p̃/q̃. It assumes a zero-mean input and s = 0; it equals "exact" when μ = 0 and
    raises ``ValueError`` if s ≠ 0.

    Assumes: Gaussian input, elements sharing one mean; γ, β, α, s scalars (or per-configuration arrays that
    broadcast with the fields of ``m``). Raises ``ValueError`` for α = 0, γ = 0, non-finite values or an unknown
    ``approx``.
    """
    alpha, gamma = check_rule(approx, alpha, gamma)
    beta = check_range(beta, "beta")
    shift = _check_shift(shift, approx, "Eq. 89")
    if approx == "alekseev":
        q = m.second_moment
        qt = erf_q_tilde(q, alpha)
        mean = 0.0 * q
        return assemble_forward(mean, qt, erf_p_tilde(m.token_second_moment, q, alpha) / qt,
                                erf_p_tilde(m.corr_hidden * m.var + m.mean**2, q, alpha) / qt, gamma, beta)
    mh = alpha * m.mean + shift
    vh = alpha**2 * m.var
    mean_phi = special.erf(mh / np.sqrt(1.0 + 2.0 * vh))
    var_phi = erf_cov(mh, vh, 1.0)
    return assemble_forward(mean_phi, var_phi, _erf_corr_ratio(mh, vh, m.corr),
                            _erf_corr_ratio(mh, vh, m.corr_hidden), gamma, beta)


def derf_backward(g: GradMoments, m_in: Moments, alpha: Stat, shift: Stat = 0.0, gamma: Stat = 1.0,
                  approx: str = "exact") -> GradMoments:
    """Gradient moments through y = γ·erf(αx + s) + β: g_in = γ α erf'(αx + s) g (Alekseev Eqs. 13, 40, 90).

    ``approx="exact"``: with m = αμ + s, v = α²σ² of the input ``m_in``,

        σ²_gin = γ² α² σ²_g (4/π) (1+4v)^{−1/2} exp(−2m²/(1+4v)),
        r_gin  = r_g √((1+4v)/((1+2v)² − 4v²r²)) exp(2m²/(1+4v) − 2m²/(1+2v(1+r))).

    ``approx="alekseev"``: Eq. 90 on q = σ² + μ², p = rσ² + μ²: σ²_gin = γ²σ²_g q̂, r_gin = r_g p̂/q̂ (assumes μ = 0 and
    s = 0; raises ``ValueError`` if s ≠ 0).

    Assumes: Gaussian input; output gradient zero-mean and independent of the input (mean-field). β does not
    enter. Raises ``ValueError`` for α = 0, γ = 0 or an unknown ``approx``.
    """
    alpha, gamma = check_rule(approx, alpha, gamma)
    shift = _check_shift(shift, approx, "Eq. 90")
    if approx == "alekseev":
        q = m_in.second_moment
        qh = erf_q_hat(q, alpha)
        return GradMoments(var=gamma**2 * g.var * qh,
                           corr=clip_corr(g.corr * erf_p_hat(m_in.token_second_moment, q, alpha) / qh))
    mh = alpha * m_in.mean + shift
    vh = alpha**2 * m_in.var
    l1 = _erf_dd_log(mh, vh, 1.0)
    lr = _erf_dd_log(mh, vh, m_in.corr)
    return assemble_backward(g, np.exp(l1), np.exp(lr - l1), alpha, gamma)


# ----------------------------------------------------------------------------------------------------------------
# the module
# ----------------------------------------------------------------------------------------------------------------

class Derf(nn.Module):
    """Dynamic erf, Derf(x) = γ·erf(αx + s) + β (Chen et al. 2025), with its moment rules.

    ``alpha`` (initial α, default 0.5, the DyT default of Zhu et al. 2025) and ``shift`` (initial s, default 0) are
    learnable scalars; ``gamma`` and ``beta`` are per-channel (shape (hidden,), init 1 and 0) when ``hidden`` is given,
    scalars otherwise. Any of them may instead be given as a tensor that broadcasts against the input, e.g. shape
    (C, 1, 1, 1, 1) for a sweep whose input has a leading configuration dimension C, so that every configuration has
    its own values. ``forward_moments`` / ``backward_moments`` read the current values (channels must share one value;
    per-configuration values become arrays of shape (C,)).
    """

    rules = TOKEN_WISE

    def __init__(self, hidden: int | None = None, alpha: float | np.ndarray | torch.Tensor = 0.5,
                 shift: float | np.ndarray | torch.Tensor = 0.0,
                 gamma: float | np.ndarray | torch.Tensor | None = None,
                 beta: float | np.ndarray | torch.Tensor | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        shape = (hidden,) if hidden is not None else ()
        self.alpha = nn.Parameter(parameter_tensor(alpha, (), 0.5).to(dtype or torch.get_default_dtype()))
        self.shift = nn.Parameter(parameter_tensor(shift, (), 0.0).to(dtype or torch.get_default_dtype()))
        self.gamma = nn.Parameter(parameter_tensor(gamma, shape, 1.0).to(dtype or torch.get_default_dtype()))
        self.beta = nn.Parameter(parameter_tensor(beta, shape, 0.0).to(dtype or torch.get_default_dtype()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # γ·erf(αx + s) + β with fused multiply-adds (two passes instead of four)
        return torch.addcmul(self.beta, self.gamma, torch.erf(torch.addcmul(self.shift, self.alpha, x)))

    def _values(self) -> tuple[Stat, Stat, Stat, Stat]:
        return (rule_value(self.alpha, "alpha"), rule_value(self.shift, "shift"),
                rule_value(self.gamma, "gamma"), rule_value(self.beta, "beta"))

    def forward_moments(self, m: Moments, approx: str = "exact") -> Moments:
        a, s, gm, bt = self._values()
        return derf_forward(m, a, s, gm, bt, approx=approx)

    def backward_moments(self, g: GradMoments, m_in: Moments | None = None, approx: str = "exact") -> GradMoments:
        if m_in is None:
            raise ValueError("Derf.backward_moments needs m_in, the moments of the input")
        a, s, gm, _ = self._values()
        return derf_backward(g, m_in, a, s, gm, approx=approx)

    def extra_repr(self) -> str:
        return f"alpha shape={tuple(self.alpha.shape)}, gamma shape={tuple(self.gamma.shape)}"
