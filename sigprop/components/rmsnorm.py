"""RMSNorm: the module and its moment rules, exact at finite width by product Gaussian quadrature.

RMSNorm (Zhang & Sennrich 2019) rescales without centring, y = x/√(mean(x²) + eps) (times an affine weight, 1 at
initialisation). Kedia et al. do not treat it; the set-up follows their LayerNorm analysis (App. A.6) and, unlike
there, the input mean μ does *not* drop out.

Set-up. One token's input x ∈ R^d is Gaussian with the separable covariance of :mod:`sigprop.core.moments` (variance
σ², hidden correlation c, token correlation r, common mean μ). Split x along e = 1/√d and its orthogonal complement:
w = e·x ~ N(√d μ, σ²(1 + (d−1)c)) and u = Px (P = I − eeᵀ), an isotropic Gaussian in n = d − 1 dimensions with
per-direction variance σ²(1 − c), independent of w. Then |x|² = w² + |u|², Σ_i x_i = √d w and, with
D = |x|² + d·eps (so that the RMS is √(D/d)):

    mean      μ_out = E[w/√D],                    E[y²] = E[|x|²/D],                σ²_out = E[y²] − μ_out²,
    token     E[y_t y_s] = E[(w_t w_s + u_t·u_s)/√(D_t D_s)],    r_out = (E[y_t y_s] − μ_out²)/σ²_out,
    hidden    E[y_i y_j] = (d E[w²/D] − E[|x|²/D])/(d − 1),       corr_hidden_out = (E[y_i y_j] − μ_out²)/σ²_out,
    backward  J = (1/rms)(I − y yᵀ/d), q = |x|²/D:
              σ²_gin = σ²_g E[tr(M²)/rms²]/d = σ²_g E[(d − 2q + q²)/D],
              r_gin  = r_g E[(d − q_t − q_s + P²/(D_t D_s))/√(D_t D_s)] / E[(d − 2q + q²)/D],   P = w_t w_s + u_t·u_s,

for a zero-mean output gradient independent of x with i.i.d. hidden units (tr M² = d − 2q + q², tr M_t M_s =
d − q_t − q_s + (y_t·y_s)²/d²). These are exact, eps included. They are evaluated by product quadrature: (w_t, w_s)
by bivariate Gauss–Hermite, and u_s = r u_t + √(1−r²) z, so that with a = |u_t|² ~ χ²_n, z₁ = z·u_t/|u_t| ~ N(0, 1)
and q' = |z|² − z₁² ~ χ²_{n−1} (all independent) u_t·u_s and |u_s|² are functions of (a, z₁, q'); a and q' use
generalised Gauss–Laguerre rules (exact for polynomials times the χ² density), z₁ Gauss–Hermite. The integrands are
analytic near the mass of these distributions, which is concentrated on relative scale 1/√d, so few nodes give
relative accuracy ≲ 1e-7 for d ≥ 64 and small corr_hidden (measured against closed forms and higher orders in the
tests; see :func:`quadrature_orders` for how a large positive corr_hidden degrades it).

Closed forms for special cases (used by the tests): with c = 0 and eps = 0, μ_out = (δ/√2)Γ((d+1)/2)/Γ(d/2+1)
₁F₁(½; d/2+1; −δ²/2) with δ = √d μ/σ (the mean of the projected normal) and E[1/|x|²] = ₁F₁(1; d/2; −δ²/2)/(σ²(d−2));
with μ = 0 the token and gradient correlations are LayerNorm's with n = d (:mod:`sigprop.components.layernorm`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import NormChecks, clip_corr
from ..walk.protocol import Rules
from .layernorm import expected_cosine, normalised_grad_corr

__all__ = ["RMSNorm", "rmsnorm_forward", "rmsnorm_backward", "rmsnorm_expectations", "RMSNORM_APPROX",
           "DEFAULT_EPS", "TABLE_ABOVE"]

#: The approximations the RMSNorm rules offer (see :func:`rmsnorm_forward`).
RMSNORM_APPROX = ("exact", "large_d")

#: torch.nn.RMSNorm's default eps (eps=None) for float32 tensors: torch.finfo(torch.float32).eps.
DEFAULT_EPS = float(torch.finfo(torch.float32).eps)

#: Smallest width accepted: below it the product quadrature converges too slowly (its error is ~1e-4 at d = 16).
MIN_WIDTH = 16

_CHUNK_POINTS = 2_000_000  # quadrature points evaluated per numpy batch (bounds memory to ~100 MB)


_CHECKS = NormChecks("rmsnorm", "an RMSNorm", MIN_WIDTH, RMSNORM_APPROX)


@lru_cache(maxsize=64)
def _hermite(k: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = special.roots_hermitenorm(k)
    return z, w / w.sum()


def gamma_nodes(shape: Stat, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x and weights w (summing to 1) with Σ w f(x) ≈ E[f(X)], X ~ Gamma(shape, 1), for an array of shapes.

    Generalised Gauss–Laguerre by Golub–Welsch on the Jacobi matrix (diagonal 2i + α + 1, off-diagonal √(i(i+α)),
    α = shape − 1), with the weights normalised from the eigenvectors so that no Γ(shape) is ever formed (it
    overflows for shape > 171). Exact for polynomials of degree < 2k. Returns arrays of shape (*shape.shape, k).
    """
    shape = np.asarray(shape, dtype=np.float64)
    uniq, inv = np.unique(shape.reshape(-1), return_inverse=True)
    alpha = uniq - 1.0
    i = np.arange(k)
    jac = np.zeros((len(uniq), k, k))
    jac[:, i, i] = 2.0 * i + alpha[:, None] + 1.0
    off = np.sqrt(i[1:] * (i[1:] + alpha[:, None]))
    jac[:, i[1:], i[1:] - 1] = off
    jac[:, i[1:] - 1, i[1:]] = off
    x, v = np.linalg.eigh(jac)
    w = v[:, 0, :] ** 2
    w /= w.sum(axis=-1, keepdims=True)
    return x[inv].reshape(shape.shape + (k,)), w[inv].reshape(shape.shape + (k,))


def quadrature_orders(d: Stat, corr_hidden: Stat) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Quadrature orders (w, a) and (w, a, z₁, q') for a batch of widths and hidden correlations.

    The integrands are analytic in w with singularities at w = ±i|u| (where |x|² = w² + |u|² vanishes), i.e. at a
    distance ρ = √(n(1 − c)/(1 + (d − 1)c)) standard deviations of w from the real axis (ρ² ≈ d for c = 0, ≈ 1 at
    c = ½); Gauss–Hermite needs O(1/ρ²) nodes in w. Measured (tests): relative error ≲ 1e-6 for ρ² ≥ 3
    (c ≲ 0.2), ≲ 1e-4 for ρ² ≥ 1 (c ≲ ½) and ~1e-2 at c = 0.9 (ρ² ≈ 0.1), where the rule is not reliable.
    """
    d = np.asarray(d, dtype=np.float64)
    c = np.asarray(corr_hidden, dtype=np.float64)
    rho2 = float(np.min((d - 1.0) * (1.0 - c) / np.maximum(1.0 + (d - 1.0) * c, 1e-300)))
    small = float(np.min(d)) < 64
    kw = int(np.clip(np.ceil(10.0 + 24.0 / max(rho2, 1e-12)), 16 if small else 10, 64))
    inner = 10 if small else 6
    return (min(128, max(24, 2 * kw)), 32 if small else 16), (kw, inner, inner, inner)


def rmsnorm_expectations(mean: Stat, var: Stat, corr: Stat, corr_hidden: Stat, d: Stat, eps: Stat, pair: bool = True,
                         nodes_single: tuple[int, int] | None = None,
                         nodes_pair: tuple[int, int, int, int] | None = None) -> dict[str, np.ndarray]:
    """The Gaussian expectations behind the RMSNorm rules, in units of σ² (see the module docstring).

    Returns arrays (broadcast shape of the inputs) ``m`` = E[w/√D], ``ey2`` = E[|x|²/D], ``ew2`` = E[w²/D],
    ``gv`` = σ² E[(d − 2q + q²)/D] and, if ``pair``, ``eyy`` = E[(w_t w_s + u_t·u_s)/√(D_t D_s)] and
    ``gc`` = σ² E[(d − q_t − q_s + P²/(D_t D_s))/√(D_t D_s)]. Product Gauss–Hermite × generalised Gauss–Laguerre
    with the orders of :func:`quadrature_orders` unless ``nodes_single`` / ``nodes_pair`` are given.
    """
    arrs = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (mean, var, corr, corr_hidden, d, eps)))
    shape = arrs[0].shape
    rows = np.stack([a.reshape(-1) for a in arrs], axis=1)
    auto_single, auto_pair = quadrature_orders(rows[:, 4], rows[:, 3])
    # each configuration once (a token-resolved state repeats many: a pair and its mirror, equal tokens), and the
    # same configurations once (a walk's backward step asks for its forward step's): each configuration's sums do
    # not depend on which others share its batch, so both leave every number as it was
    bits = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).reshape(-1)
    _, first, back = np.unique(bits, return_index=True, return_inverse=True)
    out = _unique_expectations(rows[first].tobytes(), pair, tuple(nodes_single or auto_single),
                               tuple(nodes_pair or auto_pair))
    return {k: v[back.reshape(-1)].reshape(shape) for k, v in out.items()}


@lru_cache(maxsize=8)
def _unique_expectations(rows: bytes, pair: bool, nodes_single: tuple[int, int],
                         nodes_pair: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
    """:func:`rmsnorm_expectations` of the configurations ``rows`` (the float64 bytes of (mean, var, corr,
    corr_hidden, d, eps) rows), by the quadrature of the given orders; cached, so the arrays returned are never
    handed out (the caller indexes them)."""
    mean, var, corr, c, d, eps = np.frombuffer(rows, dtype=np.float64).reshape(-1, 6).T
    n = d - 1.0
    wbar = np.sqrt(d) * mean / np.sqrt(var)  # E[w]/σ
    sw = np.sqrt(1.0 + (d - 1.0) * c)  # std of w / σ
    su2 = 1.0 - c  # per-direction variance of u / σ²
    de = d * eps / var  # d·eps / σ²
    out = {}

    # Single token: w (Gauss–Hermite) × a = |u|²/(σ²(1−c)) = 2·Gamma(n/2).
    kw, ka = nodes_single
    zw, ww = _hermite(kw)
    xa, wa = gamma_nodes(n / 2.0, ka)
    w_ = wbar[:, None, None] + sw[:, None, None] * zw[None, :, None]
    a_ = 2.0 * su2[:, None, None] * xa[:, None, :]
    weight = ww[None, :, None] * wa[:, None, :]
    x2 = w_**2 + a_
    big_d = x2 + de[:, None, None]
    q = x2 / big_d
    dd = d[:, None, None]
    out["m"] = np.sum(weight * w_ / np.sqrt(big_d), axis=(1, 2))
    out["ey2"] = np.sum(weight * q, axis=(1, 2))
    out["ew2"] = np.sum(weight * w_**2 / big_d, axis=(1, 2))
    out["gv"] = np.sum(weight * (dd - 2.0 * q + q * q) / big_d, axis=(1, 2))

    if pair:
        kw, ka, kz, kq = nodes_pair
        zw, ww = _hermite(kw)
        zz, wz = _hermite(kz)
        xa, wa = gamma_nodes(n / 2.0, ka)
        xq, wq = gamma_nodes((n - 1.0) / 2.0, kq)
        per_config = kw * kw * ka * kz * kq
        chunk = max(1, _CHUNK_POINTS // per_config)
        eyy = np.empty(len(d))
        gc = np.empty(len(d))
        for s in range(0, len(d), chunk):
            sl = slice(s, s + chunk)

            def col(v: np.ndarray, sl: slice = sl) -> np.ndarray:
                return v[sl].reshape(-1, 1, 1, 1, 1, 1)

            r = col(corr)
            rc = np.sqrt(np.clip(1.0 - r**2, 0.0, None))
            z1 = zw.reshape(1, -1, 1, 1, 1, 1)
            z2 = zw.reshape(1, 1, -1, 1, 1, 1)
            wt = col(wbar) + col(sw) * z1
            ws = col(wbar) + col(sw) * (r * z1 + rc * z2)
            a = 2.0 * xa[sl].reshape(-1, 1, 1, ka, 1, 1)
            zr = zz.reshape(1, 1, 1, 1, kz, 1)
            qq = 2.0 * xq[sl].reshape(-1, 1, 1, 1, 1, kq)
            sa = np.sqrt(a)
            s2 = col(su2)
            at = s2 * a
            cross = s2 * (r * a + rc * sa * zr)
            bs = s2 * (r**2 * a + 2.0 * r * rc * sa * zr + (1.0 - r**2) * (zr**2 + qq))
            dt = wt**2 + at + col(de)
            ds = ws**2 + bs + col(de)
            p = wt * ws + cross
            inv = 1.0 / np.sqrt(dt * ds)
            weight = (ww.reshape(1, -1, 1, 1, 1, 1) * ww.reshape(1, 1, -1, 1, 1, 1)
                      * wa[sl].reshape(-1, 1, 1, ka, 1, 1) * wz.reshape(1, 1, 1, 1, kz, 1)
                      * wq[sl].reshape(-1, 1, 1, 1, 1, kq))
            axes = (1, 2, 3, 4, 5)
            eyy[sl] = np.sum(weight * p * inv, axis=axes)
            qt = (wt**2 + at) / dt
            qs = (ws**2 + bs) / ds
            gc[sl] = np.sum(weight * (col(d) - qt - qs + (p * inv) ** 2) * inv, axis=axes)
        out["eyy"] = eyy
        out["gc"] = gc
    return out


#: The centred closed form (:func:`_centred`) is used where d·eps/(σ²(d − 2)), its first-order eps term, is below
#: this: its series in eps, kept to second order, then leaves out ≲ 1e-6 relative (a Llama block at d = 256 with
#: eps = 1e-6 and std-0.02 embeddings has 2.5e-3 at the first norm).
CENTRED_EPS_TERM = 1e-2


def _inverse_norm_series(d: Stat, t: Stat, power: int, terms: int = 3) -> Stat:
    """E[(1 + t·d/χ²_d)^{-1} (d/χ²_d)^power]-style series: Σ_k (−t)^k d^(k+power) E[1/(χ²_d)^(k+power)], k < terms,
    with E[1/(χ²_d)^m] = 1/((d − 2)(d − 4)…(d − 2m)); t = eps/σ². ``power`` 0 gives E[|x|²/D], 1 gives σ² d E[1/D]
    (D = |x|² + d·eps, |x|² = σ²χ²_d)."""
    d = np.asarray(d, dtype=np.float64)
    out: Stat = 0.0
    for k in range(terms):
        m = k + power
        inv: Stat = 1.0
        for j in range(1, m + 1):
            inv = inv / (d - 2.0 * j)
        out = out + (-t) ** k * d ** m * inv
    return out


def _centred(mean: Stat, var: Stat, corr_hidden: Stat, d: Stat, eps: Stat) -> bool:
    """Whether every configuration has a zero-mean input with independent hidden units and a small eps term: the
    token-resolved state's inputs (a Gram matrix per sequence), which reach RMSNorm pair by pair, thousands at a
    time, where the product quadrature would take minutes."""
    return bool(np.all(np.asarray(mean) == 0.0) and np.all(np.asarray(corr_hidden) == 0.0)
                and np.all(np.asarray(d, dtype=np.float64) * eps / (np.asarray(var) * (np.asarray(d) - 2.0))
                           <= CENTRED_EPS_TERM))


#: Configurations from which zero-mean, hidden-independent input whose eps term exceeds :data:`CENTRED_EPS_TERM`
#: (the first norms of a model with small embeddings and a large eps) takes :func:`_centred_table` instead of the
#: product quadrature per configuration: a token-resolved state's pairs are thousands, each distinct.
TABLE_ABOVE = 256

_TABLE_CORR = np.linspace(-1.0, 1.0, 81)


def _tabulated(mean: Stat, corr_hidden: Stat, d: Stat, eps: Stat, size: int) -> bool:
    """Whether the many-configuration table applies: zero mean, independent hidden units, one width and one eps, more
    than :data:`TABLE_ABOVE` configurations."""
    return bool(size > TABLE_ABOVE and np.size(d) == 1 and np.size(eps) == 1 and np.all(np.asarray(mean) == 0.0)
                and np.all(np.asarray(corr_hidden) == 0.0))


def _centred_table(var: Stat, corr: Stat, d: float, eps: float) -> tuple[np.ndarray, ...]:
    """(E[|x|²/D], output correlation, E[(d − 2q + q²)/D]·σ², gradient-correlation factor) for zero-mean input with
    independent hidden units at many (σ², r): the quadrature of :func:`rmsnorm_expectations` on a grid, interpolated.

    The expectations depend on σ² only through t = eps/σ². The single-token ones (variance, gradient variance) are
    taken at 33 geometric nodes of t between the smallest and largest t (more where the range is wide: at most 0.05
    apart in log t) and interpolated by a cubic spline in log t;
    the correlations' departures from their eps-free closed forms (:func:`~sigprop.components.layernorm.
    expected_cosine`, :func:`~sigprop.components.layernorm.normalised_grad_corr`), which are O(t/d) and smooth, per
    unit t (nearly constant in t) on 81 correlations × 17 geometric nodes of t (at most 0.1 apart in log t),
    bilinearly in (r, t). Its error
    against the quadrature per configuration:
    ``tests/components/test_rmsnorm.py``."""
    from scipy.interpolate import CubicSpline

    var, corr = np.broadcast_arrays(np.asarray(var, dtype=np.float64), np.asarray(corr, dtype=np.float64))
    log_t = np.log(eps / var)
    lo, hi = float(log_t.min()), float(log_t.max())
    wide = hi > lo + 1e-12

    def along_t(nodes: int, step: float) -> np.ndarray:  # at least ``nodes``, at most ``step`` apart in log t
        return np.linspace(lo, hi, max(nodes, int(np.ceil((hi - lo) / step)) + 1)) if wide else np.array([lo])

    fine = along_t(33, 0.05)
    single = rmsnorm_expectations(0.0, 1.0, 0.0, 0.0, d, np.exp(fine), pair=False)
    at = (lambda v: CubicSpline(fine, v)(log_t)) if wide else (lambda v: np.full(log_t.shape, v[0]))  # noqa: E731
    ey2, gv = at(single["ey2"]), at(single["gv"])
    coarse = along_t(17, 0.1)
    pair = rmsnorm_expectations(0.0, 1.0, _TABLE_CORR[:, None], 0.0, d, np.exp(coarse)[None, :])
    t_nodes = np.exp(coarse)[None, :]  # the departures per unit t, nearly constant in t
    cosine = np.asarray(expected_cosine(d, _TABLE_CORR))[:, None]
    grad_factor = np.asarray(normalised_grad_corr(d, _TABLE_CORR))[:, None]
    d_corr = (pair["eyy"] / pair["ey2"] - cosine) / t_nodes
    d_grad = (pair["gc"] / pair["gv"] - grad_factor) / t_nodes
    rpos = np.interp(np.clip(corr, -1.0, 1.0), _TABLE_CORR, np.arange(_TABLE_CORR.size))
    tpos = np.interp(np.exp(log_t), np.exp(coarse), np.arange(coarse.size)) if wide else np.zeros(log_t.shape)

    def bilinear(table: np.ndarray) -> np.ndarray:
        i = np.clip(np.floor(rpos).astype(int), 0, table.shape[0] - 2)
        j = np.clip(np.floor(tpos).astype(int), 0, max(table.shape[1] - 2, 0))
        a, b = rpos - i, tpos - j
        j1 = np.minimum(j + 1, table.shape[1] - 1)
        return ((1 - a) * (1 - b) * table[i, j] + a * (1 - b) * table[i + 1, j] + (1 - a) * b * table[i, j1]
                + a * b * table[i + 1, j1])

    t = np.exp(log_t)
    return (ey2, expected_cosine(d, corr) + t * bilinear(d_corr), gv,
            normalised_grad_corr(d, corr) + t * bilinear(d_grad))


def rmsnorm_forward(m: Moments, d: Stat, eps: Stat = DEFAULT_EPS, approx: str = "exact") -> Moments:
    """Moments after RMSNorm over ``d`` hidden units, y = x/√(mean(x²) + eps).

    ``approx="exact"`` (default): the expectations of the module docstring by product quadrature, exact for a
    Gaussian input at finite d and any eps, up to the quadrature error (relative ≲ 1e-6 for corr_hidden ≲ 0.2,
    ≲ 1e-4 for corr_hidden ≲ ½, see :func:`quadrature_orders`):
      μ_out = E[w/√D], σ²_out = E[|x|²/D] − μ_out², r_out = (E[y_t y_s] − μ_out²)/σ²_out,
      corr_hidden_out = ((d E[w²/D] − E[|x|²/D])/(d − 1) − μ_out²)/σ²_out.
      Large-d limits: μ_out → μ/√(μ² + σ²), σ²_out → σ²/(μ² + σ²), r_out → r; for μ = 0, r_out = E[cos θ] with
      n = d (:func:`sigprop.components.layernorm.expected_cosine`) = r(1 − (1 − r²)/(2d)) + O(d⁻²).
    ``approx="large_d"``: the d → ∞ limit (σ̂ replaced by its limit, as Kedia et al. App. A.6 do for LayerNorm):
      μ_out = μ/√q, σ²_out = σ²/q, r_out = r, corr_hidden_out = corr_hidden, q = μ² + σ² + eps.

    Zero-mean input with corr_hidden = 0 (what the token-resolved state feeds, thousands of pairs at a time) takes the
    closed form instead: σ²_out = E[|x|²/D] = Σ_k (−d·eps/σ²)^k E[1/(χ²_d)^k] = 1 − d·eps/(σ²(d − 2)) + …
    (three terms), r_out = E[cos θ] with n = d (its eps correction is O(eps/(σ²d))), corr_hidden_out = 0 (by
    symmetry), while d·eps/(σ²(d − 2)) ≤ :data:`CENTRED_EPS_TERM` (tested against the quadrature); beyond it, more
    than :data:`TABLE_ABOVE` such configurations at once take the quadrature on a grid, interpolated
    (:func:`_centred_table`).

    Assumes: Gaussian input with the separable covariance of :mod:`sigprop.core.moments`; affine weight at its
    initial value 1. Raises ``ValueError`` for d < 16, eps < 0, an unknown ``approx`` or corr_hidden outside
    [−1/(d−1), 1).
    """
    d, eps = _CHECKS.rule(d, eps, approx)
    _CHECKS.corr_hidden(m.corr_hidden, d)
    zero = np.zeros(np.broadcast(m.mean, m.var, m.corr, m.corr_hidden, d, eps).shape)
    if approx == "large_d":
        q = m.second_moment + eps
        return Moments(mean=m.mean / np.sqrt(q) + zero, var=m.var / q + zero, corr=clip_corr(m.corr + zero),
                       corr_hidden=clip_corr(m.corr_hidden + zero))
    if _centred(m.mean, m.var, m.corr_hidden, d, eps):
        var = _inverse_norm_series(d, eps / m.var, 0) + zero
        return Moments(mean=zero, var=var, corr=clip_corr(expected_cosine(d, m.corr) + zero), corr_hidden=zero)
    if _tabulated(m.mean, m.corr_hidden, d, eps, zero.size):
        ey2, corr, _, _ = _centred_table(m.var + zero, m.corr + zero, float(d), float(eps))
        return Moments(mean=zero, var=ey2, corr=clip_corr(corr), corr_hidden=zero)
    e = rmsnorm_expectations(m.mean, m.var, m.corr, m.corr_hidden, d, eps, pair=True)
    mu2 = e["m"] ** 2
    var = e["ey2"] - mu2
    corr = (e["eyy"] - mu2) / var
    hidden = ((d * e["ew2"] - e["ey2"]) / (d - 1.0) - mu2) / var
    return Moments(mean=e["m"], var=var, corr=clip_corr(corr), corr_hidden=clip_corr(hidden))


def rmsnorm_backward(g: GradMoments, m_in: Moments, d: Stat, eps: Stat = DEFAULT_EPS,
                     approx: str = "exact") -> GradMoments:
    """Gradient moments through RMSNorm: g_in = (1/rms)(I − y yᵀ/d) g_out, rms = √(mean(x²) + eps).

    ``approx="exact"`` (default), with D = |x|² + d·eps, q = |x|²/D (module docstring; exact, eps included):
      σ²_gin = σ²_g E[tr(M²)/rms²]/d = σ²_g E[(d − 2q + q²)/D]   (→ σ²_g (d − 1) E[1/|x|²] at eps = 0),
      r_gin = r_g E[(d − q_t − q_s + (y_t·y_s/d)²)/√(D_t D_s)] / E[(d − 2q + q²)/D].
      For μ = 0, eps = 0: σ²_gin = σ²_g (d − 1)/(σ²(d − 2)) and r_gin is LayerNorm's with n = d; zero-mean input
      with corr_hidden = 0 takes that closed form with its series in eps (σ²_gin = σ²_g (d − 1) E[1/D], three
      terms, as :func:`rmsnorm_forward`).
    ``approx="large_d"``: σ²_gin = σ²_g/(μ² + σ² + eps), r_gin = r_g.

    Assumes: Gaussian input (moments ``m_in``); zero-mean output gradient independent of x with i.i.d. hidden
    units. Raises ``ValueError`` as :func:`rmsnorm_forward`.
    """
    d, eps = _CHECKS.rule(d, eps, approx)
    _CHECKS.corr_hidden(m_in.corr_hidden, d)
    zero = np.zeros(np.broadcast(g.var, g.corr, m_in.mean, m_in.var, m_in.corr, m_in.corr_hidden, d, eps).shape)
    if approx == "large_d":
        return GradMoments(var=g.var / (m_in.second_moment + eps) + zero, corr=clip_corr(g.corr + zero))
    if _centred(m_in.mean, m_in.var, m_in.corr_hidden, d, eps):
        dd = np.asarray(d, dtype=np.float64)
        var = g.var * (dd - 1.0) / (m_in.var * dd) * _inverse_norm_series(dd, eps / m_in.var, 1)
        return GradMoments(var=var + zero, corr=clip_corr(g.corr * normalised_grad_corr(dd, m_in.corr) + zero))
    if _tabulated(m_in.mean, m_in.corr_hidden, d, eps, zero.size):
        _, _, gv, factor = _centred_table(m_in.var + zero, m_in.corr + zero, float(d), float(eps))
        return GradMoments(var=g.var / m_in.var * gv + zero, corr=clip_corr(g.corr * factor + zero))
    e = rmsnorm_expectations(m_in.mean, m_in.var, m_in.corr, m_in.corr_hidden, d, eps, pair=True)
    var = g.var / m_in.var * e["gv"]
    corr = g.corr * e["gc"] / e["gv"]
    return GradMoments(var=var + zero, corr=clip_corr(corr + zero))


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dimensions, with the interface of
    ``torch.nn.RMSNorm`` (torch ≥ 2.4; written here so that torch 2.3 works too):

        y = x / √(mean(x², over normalized_shape) + eps) · weight,

    ``eps=None`` means ``torch.finfo(x.dtype).eps`` as in torch. Also transforms moments (:func:`rmsnorm_forward`,
    :func:`rmsnorm_backward`; they assume weight = 1, its initial value, and use the eps of the weight's dtype, or of
    float32 without a weight, when ``eps`` is None).
    """

    rules = Rules(fixes_length=True)

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, approx: str = "exact") -> None:
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        if eps is not None:
            _CHECKS.eps(eps)
        _CHECKS.approx(approx)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.approx = approx
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)

    @property
    def d(self) -> int:
        return int(np.prod(self.normalized_shape))

    def _eps_for(self, dtype: torch.dtype) -> float:
        return float(torch.finfo(dtype).eps) if self.eps is None else float(self.eps)

    @property
    def moment_eps(self) -> float:
        """The eps the moment rules use: ``eps``, or the machine epsilon of the weight's dtype (float32 without)."""
        return self._eps_for(self.weight.dtype if self.weight is not None else torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = tuple(range(-len(self.normalized_shape), 0))
        y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + self._eps_for(x.dtype))
        return y * self.weight if self.weight is not None else y

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

    def forward_moments(self, m: Moments) -> Moments:
        return rmsnorm_forward(m, self.d, self.moment_eps, self.approx)

    def backward_moments(self, g: GradMoments, m_in: Moments) -> GradMoments:
        return rmsnorm_backward(g, m_in, self.d, self.moment_eps, self.approx)
