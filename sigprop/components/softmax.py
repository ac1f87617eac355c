"""Softmax: the module and its moment rules (Kedia et al. App. A.7, Tables 15–17 row "Softmax").

Setting (App. A.7). The softmax runs along an axis of length ``L`` whose elements are N(μ, σ²) with pairwise
correlation r (Table 22 files this correlation under Corr^l, the token correlation, so ``Moments.corr`` is read as
the correlation *along the softmax axis*; ``Moments.corr_hidden`` is the correlation between two softmax rows at the
same position). Softmax is invariant to adding a constant to a row, so the part shared by the row cancels and

    softmax(x) = softmax(s z),   z_1 … z_L i.i.d. N(0, 1),   s² = σ²(1 − r)                        (exact)

for every r ≥ −1/(L−1) (every valid exchangeable covariance). The mean μ never matters.

Exact identities: Σ_k p_k = 1 gives E p = 1/L and, with exchangeability, a correlation of −1/(L−1) along the axis;
the backward map g_in = p ⊙ (g − ⟨p, g⟩) gives Σ_k g_in,k = 0, hence a gradient correlation of −1/(L−1) as well, and
a common (shared) part of the output gradient cancels, so only its independent part (1 − r_g)σ²_g enters.

The variance needs E[p^n]: we evaluate it exactly with the Laplace representation 1/S^n = ∫ t^{n−1} e^{−tS} dt/Γ(n),
which factorises over the i.i.d. terms of S = Σ_k e^{s z_k}:

    E[u_i^a / S^n]       = ∫_0^∞ t^{n−1}/Γ(n) · ψ_a(t) φ(t)^{L−1} dt,
    E[u_i^a u_j^b / S^n] = ∫_0^∞ t^{n−1}/Γ(n) · ψ_a(t) ψ_b(t) φ(t)^{L−2} dt,

with u = e^{s z}, φ(t) = E[e^{−t u}], ψ_a(t) = E[u^a e^{−t u}] (Gauss–Hermite over z) and a generalised Gauss–Laguerre
rule in t after the substitution t = τ/(L e^{s²/2}). The quadrature reproduces E p = 1/L to ~1e-13 relative in
Table 22's range (L ≥ 300); see ``_NT`` for short rows.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.gaussian import expect_1d, expect_2d
from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import Rules

__all__ = [
    "Softmax",
    "softmax_forward",
    "softmax_backward",
    "softmax_power_moments",
    "softmax_second_moment",
    "softmax_overlap",
    "LOGNORMAL_OVERLAP_LIMIT",
    "SOFTMAX_APPROX",
]

#: The approximations offered by the softmax rules.
SOFTMAX_APPROX = ("exact", "delta", "kedia", "kedia_table1")

_NZ = 40  # Gauss–Hermite nodes over z
#: Gauss–Laguerre nodes over the Laplace variable. E p = 1/L is reproduced to ~1e-13 relative for L ≥ 300 and
#: s² ≤ 2, ~1e-10 for L ≥ 10 and s² ≤ 1; short rows with large s² are harder (L = 2, s² = 2: 5e-5).
_NT = 64
#: Largest relative miss of E p = 1/L the quadrature may show; beyond it (short rows with large scores: L = 2 at
#: s² = 4, L = 64 at s² = 16) the higher moments are off by about twice as much, and the rules refuse the input.
SOFTMAX_QUADRATURE_TOLERANCE = 1e-3


@lru_cache(maxsize=8)
def _hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = special.roots_hermitenorm(n)
    return z, w / np.sqrt(2.0 * np.pi)


@lru_cache(maxsize=8)
def _laguerre(n: int) -> tuple[np.ndarray, np.ndarray]:
    return special.roots_laguerre(n)


def _check_length(L: Stat) -> Stat:
    return check_range(L, "softmax length L", lo=2.0, allowed="[2, inf) (number of elements along the axis)")


def _check_approx(approx: str) -> None:
    if approx not in SOFTMAX_APPROX:
        raise ValueError(f"approx must be one of {SOFTMAX_APPROX} (got {approx!r})")


def _score_var(m: Moments, L: Stat) -> Stat:
    """s² = σ²(1 − r), the variance of the i.i.d. scores equivalent to the input (see the module docstring)."""
    lo = -1.0 / (np.asarray(L, dtype=np.float64) - 1.0)
    if np.any(np.asarray(m.corr) < lo - 1e-12):
        raise ValueError(f"Moments.corr along the softmax axis must be >= -1/(L-1) (got {m.corr!r})")
    check_range(m.corr, "Moments.corr (softmax axis)", lo=-1.0, hi=1.0, hi_open=True,
                allowed="[-1/(L-1), 1): identical inputs give a constant softmax with zero variance")
    return m.var * (1.0 - m.corr)


def softmax_power_moments(s2: Stat, L: Stat, orders: tuple[int, ...] = (1, 2, 3, 4),
                          pair: bool = True) -> dict[str, Stat]:
    """E[p_i^n] (n in ``orders``) and, if ``pair``, E[p_i² p_j²] (i ≠ j) for p = softmax(s z), z ~ N(0, I_L).

    Exact up to quadrature error (~1e-12 relative for L ≥ 300 and s² ≤ 2; ``ValueError`` where E p misses 1/L by
    more than :data:`SOFTMAX_QUADRATURE_TOLERANCE`; see the module docstring for the Laplace representation):
    with u = e^{sz}, λ = L e^{s²/2} and t = τ/λ, E[u_i^n/S^n] = λ^{−n}/Γ(n) ∫ τ^{n−1} e^{−τ} H_n(τ) dτ where
    H_n = e^{τ} ψ_n(τ/λ) φ(τ/λ)^{L−1} is smooth, integrated by Gauss–Laguerre; φ, ψ_n by Gauss–Hermite.
    ``s2`` and ``L`` broadcast. Assumes: i.i.d. Gaussian scores (any exchangeable Gaussian input reduces to this).
    Returns a dict with keys "p1" … "p4" (as requested) and "p2p2".
    """
    s2 = np.asarray(s2, dtype=np.float64)
    L = np.asarray(L, dtype=np.float64)
    s2, L = np.broadcast_arrays(s2, L)
    z, wz = _hermite(_NZ)
    tau, wt = _laguerre(_NT)
    lam = L * np.exp(s2 / 2.0)
    u = np.exp(np.sqrt(s2)[..., None, None] * z)  # (..., 1, nz)
    e = np.exp(-(tau / lam[..., None])[..., None] * u)  # (..., nt, nz)
    logphi = np.log(e @ wz)  # (..., nt)
    base = np.exp(tau + (L[..., None] - 1.0) * logphi)
    psi = {}
    eu = e
    for a in range(1, max(max(orders), 2 if pair else 1) + 1):
        eu = eu * u
        psi[a] = eu @ wz
    p1 = (base * psi[1]) @ wt / lam
    # E p = 1/L exactly: the quadrature's miss says how far it is off (a row of one element, a causal row's first
    # position, is left out of the check: its p = 1 is known)
    miss = np.where(L == 1.0, 0.0, np.abs(p1 * L - 1.0))
    if np.any(miss > SOFTMAX_QUADRATURE_TOLERANCE):
        i = np.unravel_index(int(np.argmax(miss)), miss.shape) if miss.ndim else ()
        raise ValueError(f"softmax moments at L = {float(L[i]):g}, score variance s² = {float(s2[i]):.3g}: outside "
                         f"the range the quadrature resolves (E p misses 1/L by {float(miss[i]):.1e}; short rows "
                         "with large scores): sample the scores instead (the attention rules' approx='sampled')")
    out = {}
    for n in orders:
        out[f"p{n}"] = (base * psi[n] * tau ** (n - 1)) @ wt / lam**n / special.gamma(n)
    if pair:
        out["p2p2"] = (base * np.exp(-logphi) * psi[2] ** 2 * tau**3) @ wt / lam**4 / 6.0
    return {k: (float(v) if np.ndim(v) == 0 else v) for k, v in out.items()}


def _delta_terms(s2: Stat, L: Stat) -> tuple[np.ndarray, np.ndarray]:
    """Mean M and variance V of S' = Σ_{k≠i} e^{s z_k}: M = (L−1)e^{s²/2}, V = (L−1)(e^{2s²} − e^{s²})."""
    M = (L - 1.0) * np.exp(s2 / 2.0)
    V = (L - 1.0) * (np.exp(2.0 * s2) - np.exp(s2))
    return M, V


def softmax_second_moment(s2: Stat, L: Stat, approx: str = "exact") -> Stat:
    """E[p_i²] for p = softmax(s z), z ~ N(0, I_L): "exact" (Laplace quadrature) or "delta" (see
    :func:`softmax_forward`). Broadcasts over ``s2`` and ``L``."""
    if approx == "exact":
        return softmax_power_moments(s2, L, orders=(2,), pair=False)["p2"]
    if approx == "delta":
        M, V = _delta_terms(s2, L)

        def f(x: np.ndarray) -> np.ndarray:
            u = np.exp(x)
            den = u + M[..., None]
            return u**2 / den**2 * (1.0 + 3.0 * V[..., None] / den**2)

        s2 = np.asarray(s2, dtype=np.float64)
        M, V = np.broadcast_arrays(np.asarray(M, dtype=np.float64), np.asarray(V, dtype=np.float64))
        return expect_1d(f, np.zeros_like(M), s2 + 0.0 * M, n=_NZ)
    raise ValueError(f"approx must be 'exact' or 'delta' here (got {approx!r})")


#: Where :func:`softmax_overlap` leaves the log-normal closed form: the relative variance (e^{s²} − 1)/L of the
#: softmax denominator's mean over its L terms, which that form neglects.
LOGNORMAL_OVERLAP_LIMIT = 0.01

_OVERLAP_GRID = np.linspace(-1.0, 1.0, 21)
_OVERLAP_SAMPLES = 2048


@lru_cache(maxsize=64)
def _overlap_table(s2: float, L: int) -> np.ndarray:
    """E[Σ_i p_i p'_i] on :data:`_OVERLAP_GRID` of row correlations, by Monte Carlo with common random numbers
    (a fixed seed: the same numbers on every call)."""
    rng = np.random.default_rng(0x50F7)
    out = np.zeros_like(_OVERLAP_GRID)
    chunk = 256
    for _ in range(0, _OVERLAP_SAMPLES, chunk):
        x = rng.standard_normal((chunk, L))
        xi = rng.standard_normal((chunk, L))

        def softmax(z: np.ndarray) -> np.ndarray:
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            return e / e.sum(axis=1, keepdims=True)

        p = softmax(np.sqrt(s2) * x)
        for k, h in enumerate(_OVERLAP_GRID):
            q = softmax(np.sqrt(s2) * (h * x + np.sqrt(max(1.0 - h * h, 0.0)) * xi))
            out[k] += float((p * q).sum())
    out /= _OVERLAP_SAMPLES
    out[_OVERLAP_GRID == 0.0] = 1.0 / L  # independent rows: exactly L·(1/L)²
    return out


def softmax_overlap(s2: Stat, h: Stat, L: Stat) -> Stat:
    """E[Σ_i p_i p'_i] for two softmax rows p = softmax(z), p' = softmax(z') of length L whose scores are
    i.i.d. N(0, s²) along the row and correlated h between the rows at the same index (Cov(z_i, z'_i) = h s²).

    Log-normal regime, while the denominators concentrate ((e^{s²} − 1)/L ≤ :data:`LOGNORMAL_OVERLAP_LIMIT`):
    Σ_k e^{z_k} ≈ L e^{s²/2}, so E[p_i p'_i] ≈ E[e^{z_i + z'_i}]/(L² e^{s²}) and the overlap is e^{h s²}/L
    (relative error O((e^{s²} − 1)/L)). Beyond it (logits of large variance: one or a few ids take most of the
    mass, e.g. s² = 15 at L = 2048 gives 0.22 where the closed form says 1600) by Monte Carlo: 2048 row pairs
    with common random numbers on a grid of 21 correlations in [−1, 1] (h = 0 exactly 1/L), linearly interpolated
    in h (``tests/components/test_softmax_overlap.py`` checks it against independent sampling and against the
    exact E[Σp²] at h = 1). ``s2`` is a scalar there (one logit variance); ``h`` broadcasts.
    """
    s2f = float(np.max(s2))
    h = np.asarray(h, dtype=np.float64)
    if s2f <= np.log1p(LOGNORMAL_OVERLAP_LIMIT * L):  # (e^{s²} − 1)/L within the limit
        return np.exp(h * np.asarray(s2, dtype=np.float64)) / L
    table = _overlap_table(round(s2f, 12), int(L))
    return np.interp(np.clip(h, -1.0, 1.0), _OVERLAP_GRID, table)


def _kedia_var(s2: Stat, L: Stat) -> Stat:
    """Kedia et al. App. A.7 / Table 16: log-normal approximation of 1/Σ e^{x_j − x_i}."""
    a = s2 * L / (L - 1.0)
    return (np.exp(a) - 1.0) * np.exp(2.0 * a) / ((L - 1.0) * np.exp(s2) + 1.0) ** 2


def _hidden_cov(s2: Stat, h: Stat, L: Stat) -> Stat:
    """Cov(p_i, p'_i) of two softmax rows whose i.i.d.-equivalent scores have correlation h at equal positions
    (second-order delta method in the denominators, 2-D Gauss–Hermite over the two scores; exact at h = 0)."""
    s2, h, L = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (s2, h, L)))
    M, V = _delta_terms(s2, L)
    C = (L - 1.0) * np.exp(s2) * (np.exp(s2 * h) - 1.0)
    Mx = M[..., None, None]
    Vx = V[..., None, None]
    Cx = C[..., None, None]

    def fpair(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
        u1, u2 = np.exp(x1), np.exp(x2)
        d1, d2 = u1 + Mx, u2 + Mx
        f1 = u1 / d1 * (1.0 + Vx / d1**2)
        f2 = u2 / d2 * (1.0 + Vx / d2**2)
        return f1 * f2 + Cx * u1 * u2 / (d1**2 * d2**2)

    def fone(x: np.ndarray) -> np.ndarray:
        u = np.exp(x)
        den = u + M[..., None]
        return u / den * (1.0 + V[..., None] / den**2)

    zero = np.zeros_like(s2)
    return expect_2d(fpair, zero, s2, h, n=32) - expect_1d(fone, zero, s2, n=_NZ) ** 2


def _hidden_corr(s2: Stat, h: Stat, L: Stat) -> Stat:
    """Cov(h)/Cov(1) with the delta-method covariance of :func:`_hidden_cov` (exactly 0 at h = 0, 1 at h = 1)."""
    return _hidden_cov(s2, h, L) / _hidden_cov(s2, 1.0, L)


def softmax_forward(m: Moments, L: Stat, approx: str = "exact") -> Moments:
    """Moments of p = softmax(x) along an axis of length L (Kedia et al. App. A.7, Tables 15–17).

    With s² = σ²(1 − r) (r = ``m.corr``, the correlation along the axis; the input mean cancels):

    * mean  = 1/L                                                     (exact: rows sum to one)
    * corr  = −1/(L − 1)                                              (exact: rows sum to one)
    * var   = E[p_i²] − 1/L², with E[p_i²] by ``approx``:
        - "exact": Laplace-transform quadrature (module docstring); exact up to ~1e-12 where resolved
          (:func:`softmax_power_moments`).
        - "delta": E_z[u²/(u+M)² (1 + 3V/(u+M)²)], u = e^{sz}, M = (L−1)e^{s²/2}, V = (L−1)(e^{2s²} − e^{s²})
          (second-order delta method in S' = Σ_{k≠i} e^{s z_k}; assumes L ≫ 1, relative error O(s²/L) in the
          variance, e.g. 2e-4 at s² = 1, L = 300; it can turn negative for L ≲ 10).
        - "kedia": the paper's log-normal form (e^{s²L/(L−1)} − 1) e^{2s²L/(L−1)} / ((L−1)e^{s²} + 1)².
        - "kedia_table1": the paper's Table 1 form (e^{s²} − 1)/L² (the paper writes r^d there; we use r).
    * corr_hidden (two softmax rows at the same position whose inputs have correlation h = ``m.corr_hidden``):
      Cov(h)/Cov(1), Cov from a second-order delta method in the two denominators (2-D Gauss–Hermite over the two
      scores); exact at h = 0 and h = 1, leading order (e^{s² h} − 1)/(e^{s²} − 1), relative error O(s²/L).
      The paper gives none; all approximations use this formula.

    Assumes: Gaussian input, exchangeable along the axis (equal variances, one pairwise correlation r ≥ −1/(L−1)),
    r < 1 (identical inputs give zero variance, which a :class:`Moments` cannot hold), L ≥ 2.
    """
    _check_approx(approx)
    L = _check_length(L)
    s2 = _score_var(m, L)
    if approx in ("exact", "delta"):
        var = softmax_second_moment(s2, L, approx) - 1.0 / L**2
    elif approx == "kedia":
        var = _kedia_var(s2, L)
    else:
        var = (np.exp(s2) - 1.0) / L**2
    zero = 0.0 * var
    return Moments(mean=1.0 / L + zero, var=var, corr=clip_corr(-1.0 / (L - 1.0) + zero),
                   corr_hidden=clip_corr(_hidden_corr(s2, m.corr_hidden, L) + zero, tol=1e-6))


def softmax_backward(g: GradMoments, m_in: Moments, L: Stat, approx: str = "exact") -> GradMoments:
    """Gradient moments through p = softmax(x): g_in,i = p_i (g_i − Σ_j p_j g_j) (Kedia et al. App. A.7).

    The shared part of the output gradient cancels, so with g = √r_g σ_g ξ + √(1−r_g) σ_g γ (γ i.i.d.):

        σ²_gin = σ²_g (1 − r_g) E[p_i² (1 − 2p_i + Σ_j p_j²)]
               = σ²_g (1 − r_g) (E p² − 2E p³ + E p⁴ + (L − 1) E[p_i² p_j²]),

    and r_gin = −1/(L − 1) exactly (Σ_i g_in,i = 0). The expectations, by ``approx``:

    * "exact": Laplace quadrature (:func:`softmax_power_moments`).
    * "delta": E p² from the delta method, −2e^{3s²}/L³ + e^{2s²}/L³ for the rest (log-normal leading order).
    * "kedia": σ²_g (σ²_kedia + 1/L²), the paper's Table 16 (no (1 − r_g) factor: the paper used r_g = 0).
    * "kedia_table1": σ²_g e^{s²}/L² (Table 1).

    Assumes: as :func:`softmax_forward`; the output gradient is zero-mean, Gaussian and independent of the input.
    """
    _check_approx(approx)
    L = _check_length(L)
    s2 = _score_var(m_in, L)
    indep = g.var * (1.0 - g.corr)
    if approx == "exact":
        pm = softmax_power_moments(s2, L)
        var = indep * (pm["p2"] - 2.0 * pm["p3"] + pm["p4"] + (L - 1.0) * pm["p2p2"])
    elif approx == "delta":
        var = indep * (softmax_second_moment(s2, L, "delta") - 2.0 * np.exp(3.0 * s2) / L**3
                       + np.exp(2.0 * s2) / L**3)
    elif approx == "kedia":
        var = g.var * (_kedia_var(s2, L) + 1.0 / L**2)
    else:
        var = g.var * np.exp(s2) / L**2
    return GradMoments(var=var, corr=clip_corr(-1.0 / (L - 1.0) + 0.0 * var))


class Softmax(nn.Softmax):
    """``torch.nn.Softmax`` along ``dim`` that also transforms moments (:func:`softmax_forward`,
    :func:`softmax_backward`).

    The rules need the length of the softmax axis: pass ``length`` here or to the moment methods.
    ``Moments.corr`` is read as the correlation along the softmax axis (see the module docstring).
    """

    rules = Rules(context=frozenset({"length"}))

    def __init__(self, dim: int = -1, length: int | None = None, approx: str = "exact") -> None:
        _check_approx(approx)
        if length is not None:
            _check_length(length)
        super().__init__(dim=dim)
        self.length = length
        self.approx = approx

    def _length(self, length: Stat | None) -> Stat:
        L = self.length if length is None else length
        if L is None:
            raise ValueError("softmax length L is needed for the moment rules (pass length=...)")
        return L

    def forward_moments(self, m: Moments, length: int | None = None) -> Moments:
        return softmax_forward(m, self._length(length), self.approx)

    def backward_moments(self, g: GradMoments, m_in: Moments, length: int | None = None) -> GradMoments:
        return softmax_backward(g, m_in, self._length(length), self.approx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 (inherited behaviour)
        return super().forward(x)
