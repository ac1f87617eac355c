"""Large-depth asymptotics of the covariance and APJN recurrences (Alekseev 2026, Results 3.3–3.5, App. D).

At large block index b the branch inputs saturate: q̃ → q̃_⋆ = 1 and p̃ → p̃_⋆ = p̃(c_⋆), where c = p/q is the
inter-token cosine and (Eqs. 79–80)

    p̃(c) = (2/π) asin c   (tanh-like φ: erf, tanh, any antisymmetric φ saturating at ±1),     p̃(c) = c   (LayerNorm).

c_⋆ is the stable zero of g(c) = Δp(c) − cΔq(c) (Eqs. 78, 82), i.e. Eq. 15 / Eq. 83

    c_⋆ = [½σ_21² κ(p̃(c_⋆)) + σ_OV² p̃(c_⋆)] / [½σ_21² + σ_OV² p̃(c_⋆)],

c_⋆ = 1 for LayerNorm and a root c_⋆ < 1 for tanh-like φ with σ_21 > 0 (c = 1 is then unstable, App. D.2.3).
Then (Result 3.3, Eq. 14) Q^b ≈ b·S with S = ½σ_21² + σ_OV² p̃_⋆, and

* pre-LN (Result 3.4, Eqs. 16–17):   𝒥^{b,0} ∼ b^ζ,  𝒥^{B,b} ∼ (B/b)^ζ,  ζ = ½σ_21²/(½σ_21² + σ_OV²);
* tanh-like (Result 3.5, Eqs. 18–19): 𝒥^{b,0} ∼ e^{√(b/λ)},  𝒥^{B,b} ∼ e^{(√B − √b)/√λ},
  λ^{−1} = C_α² σ_21⁴ / S,  C_α = (1/√(2π)) ∫ φ_α'(h)² dh  (the q → ∞ coefficient of q̂ ≈ C_α/√q, Eq. 73);
  refined with the power-law prefactor of Eqs. 75–77: 𝒥^{b,0} ∼ b^{−1/(8λ)} e^{√(b/λ)},
  𝒥^{B,b} ∼ (B/b)^{−1/(8λ)} e^{(√B − √b)/√λ}.

The approach of c to c_⋆ is a power law |c − c_⋆| ∝ b^{−μ} with μ = −g'(c_⋆)/Δq(c_⋆) (Eqs. 84–87); for LayerNorm
μ = σ_OV²/(σ_OV² + ½σ_21²) = 1 − ζ.

Every function broadcasts over arrays of σ_21, σ_OV (and α); c_⋆ is found by a vectorised bisection (no loop over
grid points). Degenerate point: at σ_21 = σ_OV = 0 nothing grows; ζ and c_⋆ are NaN there and λ^{−1} = 0 (its limit).

Next order of Result 3.5 (derived here, not in the paper; checked in tests/apjn/test_asymptotics.py). Eq. 75 keeps
only the −x²/2 term of log(1 + x). A term of the same order, log b, comes from q̃ approaching 1 only as
q̃ ≈ 1 − D_α/√q with D_α = (1/√(2π)) ∫ (1 − φ_α²) dh (:func:`saturation_coefficient`; erf: 2/(π|α|)). Then
Q^b ≈ Sb − (σ_21² D_α/√S)√b, so ½σ_21² q̂ ≈ 1/(2√(bλ)) + σ_21⁴ C_α D_α/(4S² b) and

    log 𝒥^{b,0} ≈ √(b/λ) + γ log b + const,   γ = −1/(8λ) + σ_21⁴ C_α D_α/(4S²),

which at σ_OV = 0 (S = ½σ_21²) is γ = −1/(8λ) + C_α D_α, α-independent in its second part (erf: 4/π² ≈ 0.405,
tanh: 4/(3π)); the recurrence confirms it (its residual then decays like log b/√b, while Eq. 76's residual tends
to C_αD_α·log(B/b)). With attention, c approaches c_⋆ as b^{−μ} with μ ≈ ½ (Eq. 86) and is shifted by O(b^{−1/2})
by the q̃ deficit; both feed back into Q^b and add further log b and b^{1/2−μ} terms whose coefficients depend on
the initial condition. So the refined Eqs. 76–77 (``refined=True`` below, as printed) are not the complete next
order; the leading √(b/λ) growth of Eq. 18 is what the recurrence confirms in general.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import integrate

from ..core.validate import check_range
from .elementwise import resolve_norm
from .recurrence import kappa

__all__ = [
    "p_tilde_limit",
    "g_function",
    "c_star",
    "convergence_exponent",
    "q_slope",
    "zeta",
    "c_alpha",
    "lambda_inv",
    "saturation_coefficient",
    "preln_forward_asymptotic",
    "preln_backward_asymptotic",
    "stretched_forward_asymptotic",
    "stretched_backward_asymptotic",
    "PhaseMap",
    "phase_map",
]

_BISECTIONS = 64  # halvings of [0, π/2]: the bracket ends below 1e-19 in t = arccos c


def _sigmas(sigma_21, sigma_ov):
    s21 = check_range(sigma_21, "sigma_21", lo=0.0, allowed="[0, inf)")
    sov = check_range(sigma_ov, "sigma_ov", lo=0.0, allowed="[0, inf)")
    return np.broadcast_arrays(np.asarray(s21, dtype=np.float64), np.asarray(sov, dtype=np.float64))


def _kind(norm, dphi=None) -> str:
    """"layernorm" or "tanh_like" (every elementwise φ the paper's asymptotics cover)."""
    if callable(norm):
        return "tanh_like"
    return "layernorm" if resolve_norm(norm, dphi).kind == "layernorm" else "tanh_like"


def _out(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def p_tilde_limit(c, norm="erf"):
    """Large-q limit of p̃ at cosine c = p/q (Alekseev Eqs. 79–80): (2/π) asin c for a tanh-like φ (any elementwise
    ``norm``; the arcsine law of a sign function), c for LayerNorm."""
    c = np.clip(np.asarray(c, dtype=np.float64), -1.0, 1.0)
    return _out(c if _kind(norm) == "layernorm" else (2.0 / np.pi) * np.arcsin(c))


def g_function(c, *, sigma_21, sigma_ov, norm="erf"):
    """g(c) = Δp(c) − cΔq(c) (Alekseev Eqs. 78, 82): Δq = ½σ_21² + σ_OV² p̃(c), Δp = ½σ_21² κ(p̃(c)) + σ_OV² p̃(c).
    Zeros of g are the fixed points of the asymptotic cosine dynamics (Eq. 81); Eq. 15 is g(c_⋆) = 0."""
    s21, sov = _sigmas(sigma_21, sigma_ov)
    pt = np.asarray(p_tilde_limit(c, norm))
    c = np.asarray(c, dtype=np.float64)
    return _out(0.5 * s21**2 * (kappa(pt) - c) + sov**2 * pt * (1.0 - c))


def _g_over_t(t, s21sq, sovsq):
    """g(cos t)/t for the tanh-like p̃, written without cancellation: p̃ = 1 − 2t/π, 1 − c = 2 sin²(t/2).
    Its t → 0 limit is −σ_21²/π (App. D.2.3, Eq. 88 with ε = t²/2)."""
    pt = 1.0 - 2.0 * t / np.pi
    one_minus_c = 2.0 * np.sin(0.5 * t) ** 2
    # κ(p̃) − c = (κ(p̃) − 1) + (1 − c)
    g = 0.5 * s21sq * (kappa(pt) - 1.0 + one_minus_c) + sovsq * pt * one_minus_c
    return g / t


def c_star(*, sigma_21, sigma_ov, norm="erf"):
    """The stable asymptotic cosine c_⋆ of Alekseev Eq. 15 (Result 3.3; App. D.2.1).

    LayerNorm: c_⋆ = 1 (κ(c) > c makes g > 0 on [0, 1), so 1 is the only zero for p ≥ 0, the paper's setting; for
    c < 0 there is a further, unstable zero, irrelevant since p^l ≥ 0 is preserved from p^0 ≥ 0). Tanh-like φ, σ_21 > 0:
    the root in (0, 1). With t = arccos c, h(t) = g(cos t)/t is < 0 as t → 0 (−σ_21²/π, Eq. 88) and > 0 at t = π/2
    (g(0) = σ_21²/(2π)), so a vectorised bisection on t ∈ (0, π/2] brackets the stable root (the one where g falls
    through zero as c increases) to ~1e-19 in t without ever evaluating the unstable root c = 1.
    σ_21 = 0, σ_OV > 0: c_⋆ = 1 (the MLP is off; attention adds the same p̃ to q and p). σ_21 = σ_OV = 0: NaN.
    """
    s21, sov = _sigmas(sigma_21, sigma_ov)
    out = np.ones(s21.shape)
    if _kind(norm) == "tanh_like":
        s21sq, sovsq = s21**2, sov**2
        lo = np.zeros(s21.shape)
        hi = np.full(s21.shape, 0.5 * np.pi)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            neg = _g_over_t(mid, s21sq, sovsq) < 0.0
            lo = np.where(neg, mid, lo)
            hi = np.where(neg, hi, mid)
        out = np.where(s21 > 0.0, np.cos(0.5 * (lo + hi)), 1.0)
    out = np.where((s21 == 0.0) & (sov == 0.0), np.nan, out)
    return _out(out)


def q_slope(*, sigma_21, sigma_ov, norm="erf"):
    """S = ½σ_21² q̃_⋆ + σ_OV² p̃_⋆ with q̃_⋆ = 1, p̃_⋆ = p̃(c_⋆): Q^b ≈ S·b at large b (Alekseev Result 3.3, Eq.
    14)."""
    s21, sov = _sigmas(sigma_21, sigma_ov)
    cs = np.nan_to_num(np.asarray(c_star(sigma_21=s21, sigma_ov=sov, norm=norm)), nan=1.0)
    return _out(0.5 * s21**2 + sov**2 * np.asarray(p_tilde_limit(cs, norm)))


def convergence_exponent(*, sigma_21, sigma_ov, norm="erf"):
    """μ = −g'(c_⋆)/Δq(c_⋆) of |c^b − c_⋆| ∝ b^{−μ} (Alekseev Eqs. 84–87), with
    g'(c) = p̃'(c)[½σ_21² κ'(p̃(c)) + (1 − c)σ_OV²] − ½σ_21² − σ_OV² p̃(c) and κ'(ρ) = 1/2 + asin(ρ)/π.
    LayerNorm: μ = σ_OV²/(σ_OV² + ½σ_21²) (p̃' = 1, c_⋆ = 1)."""
    s21, sov = _sigmas(sigma_21, sigma_ov)
    cs = np.asarray(c_star(sigma_21=s21, sigma_ov=sov, norm=norm))
    pt = np.asarray(p_tilde_limit(cs, norm))
    if _kind(norm) == "layernorm":
        dpt = np.ones_like(cs)
    else:  # c_⋆ < 1 whenever σ_21 > 0; at c_⋆ = 1 (σ_21 = 0) p̃' is infinite and μ is not defined (NaN/inf)
        with np.errstate(divide="ignore", invalid="ignore"):
            dpt = (2.0 / np.pi) / np.sqrt(1.0 - cs**2)
    dkappa = 0.5 + np.arcsin(np.clip(pt, -1.0, 1.0)) / np.pi
    with np.errstate(invalid="ignore"):
        gp = dpt * (0.5 * s21**2 * dkappa + (1.0 - cs) * sov**2) - 0.5 * s21**2 - sov**2 * pt
        return _out(-gp / (0.5 * s21**2 + sov**2 * pt))


def zeta(*, sigma_21, sigma_ov):
    """Pre-LN critical exponent ζ = ½σ_21²/(½σ_21² + σ_OV²) (Alekseev Result 3.4, Eq. 17); 0 ≤ ζ ≤ 1, ζ = 1 without
    attention (σ_OV = 0), ζ → 0 as σ_OV/σ_21 → ∞. NaN at σ_21 = σ_OV = 0."""
    s21, sov = _sigmas(sigma_21, sigma_ov)
    num = 0.5 * s21**2
    den = num + sov**2
    with np.errstate(invalid="ignore", divide="ignore"):
        return _out(np.where(den > 0.0, num / np.where(den > 0.0, den, 1.0), np.nan))


def c_alpha(norm="erf", alpha=1.0, *, dphi: Callable | None = None):
    """C_α = (1/√(2π)) ∫ φ_α'(h)² dh (Alekseev Eq. 19, Eq. 73), the coefficient of q̂ ≈ C_α/√q at large q.

    Since ∫ α²φ'(αh)² dh = |α| ∫ φ'(u)² du, C_α = |α| C_1 with closed forms C_1 = 2/π for erf (∫ (4/π) e^{−2u²} du
    = 4/√(2π)) and C_1 = 4/(3√(2π)) for tanh (∫ sech⁴ u du = 4/3); a callable φ' (``dphi``) is integrated once by
    ``scipy.integrate.quad`` on (−∞, ∞). Raises ``ValueError`` for LayerNorm (q̂ = 1/q has no such coefficient) or
    α = 0.
    """
    nm, a = _elementwise_alpha(norm, alpha, dphi, "c_alpha")
    c1 = _unit_integral(nm, {"erf": 2.0 / np.pi, "tanh": 4.0 / (3.0 * np.sqrt(2.0 * np.pi))},
                        lambda u: float(nm.dphi(np.float64(u))) ** 2)
    return _out(np.abs(a) * c1)


def _elementwise_alpha(norm, alpha, dphi, name: str):
    """(resolved norm, α as a float64 array) for the large-q coefficients; refuses LayerNorm and α = 0."""
    nm = resolve_norm(norm, dphi)
    a = np.asarray(check_range(alpha, "alpha"), dtype=np.float64)
    if np.any(a == 0.0):
        raise ValueError("alpha must be a nonzero finite number (got 0.0)")
    if nm.kind == "layernorm":
        raise ValueError(f"{name} is defined for an elementwise norm ('erf', 'tanh' or a callable), not 'layernorm'")
    return nm, a


def _unit_integral(nm, closed: dict, integrand) -> float:
    """(1/√(2π)) ∫ integrand(u) du at α = 1: the closed form for erf / tanh, else ``scipy.integrate.quad``."""
    if nm.kind in closed:
        return closed[nm.kind]
    val, _ = integrate.quad(integrand, -np.inf, np.inf, epsabs=0.0, epsrel=1e-12, limit=400)
    return val / np.sqrt(2.0 * np.pi)


def saturation_coefficient(norm="erf", alpha=1.0, *, dphi: Callable | None = None):
    """D_α = (1/√(2π)) ∫ (1 − φ_α(h)²) dh, the coefficient of q̃ ≈ 1 − D_α/√q at large q (the analogue for q̃ of
    Eq. 73's q̂ ≈ C_α/√q; not a quantity of the paper, see the module docstring). D_α = D_1/|α| with closed forms
    D_1 = 2/π for erf (q̃ = (2/π) asin(1 − 1/(1+2α²q)) ≈ 1 − 2/(π|α|√q), Eq. 89) and D_1 = 2/√(2π) for tanh
    (∫ sech² u du = 2); a callable φ is integrated by ``scipy.integrate.quad``. Raises ``ValueError`` for LayerNorm
    (q̃ = 1 exactly) or α = 0."""
    nm, a = _elementwise_alpha(norm, alpha, dphi, "saturation_coefficient")
    d1 = _unit_integral(nm, {"erf": 2.0 / np.pi, "tanh": 2.0 / np.sqrt(2.0 * np.pi)},
                        lambda u: 1.0 - float(nm.phi(np.float64(u))) ** 2)
    return _out(d1 / np.abs(a))


def lambda_inv(*, sigma_21, sigma_ov, norm="erf", alpha=1.0, dphi: Callable | None = None):
    """Scale parameter λ^{−1} = C_α² σ_21⁴ / (½σ_21² + σ_OV² p̃_⋆) of the stretched-exponential APJN of a tanh-like
    φ_α (Alekseev Result 3.5, Eq. 19; App. D.1.2, Eq. 74). 0 at σ_21 = 0 (its limit at the origin too)."""
    s21, sov = _sigmas(sigma_21, sigma_ov)
    ca = np.asarray(c_alpha(norm, alpha, dphi=dphi))
    s = np.asarray(q_slope(sigma_21=s21, sigma_ov=sov, norm=norm))
    with np.errstate(invalid="ignore", divide="ignore"):
        return _out(np.where(s21 > 0.0, ca**2 * s21**4 / np.where(s > 0.0, s, 1.0), 0.0 * ca))


def _blocks(b, name):
    return np.asarray(check_range(b, name, lo=0.0, lo_open=True, allowed="(0, inf)"), dtype=np.float64)


def preln_forward_asymptotic(b, zeta_value):
    """𝒥^{b,0} ∼ b^ζ (Alekseev Eq. 16, Eq. 72), up to a b-independent factor set by the first blocks."""
    return _out(_blocks(b, "b") ** np.asarray(zeta_value, dtype=np.float64))


def preln_backward_asymptotic(big_b, b, zeta_value):
    """𝒥^{B,b} ∼ (B/b)^ζ (Alekseev Eq. 16). Being a ratio of forward APJNs (Eq. 48) it has no free prefactor."""
    return _out((_blocks(big_b, "B") / _blocks(b, "b")) ** np.asarray(zeta_value, dtype=np.float64))


def stretched_forward_asymptotic(b, lam_inv, refined: bool = False):
    """𝒥^{b,0} ∼ e^{√(b/λ)} (Alekseev Eq. 18), or with ``refined`` the power-law prefactor of Eq. 76:
    b^{−1/(8λ)} e^{√(b/λ)}; up to a b-independent factor."""
    b = _blocks(b, "b")
    li = np.asarray(check_range(lam_inv, "lam_inv", lo=0.0, allowed="[0, inf)"), dtype=np.float64)
    log_j = np.sqrt(b * li) - (0.125 * li * np.log(b) if refined else 0.0)
    return _out(np.exp(log_j))


def stretched_backward_asymptotic(big_b, b, lam_inv, refined: bool = False):
    """𝒥^{B,b} ∼ e^{(√B − √b)/√λ} (Alekseev Eq. 18), or with ``refined`` Eq. 77:
    (B/b)^{−1/(8λ)} e^{(√B − √b)/√λ}."""
    big_b, b = _blocks(big_b, "B"), _blocks(b, "b")
    li = np.asarray(check_range(lam_inv, "lam_inv", lo=0.0, allowed="[0, inf)"), dtype=np.float64)
    log_j = (np.sqrt(big_b) - np.sqrt(b)) * np.sqrt(li) - (0.125 * li * np.log(big_b / b) if refined else 0.0)
    return _out(np.exp(log_j))


class PhaseMap(NamedTuple):
    """Fig. 3 quantities on a (σ_21, σ_OV) grid: ``zeta`` (pre-LN exponent, Eq. 17), ``lambda_inv`` (tanh-like scale,
    Eq. 19), ``c_star`` (Eq. 15 for the tanh-like φ), ``q_slope`` (Eq. 14 for the tanh-like φ), and the grids
    ``sigma_21``, ``sigma_ov`` they were evaluated on."""

    sigma_21: np.ndarray
    sigma_ov: np.ndarray
    zeta: np.ndarray
    lambda_inv: np.ndarray
    c_star: np.ndarray
    q_slope: np.ndarray


def phase_map(*, sigma_21, sigma_ov, norm="erf", alpha=1.0, dphi: Callable | None = None) -> PhaseMap:
    """ζ (pre-LN) and λ^{−1} (tanh-like ``norm`` with scale ``alpha``) over a (σ_21, σ_OV) grid (Alekseev Fig. 3).

    1-D ``sigma_21`` (length m) and ``sigma_ov`` (length k) give an m×k grid (σ_21 along rows, ``indexing="ij"``);
    arrays of other shapes are broadcast as given. One vectorised evaluation, no loop over grid points.
    Raises ``ValueError`` for a negative σ or ``norm="layernorm"`` (λ is defined for elementwise φ only).
    """
    s21 = np.asarray(sigma_21, dtype=np.float64)
    sov = np.asarray(sigma_ov, dtype=np.float64)
    if s21.ndim == 1 and sov.ndim == 1:
        s21, sov = np.meshgrid(s21, sov, indexing="ij")
    s21, sov = _sigmas(s21, sov)
    if _kind(norm, dphi) == "layernorm":
        raise ValueError("phase_map needs an elementwise norm for lambda_inv ('erf', 'tanh' or a callable); "
                         "zeta does not depend on it")
    return PhaseMap(sigma_21=s21, sigma_ov=sov, zeta=np.asarray(zeta(sigma_21=s21, sigma_ov=sov)),
                    lambda_inv=np.asarray(lambda_inv(sigma_21=s21, sigma_ov=sov, norm=norm, alpha=alpha, dphi=dphi)),
                    c_star=np.asarray(c_star(sigma_21=s21, sigma_ov=sov, norm=norm)),
                    q_slope=np.asarray(q_slope(sigma_21=s21, sigma_ov=sov, norm=norm)))
