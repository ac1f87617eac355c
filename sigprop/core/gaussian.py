"""Gaussian expectations shared by the moment rules: Gauss–Hermite quadrature and the bivariate normal CDF.

All functions work in float64 and broadcast over numpy arrays, so a rule can evaluate a whole sweep of
configurations at once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import special

__all__ = [
    "expect_1d",
    "expect_2d",
    "bvn_cdf",
    "norm_cdf",
    "norm_pdf",
]

SQRT2 = np.sqrt(2.0)
SQRT2PI = np.sqrt(2.0 * np.pi)


@lru_cache(maxsize=16)
def _hermite_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss–Hermite nodes z and weights w with Σ w f(z) ≈ E[f(Z)], Z ~ N(0, 1)."""
    z, w = special.roots_hermitenorm(n)
    return z, w / np.sqrt(2.0 * np.pi)


def expect_1d(f: Callable[[np.ndarray], np.ndarray], mean: npt.ArrayLike, var: npt.ArrayLike,
              n: int = 96) -> np.ndarray:
    """E[f(X)] for X ~ N(mean, var) by ``n``-point Gauss–Hermite quadrature (exact for polynomials of degree < 2n).

    ``mean`` and ``var`` broadcast; ``f`` must accept a float64 array and act elementwise.
    Converges geometrically for ``f`` analytic on the scale of the standard deviation. It degrades when ``f`` varies
    on a scale much smaller than σ (a saturating tanh or erf at σ ≫ 1: docs/results/accuracy.md, "Gaussian expectations
    of saturating maps") and
    for kinked ``f`` (ReLU); rules in those regimes use closed forms or adaptive quadrature instead.
    """
    z, w = _hermite_nodes(n)
    mean = np.asarray(mean, dtype=np.float64)[..., None]
    std = np.sqrt(np.asarray(var, dtype=np.float64))[..., None]
    return np.sum(w * f(mean + std * z), axis=-1)


def expect_2d(f: Callable[[np.ndarray, np.ndarray], np.ndarray], mean: npt.ArrayLike, var: npt.ArrayLike,
              corr: npt.ArrayLike, n: int = 96) -> np.ndarray:
    """E[f(X1, X2)] for (X1, X2) bivariate normal with common ``mean`` and ``var`` and correlation ``corr``.

    Uses the Cholesky factorisation X1 = μ + σ Z1, X2 = μ + σ (ρ Z1 + √(1-ρ²) Z2) and an n×n tensor Gauss–Hermite
    rule, which stays accurate as ρ → 1 for smooth integrands.
    """
    z, w = _hermite_nodes(n)
    mean = np.asarray(mean, dtype=np.float64)[..., None, None]
    std = np.sqrt(np.asarray(var, dtype=np.float64))[..., None, None]
    rho = np.asarray(corr, dtype=np.float64)[..., None, None]
    z1 = z[:, None]
    z2 = z[None, :]
    x1 = mean + std * z1
    x2 = mean + std * (rho * z1 + np.sqrt(np.clip(1.0 - rho**2, 0.0, None)) * z2)
    return np.sum(w[:, None] * w[None, :] * f(x1, x2), axis=(-2, -1))


def norm_pdf(x: npt.ArrayLike) -> np.ndarray:
    """Standard normal density φ(x)."""
    return np.exp(-0.5 * np.asarray(x, dtype=np.float64) ** 2) / SQRT2PI


def norm_cdf(x: npt.ArrayLike) -> np.ndarray:
    """Standard normal distribution function Φ(x)."""
    return special.ndtr(np.asarray(x, dtype=np.float64))


def bvn_cdf(h: npt.ArrayLike, k: npt.ArrayLike, rho: npt.ArrayLike) -> float | np.ndarray:
    """P(U ≤ h, V ≤ k) for standard bivariate normal (U, V) with correlation ``rho`` (vectorised).

    Owen (1956): Φ₂(h, k; ρ) = ½Φ(h) + ½Φ(k) − T(h, a_h) − T(k, a_k) − β, with
    a_h = (k − ρh)/(h√(1−ρ²)), a_k = (h − ρk)/(k√(1−ρ²)) and β = ½ unless hk < 0 or (hk = 0 and h + k < 0);
    T is Owen's T function. The |ρ| = 1 limits are handled explicitly.
    """
    h, k, rho = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (h, k, rho)))
    out = np.empty(h.shape, dtype=np.float64)
    one = np.abs(rho) >= 1.0 - 1e-15
    pos = one & (rho > 0)
    neg = one & (rho < 0)
    out[pos] = norm_cdf(np.minimum(h[pos], k[pos]))
    out[neg] = np.clip(norm_cdf(h[neg]) + norm_cdf(k[neg]) - 1.0, 0.0, None)
    m = ~one
    if np.any(m):
        hh, kk, rr = h[m], k[m], rho[m]
        s = np.sqrt(1.0 - rr**2)
        # Owen's T with the (h = 0 or k = 0) limits: a → ±inf, T(0, a) = atan(a)/(2π).
        with np.errstate(divide="ignore", invalid="ignore"):
            ah = np.where(hh == 0.0, np.copysign(np.inf, kk - rr * hh), (kk - rr * hh) / (hh * s))
            ak = np.where(kk == 0.0, np.copysign(np.inf, hh - rr * kk), (hh - rr * kk) / (kk * s))
        th = _owens_t(hh, ah)
        tk = _owens_t(kk, ak)
        beta = np.where((hh * kk < 0) | ((hh * kk == 0) & (hh + kk < 0)), 0.5, 0.0)
        # Both zero: Φ₂(0, 0; ρ) = 1/4 + asin(ρ)/(2π).
        both0 = (hh == 0.0) & (kk == 0.0)
        val = 0.5 * norm_cdf(hh) + 0.5 * norm_cdf(kk) - th - tk - beta
        val = np.where(both0, 0.25 + np.arcsin(rr) / (2.0 * np.pi), val)
        out[m] = val
    return out if out.ndim else float(out)


def _owens_t(h: np.ndarray, a: npt.ArrayLike) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    inf = np.isinf(a)
    res = np.empty(np.broadcast(h, a).shape, dtype=np.float64)
    h = np.broadcast_to(h, res.shape)
    a = np.broadcast_to(a, res.shape)
    inf = np.broadcast_to(inf, res.shape)
    # T(h, ±inf) = ±(1 − Φ(|h|))/2 for h ≠ 0, and ±1/4 for h = 0.
    res[inf] = np.sign(a[inf]) * 0.5 * norm_cdf(-np.abs(h[inf]))
    fin = ~inf
    res[fin] = special.owens_t(h[fin], a[fin])
    return res
