"""Covariance components after the residual-branch input map h̃ = φ_α(h) or LayerNorm(h) (Alekseev 2026).

For a layer's zero-mean Gaussian pre-activations with per-feature covariance (Alekseev Assumption 2.1, Eq. 4)

    (h_s, h_t) ~ N(0, Σ),   Σ = [[q, p], [p, q]],     q = E[h_s·h_s/d],  p = E[h_s·h_t/d]  (s ≠ t),

the recurrences of Results 3.1, 3.2, C.1 and C.2 need four propagated components:

    q̃ = E[φ(h)²],       p̃ = E[φ(h1) φ(h2)]          (Eqs. 10, 22, 25: covariance through φ)
    q̂ = E[φ'(h)²],      p̂ = E[φ'(h1) φ'(h2)]        (Eqs. 13, 40, 57, 60: covariance through the Jacobian)

with φ = φ_α(h) = φ(αh), so φ_α'(h) = α φ'(αh) (the α² sits inside q̂ and p̂, as in App. E Eq. 90).

* ``"erf"`` (Derf): closed forms of App. E, Eqs. 89–90, reused from :mod:`sigprop.components.derf` (the layer loop
  of the recurrence uses an unvalidated copy of the same four formulas, tested equal, for speed).
* ``"tanh"`` (DyT): no closed form; the accurate quadrature of :func:`sigprop.components.dyt.tanh_expectations`
  (relative error ~1e-13) on the pre-activation u = αh ~ N(0, α²q) with correlation p/q.
* a user callable φ with its derivative φ' (``dphi``): tensor Gauss–Hermite quadrature
  (:func:`sigprop.core.gaussian.expect_1d`, :func:`sigprop.core.gaussian.expect_2d`) on u = αh. Accurate for φ smooth on
  the scale of √(α²q); it degrades for saturating φ at α²q ≫ 1 (see :func:`sigprop.core.gaussian.expect_1d`).
* ``"layernorm"`` (pre-LN, with the mean-free/RMSNorm reading of Sec. 2.2): LayerNorm rescales each token vector to
  unit normalised squared norm and keeps cosines, so q̃ = 1, p̃ = p/q (Sec. 3.1 after Eq. 10; App. B.1). Its Jacobian
  (Eq. 53) is √d/‖h‖ (δ_βξ − h_β h_ξ/‖h‖²); the projector term is O(1/d) in the Frobenius sums, leaving the
  deterministic scalar 1/√q at every token. A product of two such Jacobians, at one token or at two different
  tokens, is therefore 1/q: q̂ = p̂ = 1/q (Eq. 13 and App. C.1 below Eq. 40, C.2.2 below Eq. 61). The p̂ of
  LayerNorm does not depend on p (unlike an elementwise φ, where p̂ → q̂ only as p → q).

Every function broadcasts over arrays of q, p and α and returns float64 arrays (floats for scalar input). Conversions to
and from :class:`sigprop.Moments` follow :mod:`sigprop.core.moments`: q = var + mean², p = corr·var + mean²; going back,
the Alekseev state is read as zero-mean (mean 0, var q, corr p/q), the convention of his recurrences.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..components.derf import erf_p_hat, erf_p_tilde, erf_q_hat, erf_q_tilde
from ..components.dyt import tanh_expectations
from ..core.gaussian import expect_1d, expect_2d
from ..core.moments import Moments
from ..core.validate import check_range

__all__ = [
    "NORMS",
    "propagate_validated",
    "Propagated",
    "Norm",
    "resolve_norm",
    "check_qp",
    "propagate",
    "erf_propagated",
    "tanh_propagated",
    "layernorm_propagated",
    "callable_propagated",
    "qp_from_moments",
    "moments_from_qp",
]

#: Canonical names of the residual-branch input maps; aliases: "derf" → "erf", "dyt" → "tanh",
#: "ln", "pre_ln", "rmsnorm" → "layernorm". A callable φ (with ``dphi``) is accepted as well.
NORMS = ("erf", "tanh", "layernorm")
_ALIASES = {"erf": "erf", "derf": "erf", "tanh": "tanh", "dyt": "tanh", "layernorm": "layernorm",
            "ln": "layernorm", "pre_ln": "layernorm", "rmsnorm": "layernorm"}

#: Gauss–Hermite nodes per dimension for a user callable φ.
DEFAULT_NODES = 96


class Propagated(NamedTuple):
    """The four propagated covariance components of Alekseev Eqs. 10 and 40 (see the module docstring):
    ``q_tilde`` = E[φ(h)²], ``p_tilde`` = E[φ(h1)φ(h2)], ``q_hat`` = E[φ'(h)²], ``p_hat`` = E[φ'(h1)φ'(h2)]."""

    q_tilde: np.ndarray | float
    p_tilde: np.ndarray | float
    q_hat: np.ndarray | float
    p_hat: np.ndarray | float


@dataclass(frozen=True)
class Norm:
    """A resolved residual-branch input map: ``kind`` in :data:`NORMS` or ``"callable"`` (then ``phi`` and ``dphi``
    are the user's φ and φ', applied as φ(αh) and αφ'(αh)). ``name`` is a label for reports."""

    kind: str
    phi: Callable | None = None
    dphi: Callable | None = None

    @property
    def name(self) -> str:
        return self.kind if self.kind != "callable" else getattr(self.phi, "__name__", "callable")

    @property
    def elementwise(self) -> bool:
        """True for a tanh-like elementwise φ_α (erf, tanh, callable), False for LayerNorm."""
        return self.kind != "layernorm"


def resolve_norm(norm, dphi: Callable | None = None) -> Norm:
    """Turn ``norm`` (a name of :data:`NORMS`, an alias, a callable φ, or an already resolved :class:`Norm`) into a
    :class:`Norm`. A callable needs its derivative ``dphi``. Raises ``ValueError`` for anything else."""
    if isinstance(norm, Norm):
        return norm
    if callable(norm):
        if dphi is None or not callable(dphi):
            raise ValueError("norm given as a callable phi needs dphi, the callable derivative phi'")
        return Norm("callable", norm, dphi)
    if isinstance(norm, str) and norm.lower() in _ALIASES:
        if dphi is not None:
            raise ValueError(f"dphi is only used with a callable norm (got norm={norm!r})")
        return Norm(_ALIASES[norm.lower()])
    raise ValueError(f"norm must be one of {NORMS} (aliases {sorted(set(_ALIASES) - set(NORMS))}) or a callable phi "
                     f"with dphi (got {norm!r})")


def check_qp(q, p):
    """Validate a covariance state: q > 0 and |p| ≤ q (p is a covariance, q the variance); raise ``ValueError``
    naming the field. Returns (q, p) as float64 broadcast to a common shape."""
    q = check_range(q, "q", lo=0.0, lo_open=True, allowed="(0, inf)")
    p = check_range(p, "p")
    q, p = np.broadcast_arrays(np.asarray(q, dtype=np.float64), np.asarray(p, dtype=np.float64))
    if np.any(np.abs(p) > q * (1.0 + 1e-12)):
        bad = np.abs(p) > q * (1.0 + 1e-12)
        raise ValueError(f"p must satisfy -q <= p <= q (got p={p[bad].flat[0]!r}, q={q[bad].flat[0]!r})")
    return q, p


def _check_alpha(alpha):
    a = check_range(alpha, "alpha")
    if np.any(np.asarray(a) == 0.0):
        raise ValueError("alpha must be a nonzero finite number (got 0.0)")
    return np.asarray(a, dtype=np.float64)


def _out(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def _erf_raw(q, p, a):
    """Eqs. 89–90 without validation (the recurrence evaluates them once per layer on validated state). The same
    one-line formulas as :func:`sigprop.components.derf.erf_q_tilde` & co., which re-validate on every call (a test
    checks that both agree)."""
    a2 = a * a
    d = 1.0 + 2.0 * a2 * q
    qt = (2.0 / np.pi) * np.arcsin(2.0 * a2 * q / d)
    pt = (2.0 / np.pi) * np.arcsin(np.clip(2.0 * a2 * p / d, -1.0, 1.0))
    qh = 4.0 * a2 / (np.pi * np.sqrt(1.0 + 4.0 * a2 * q))
    ph = 4.0 * a2 / (np.pi * np.sqrt(np.maximum(d**2 - 4.0 * a2**2 * p**2, 1.0 + 4.0 * a2 * q)))
    return qt, pt, qh, ph


def erf_propagated(q, p, alpha) -> Propagated:
    """φ_α = erf(α·), closed forms (Alekseev App. E, Eqs. 89–90; :mod:`sigprop.components.derf`):

        q̃ = (2/π) asin(2α²q/(1+2α²q)),           p̃ = (2/π) asin(2α²p/(1+2α²q)),
        q̂ = 4α²/(π√(1+4α²q)),                    p̂ = 4α²/(π√((1+2α²q)² − 4α⁴p²)).

    Assumes zero-mean Gaussian h (Eq. 4). p = q gives p̃ = q̃ and p̂ = q̂ exactly.
    """
    q, p = check_qp(q, p)
    a = _check_alpha(alpha)
    q, p, a = np.broadcast_arrays(q, p, a)
    p = np.clip(p, -q, q)  # the 1e-12 tolerance of check_qp must not push the asin argument past 1
    return Propagated(_out(erf_q_tilde(q, a)), _out(erf_p_tilde(p, q, a)), _out(erf_q_hat(q, a)),
                      _out(erf_p_hat(p, q, a)))


def tanh_propagated(q, p, alpha) -> Propagated:
    """φ_α = tanh(α·) (DyT), by quadrature (:func:`sigprop.components.dyt.tanh_expectations`, ~1e-13 relative):
    with u = αh ~ N(0, α²q) and token correlation p/q,

        q̃ = E[tanh(u)²],  p̃ = E[tanh(u1) tanh(u2)],  q̂ = α² E[sech⁴ u],  p̂ = α² E[sech² u1 sech² u2].

    Alekseev Eqs. 10, 13, 40 (no closed form exists). Cost: a few ms per configuration (bivariate quadrature).
    """
    q, p = check_qp(q, p)
    a = _check_alpha(alpha)
    q, p, a = np.broadcast_arrays(q, p, a)
    e = tanh_expectations(np.zeros(q.shape), a**2 * q, np.clip(p / q, -1.0, 1.0))
    return Propagated(_out(e.phi2), _out(e.phi12), _out(a**2 * e.dphi2), _out(a**2 * e.dphi12))


def layernorm_propagated(q, p) -> Propagated:
    """LayerNorm (RMSNorm reading, γ = 1, β = 0; Alekseev Sec. 2.2): q̃ = 1, p̃ = p/q (Sec. 3.1, App. B.1),
    q̂ = p̂ = 1/q (Eq. 13 and App. C.1–C.2 from the Jacobian Eq. 53 at large d; see the module docstring)."""
    q, p = check_qp(q, p)
    return Propagated(_out(np.ones_like(q)), _out(p / q), _out(1.0 / q), _out(1.0 / q))


def callable_propagated(q, p, phi: Callable, dphi: Callable, alpha=1.0, nodes: int = DEFAULT_NODES) -> Propagated:
    """A user elementwise φ with derivative φ' (``dphi``), applied as φ_α(h) = φ(αh), φ_α'(h) = αφ'(αh):

        q̃ = E[φ(u)²], p̃ = E[φ(u1)φ(u2)], q̂ = α² E[φ'(u)²], p̂ = α² E[φ'(u1)φ'(u2)],   u = αh ~ N(0, α²q), corr p/q,

    by ``nodes``-point (per dimension) Gauss–Hermite quadrature (Alekseev Eqs. 10, 40). ``phi`` and ``dphi`` must act
    elementwise on float64 arrays. Accurate when φ is smooth on the scale √(α²q); not for kinks or for a saturating φ
    at α²q ≫ 1 (use "erf"/"tanh" there).
    """
    q, p = check_qp(q, p)
    a = _check_alpha(alpha)
    q, p, a = np.broadcast_arrays(q, p, a)
    v = a**2 * q
    r = np.clip(p / q, -1.0, 1.0)
    qt = expect_1d(lambda x: phi(x) ** 2, 0.0, v, n=nodes)
    pt = expect_2d(lambda x1, x2: phi(x1) * phi(x2), 0.0, v, r, n=nodes)
    qh = a**2 * expect_1d(lambda x: dphi(x) ** 2, 0.0, v, n=nodes)
    ph = a**2 * expect_2d(lambda x1, x2: dphi(x1) * dphi(x2), 0.0, v, r, n=nodes)
    return Propagated(_out(qt), _out(pt), _out(qh), _out(ph))


def propagate(q, p, norm="erf", alpha=1.0, *, dphi: Callable | None = None,
              nodes: int = DEFAULT_NODES) -> Propagated:
    """(q̃, p̃, q̂, p̂) for the residual-branch input map ``norm`` (Alekseev Eqs. 10, 13, 40; App. E Eqs. 89–90).

    ``norm``: "erf" (Derf), "tanh" (DyT), "layernorm" (pre-LN; ``alpha`` is ignored), an alias of these
    (:data:`NORMS`), or a callable φ together with ``dphi`` = φ'. ``q``, ``p``, ``alpha`` broadcast. Raises
    ``ValueError`` for q ≤ 0, |p| > q, α = 0 (elementwise maps), or an unknown ``norm``.
    """
    n = resolve_norm(norm, dphi)
    if n.kind == "erf":
        return erf_propagated(q, p, alpha)
    if n.kind == "tanh":
        return tanh_propagated(q, p, alpha)
    if n.kind == "layernorm":
        return layernorm_propagated(q, p)
    return callable_propagated(q, p, n.phi, n.dphi, alpha, nodes=nodes)


def propagate_validated(q, p, norm: Norm, alpha, nodes: int = DEFAULT_NODES):
    """:func:`propagate` on already validated, broadcast float64 arrays (|p| ≤ q, α ≠ 0), as a tuple of arrays.
    Used by the layer loop of :mod:`sigprop.apjn.recurrence`, where per-call validation would dominate the cost."""
    if norm.kind == "erf":
        return _erf_raw(q, p, alpha)
    if norm.kind == "layernorm":
        return np.ones_like(q), p / q, 1.0 / q, 1.0 / q
    return tuple(np.asarray(x, dtype=np.float64) for x in propagate(q, p, norm, alpha, nodes=nodes))


def qp_from_moments(m: Moments) -> tuple:
    """Alekseev's (q, p) of a site: q = var + mean² (E[x²]), p = corr·var + mean² (E[x_t x_s], t ≠ s)
    (:mod:`sigprop.core.moments`)."""
    return m.second_moment, m.token_second_moment


def moments_from_qp(q, p) -> Moments:
    """The :class:`sigprop.Moments` of a zero-mean Alekseev state (q, p): mean 0, var q, corr p/q (Assumption 2.1,
    Eq. 4). Raises ``ValueError`` for q ≤ 0 or |p| > q. ``corr_hidden`` is 0 (features uncorrelated, Eq. 4)."""
    q, p = check_qp(q, p)
    return Moments(mean=0.0 * q, var=_out(q), corr=_out(np.clip(p / q, -1.0, 1.0)))
