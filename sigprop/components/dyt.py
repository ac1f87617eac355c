"""Dynamic tanh (DyT): the module and its moment rules (Zhu et al. 2025; Alekseev 2026, Eqs. 10, 13, 40).

DyT(x) = γ·tanh(αx) + β with a learnable scalar α and a per-channel affine γ (init 1), β (init 0). For a Gaussian
input x ~ N(μ, σ²) the pre-activation h = αx is N(m, v) with m = αμ, v = α²σ², and the rules need the Gaussian
expectations E[tanh h], Cov(tanh h1, tanh h2), E[sech⁴ h] and E[sech² h1 sech² h2] (tanh' = sech²). These have no
closed form; they are computed by quadrature accurate to ~1e-13 relative, 1e-11 at worst (just above the
switch √v = 0.5 below; tested against scipy.integrate):

* **Why not plain Gauss–Hermite.** tanh has poles at ±iπ/2, so an n-point Gauss–Hermite rule in the standardised
  variable converges like exp(−c·(π/2)/√v · √n): for v = 40 (α = 2, σ² = 10) the 96-point rule of
  :func:`sigprop.core.gaussian.expect_1d` is visibly off for E[tanh²] and useless for E[sech⁴] (the figures:
  docs/results/accuracy.md, "Gaussian expectations of saturating maps").
* **Localised integrands.** tanh is split as tanh(x) = erf(c x) + ρ(x) with c = √π/2 (matching slopes at 0), where
  the erf part has the closed forms of :mod:`sigprop.components.derf` and the remainder ρ(x) = sign(x)[erfc(c|x|) −
  2/(1+e^{2|x|})] is analytic in |Im x| < π/2 and below 1e-18 for |x| > 22; sech² is localised the same way.
* **Two rules for a localised f.** E[f(h)] uses 64-point Gauss–Hermite when √v ≤ 0.5 (the poles are then ≥ π
  standard deviations away) and otherwise the trapezoid rule on x ∈ [−22, 22] with step ≤ 0.25 against the
  Gaussian density, whose error for an integrand analytic in a strip of half-width π/2 is O(exp(−2π(π/2)/0.25))
  ≈ 1e-17. A pre-activation far out in the saturated tail (|m| > 6√v) gets a window that follows its tilted mass
  instead (see ``_window``), so saturated DyT keeps its relative accuracy.
* **Bivariate expectations by conditioning:** E[f(h1) g(h2)] = E_h1[f(h1) E[g(h2) | h1]] with
  h2 | h1 ~ N(m + r(h1 − m), v(1 − r²)); the inner expectation is again a localised 1-D rule (or the erf closed form
  E[erf(c h2) | h1] = erf(c a/√(1 + 2c²b))). This stays exact as r → 1 (the inner variance → 0).
* **Centred forms.** Cov(tanh h1, tanh h2) = Cov_erf + 2 Cov(ρ(h1), erf(c h2)) + Cov(ρ(h1), ρ(h2)), each term an
  expectation of a centred product, so nothing cancels when tanh saturates.

Relative accuracy is ~1e-13 (1e-11 at worst) also deep in saturation (tested to |m| = 60 against scipy), as
long as the quantities stay above float64's underflow.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range
from ..walk.protocol import TOKEN_WISE
from .derf import PhiExpectations, erf_cov
from .dynamic_norm import APPROXES, assemble_backward, assemble_forward, check_rule, parameter_tensor, rule_value

__all__ = ["DyT", "dyt_forward", "dyt_backward", "tanh_expectations", "APPROXES", "ERF_SLOPE"]

#: c in the split tanh(x) = erf(c x) + ρ(x): erf(c x) has slope 2c/√π = 1 at 0, like tanh.
ERF_SLOPE = np.sqrt(np.pi) / 2.0

_SD_SWITCH = 0.5  # standard deviation above which the trapezoid grid replaces Gauss–Hermite
_GH_NODES = 64
_HALF_WIDTH = 22.0  # |f(x)| < 1e-18 beyond this for the localised integrands ρ, sech², sech⁴
_STEP = 0.25
_BLOCK = 32  # configurations per block in the bivariate rules
_MAX_NODES = 2**21  # quadrature points evaluated at once by the trapezoid rule (bounds memory)


@lru_cache(maxsize=4)
def _hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = special.roots_hermitenorm(n)
    return z, w / np.sqrt(2.0 * np.pi)


# ----------------------------------------------------------------------------------------------------------------
# localised integrands
# ----------------------------------------------------------------------------------------------------------------

def _sech2(x: Stat) -> Stat:
    e = np.exp(-2.0 * np.abs(x))
    return 4.0 * e / (1.0 + e) ** 2


def _sech4(x: Stat) -> Stat:
    return _sech2(x) ** 2


def _rho(x: Stat) -> Stat:
    """ρ(x) = tanh(x) − erf(c x), written as sign(x)[erfc(c|x|) − 2/(1 + e^{2|x|})] (accurate in the tails)."""
    ax = np.abs(x)
    with np.errstate(over="ignore"):
        t = 2.0 / (1.0 + np.exp(2.0 * ax))
    return np.sign(x) * (special.erfc(ERF_SLOPE * ax) - t)


# ----------------------------------------------------------------------------------------------------------------
# quadrature of localised integrands
# ----------------------------------------------------------------------------------------------------------------

def _expect_local(f: Callable[..., Stat], mean: Stat, var: Stat, *extras: Stat) -> np.ndarray:
    """E[f(h, *extras)] for h ~ N(mean, var), f localised in [−22, 22] and analytic in |Im x| < π/2.

    ``f(x, *extras)`` receives x of shape (N, nodes) and each extra of shape (N, 1). Arrays broadcast; the result has
    their common shape. Gauss–Hermite (64 nodes) where √var ≤ 0.5, otherwise the trapezoid rule with step ≤ 0.25
    on the window of :func:`_window`.
    """
    arrs = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mean, var) + extras))
    shape = arrs[0].shape
    mean, var, *flat_extras = (a.reshape(-1) for a in arrs)
    out = np.empty(mean.shape, dtype=np.float64)
    sd = np.sqrt(var)
    small = sd <= _SD_SWITCH
    if small.any():
        z, w = _hermite(_GH_NODES)
        x = mean[small, None] + sd[small, None] * z
        out[small] = np.sum(w * f(x, *(e[small, None] for e in flat_extras)), axis=-1)
    big = np.flatnonzero(~small)
    if big.size:
        lo, hi = _window(np.abs(mean[big]), var[big], sd[big])
        flip = mean[big] < 0.0  # the window of −m is the mirror image
        lo, hi = np.where(flip, -hi, lo), np.where(flip, -lo, hi)
        need = np.ceil((hi - lo) / _STEP).astype(int) + 1  # 177 nodes, more only for far-and-wide pre-activations
        order = np.argsort(need, kind="stable")  # chunks of similar node counts; memory ≤ _MAX_NODES doubles
        start = 0
        while start < order.size:
            n = need[order[start]]
            stop = min(order.size, start + max(1, _MAX_NODES // n))
            n = need[order[stop - 1]]
            sel = order[start:stop]
            idx = big[sel]
            mb, vb = mean[idx, None], var[idx, None]
            x = lo[sel, None] + (hi - lo)[sel, None] * np.linspace(0.0, 1.0, n)
            w = (hi - lo)[sel, None] / (n - 1) * np.exp(-((x - mb) ** 2) / (2.0 * vb)) / np.sqrt(2.0 * np.pi * vb)
            w[:, [0, -1]] *= 0.5
            out[idx] = np.sum(w * f(x, *(e[idx, None] for e in flat_extras)), axis=-1)
            start = stop
    return out.reshape(shape)


def _window(m: Stat, v: Stat, sd: Stat) -> tuple[Stat, Stat]:
    """Integration window [lo, hi] of the trapezoid rule for a pre-activation N(m, v), m ≥ 0, sd = √v > 0.5.

    The integrands are localised with tails ∝ e^{−k|x|}, 0 ≤ k ≤ 4, so f·N is concentrated on the tilted centres
    m − k v. If m ≤ 6 sd the region |x| ≲ 1 dominates (N there is ≥ e^{−18} of its peak, while |f| < 1e-18 beyond 22)
    and [−22, 22] suffices. Otherwise the window is [m − 4v − 8 sd, m + 8 sd] joined with the part of [−22, 22] that
    it reaches, which covers every tilted centre with 8 standard deviations to spare.
    """
    far = m > 6.0 * sd
    lo = np.where(far, np.maximum(-_HALF_WIDTH, m - 4.0 * v - 8.0 * sd), -_HALF_WIDTH)
    hi = np.where(far, np.maximum(_HALF_WIDTH, m + 8.0 * sd), _HALF_WIDTH)
    return lo, hi


def _conditional(x1: Stat, mean: Stat, var: Stat, corr: Stat) -> tuple[Stat, Stat]:
    """Mean and variance of h2 given h1 = x1 (common mean and variance, correlation corr)."""
    return mean + corr * (x1 - mean), var * (1.0 - corr**2)


def _blocked(fn: Callable[..., Stat], *arrays: Stat) -> np.ndarray:
    """Evaluate ``fn`` on blocks of the flattened, broadcast configuration arrays (bounds peak memory)."""
    arrs = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    shape = arrs[0].shape
    flat = [a.reshape(-1) for a in arrs]
    out = np.empty(flat[0].shape, dtype=np.float64)
    for i in range(0, out.size, _BLOCK):
        out[i:i + _BLOCK] = fn(*(a[i:i + _BLOCK] for a in flat))
    return out.reshape(shape)


def _cov_rho_erf(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """Cov(ρ(h1), erf(c h2)) = E_h1[ρ(h1) (E[erf(c h2) | h1] − E[erf(c h2)])]."""
    c = ERF_SLOPE

    def outer(x1: Stat, m: Stat, v: Stat, r: Stat, e_erf: Stat) -> Stat:
        a, b = _conditional(x1, m, v, r)
        return _rho(x1) * (special.erf(c * a / np.sqrt(1.0 + 2.0 * c * c * b)) - e_erf)

    def block(m: Stat, v: Stat, r: Stat) -> np.ndarray:
        e_erf = special.erf(c * m / np.sqrt(1.0 + 2.0 * c * c * v))
        return _expect_local(outer, m, v, m, v, r, e_erf)

    return _blocked(block, mean, var, corr)


def _cov_rho_rho(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """Cov(ρ(h1), ρ(h2)) = E_h1[ρ(h1) (E[ρ(h2) | h1] − E[ρ(h)])]."""

    def outer(x1: Stat, m: Stat, v: Stat, r: Stat, e_rho: Stat) -> Stat:
        a, b = _conditional(x1, m, v, r)
        return _rho(x1) * (_expect_local(lambda x: _rho(x), a, b) - e_rho)

    def block(m: Stat, v: Stat, r: Stat) -> np.ndarray:
        return _expect_local(outer, m, v, m, v, r, _expect_local(lambda x: _rho(x), m, v))

    return _blocked(block, mean, var, corr)


def _tanh_cov(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """Cov(tanh h1, tanh h2) = Cov(e1, e2) + 2 Cov(ρ1, e2) + Cov(ρ1, ρ2), e = erf(c h) (module docstring)."""
    c = ERF_SLOPE
    mean, var, corr = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mean, var, corr)))
    out = np.zeros(mean.shape, dtype=np.float64)
    one = corr == 1.0  # the variance: h1 = h2, a 1-D expectation
    if one.any():
        m, v = mean[one], var[one]
        e_erf = special.erf(c * m / np.sqrt(1.0 + 2.0 * c * c * v))
        e_rho = _expect_local(lambda x: _rho(x), m, v)
        out[one] = erf_cov(c * m, c * c * v, 1.0) + _expect_local(
            lambda x, ee, er: _rho(x) * (2.0 * (special.erf(c * x) - ee) + _rho(x) - er), m, v, e_erf, e_rho)
    nz = (corr != 0.0) & ~one  # corr = 0: independent tokens, covariance exactly 0
    if nz.any():
        m, v, r = mean[nz], var[nz], corr[nz]
        out[nz] = erf_cov(c * m, c * c * v, r) + 2.0 * _cov_rho_erf(m, v, r) + _cov_rho_rho(m, v, r)
    return out


def _tanh_mean(mean: Stat, var: Stat) -> Stat:
    c = ERF_SLOPE
    return special.erf(c * mean / np.sqrt(1.0 + 2.0 * c * c * var)) + _expect_local(lambda x: _rho(x), mean, var)


def _sech2_pair(mean: Stat, var: Stat, corr: Stat) -> Stat:
    """E[sech²(h1) sech²(h2)] by conditioning (exact as corr → 1)."""

    def outer(x1: Stat, m: Stat, v: Stat, r: Stat) -> Stat:
        a, b = _conditional(x1, m, v, r)
        return _sech2(x1) * _expect_local(lambda x: _sech2(x), a, b)

    return _blocked(lambda m, v, r: _expect_local(outer, m, v, m, v, r), mean, var, corr)


def tanh_expectations(mean: Stat, var: Stat, corr: Stat) -> PhiExpectations:
    """Gaussian expectations of φ = tanh for h ~ N(m, v) and (h1, h2) with correlation r, by the quadrature of the
    module docstring (relative accuracy ~1e-13, 1e-11 at worst; tested against scipy.integrate; no closed form).

    ``dphi2`` = E[sech⁴ h] and ``dphi12`` = E[sech² h1 sech² h2] (tanh' = sech²). Alekseev Eqs. 10, 13, 40 with a
    mean. Assumes: Gaussian h.
    """
    mean, var, corr = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (mean, var, corr)))
    phi = _tanh_mean(mean, var)
    v1 = _tanh_cov(mean, var, np.ones_like(corr))
    c = _tanh_cov(mean, var, corr)
    return PhiExpectations(phi=phi, phi2=v1 + phi**2, phi12=c + phi**2, var=v1, cov=c,
                           dphi2=_expect_local(lambda x: _sech4(x), mean, var),
                           dphi12=_sech2_pair(mean, var, corr))


# ----------------------------------------------------------------------------------------------------------------
# the rules
# ----------------------------------------------------------------------------------------------------------------

def _pre_activation(m: Moments, alpha: Stat, approx: str) -> tuple[Stat, Stat, Stat, Stat]:
    """(mean, variance, token corr, hidden corr) of h = αx; "alekseev" treats x as zero-mean with E[x²] = q."""
    if approx == "alekseev":
        q = m.second_moment
        return 0.0 * q, alpha**2 * q, m.token_second_moment / q, (m.corr_hidden * m.var + m.mean**2) / q
    return alpha * m.mean, alpha**2 * m.var, m.corr, m.corr_hidden


def dyt_forward(m: Moments, alpha: Stat, gamma: Stat = 1.0, beta: Stat = 0.0, approx: str = "exact") -> Moments:
    """Moments of y = γ·tanh(αx) + β for Gaussian x (Zhu et al. 2025; Alekseev Eq. 10).

    ``approx="exact"`` (default): with h = αx ~ N(αμ, α²σ²),

        μ_y = γ E[tanh h] + β,   σ²_y = γ² Var tanh h,   r_y = Cov(tanh h1, tanh h2)/Var tanh h,

    where (h1, h2) have correlation r (r^d for ``corr_hidden``); expectations by :func:`tanh_expectations`.

    ``approx="alekseev"``: Eq. 10 as the paper uses it, a zero-mean input with second moments q = σ² + μ² and
    p = rσ² + μ²: μ_y = β, σ²_y = γ² q̃, r_y = p̃/q̃ with q̃ = E[tanh(αh)²], p̃ = E[tanh(αh1) tanh(αh2)],
    h ~ N(0, q). Equal to "exact" when μ = 0.

    Assumes: Gaussian input, elements sharing one mean; γ, β, α scalars (or per-configuration arrays broadcasting
    with the fields of ``m``). Raises ``ValueError`` for α = 0, γ = 0, non-finite values or an unknown ``approx``.
    """
    alpha, gamma = check_rule(approx, alpha, gamma)
    beta = check_range(beta, "beta")
    mh, vh, r, rd = _pre_activation(m, alpha, approx)
    var_phi = _tanh_cov(mh, vh, np.ones_like(np.asarray(r, dtype=np.float64)))
    mean_phi = 0.0 * vh if approx == "alekseev" else _tanh_mean(mh, vh)
    return assemble_forward(mean_phi, var_phi, _tanh_cov(mh, vh, r) / var_phi, _tanh_cov(mh, vh, rd) / var_phi,
                            gamma, beta)


def dyt_backward(g: GradMoments, m_in: Moments, alpha: Stat, gamma: Stat = 1.0, approx: str = "exact") -> GradMoments:
    """Gradient moments through y = γ·tanh(αx) + β: g_in = γ α sech²(αx) g (Alekseev Eqs. 13 and 40).

    ``approx="exact"``: with h = αx for the input moments ``m_in``,

        σ²_gin = γ² α² σ²_g E[sech⁴ h],   r_gin = r_g E[sech² h1 sech² h2] / E[sech⁴ h].

    ``approx="alekseev"``: the same at zero mean with Var h = α²q, Cov = α²p (q = σ² + μ², p = rσ² + μ²), i.e.
    σ²_gin = γ² σ²_g q̂, r_gin = r_g p̂/q̂ (Eqs. 13, 40); equal to "exact" when μ = 0.

    Assumes: Gaussian input; output gradient zero-mean and independent of the input (mean-field). β does not
    enter. Raises ``ValueError`` for α = 0, γ = 0 or an unknown ``approx``.
    """
    alpha, gamma = check_rule(approx, alpha, gamma)
    mh, vh, r, _ = _pre_activation(m_in, alpha, approx)
    d1 = _expect_local(lambda x: _sech4(x), mh, vh)
    d12 = _sech2_pair(mh, vh, r)
    return assemble_backward(g, d1, d12 / d1, alpha, gamma)


# ----------------------------------------------------------------------------------------------------------------
# the module
# ----------------------------------------------------------------------------------------------------------------

class DyT(nn.Module):
    """Dynamic tanh, DyT(x) = γ·tanh(αx) + β (Zhu et al. 2025), with its moment rules.

    ``alpha`` is the learnable scalar α (initial value default 0.5, Zhu et al.'s default α₀); ``gamma``, ``beta`` are
    per-channel (shape (hidden,), init 1 and 0) when ``hidden`` is given, scalars otherwise. Any of them may instead
    be a tensor that broadcasts against the input, e.g. shape (C, 1, 1, 1, 1) for a sweep whose input has a leading
    configuration dimension C. ``forward_moments`` / ``backward_moments`` read the current values (channels must
    share one value; per-configuration values become arrays of shape (C,)).
    """

    rules = TOKEN_WISE

    def __init__(self, hidden: int | None = None, alpha: float | np.ndarray | torch.Tensor = 0.5,
                 gamma: float | np.ndarray | torch.Tensor | None = None,
                 beta: float | np.ndarray | torch.Tensor | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        shape = (hidden,) if hidden is not None else ()
        dtype = dtype or torch.get_default_dtype()
        self.alpha = nn.Parameter(parameter_tensor(alpha, (), 0.5).to(dtype))
        self.gamma = nn.Parameter(parameter_tensor(gamma, shape, 1.0).to(dtype))
        self.beta = nn.Parameter(parameter_tensor(beta, shape, 0.0).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.beta, self.gamma, torch.tanh(self.alpha * x))  # γ·tanh(αx) + β, one pass

    def forward_moments(self, m: Moments, approx: str = "exact") -> Moments:
        return dyt_forward(m, rule_value(self.alpha, "alpha"), rule_value(self.gamma, "gamma"),
                           rule_value(self.beta, "beta"), approx=approx)

    def backward_moments(self, g: GradMoments, m_in: Moments | None = None, approx: str = "exact") -> GradMoments:
        if m_in is None:
            raise ValueError("DyT.backward_moments needs m_in, the moments of the input")
        return dyt_backward(g, m_in, rule_value(self.alpha, "alpha"), rule_value(self.gamma, "gamma"),
                            approx=approx)

    def extra_repr(self) -> str:
        return f"alpha shape={tuple(self.alpha.shape)}, gamma shape={tuple(self.gamma.shape)}"
