"""Shaped ReLU: the module and its moment rules (Noci et al. 2023, Sec. 3, Eq. 4, Thm. 3.2, Eq. 6; App. B; App. D).

The shaped ReLU is a leaky ReLU whose two slopes are 1/√n away from the identity (Eq. 4):

    σ_s(x) = s₊ max(x, 0) + s₋ min(x, 0),      s± = 1 + c±/√n,

with n the width. Its normalising constant (Eq. 4, App. B: "the He initialization constant") is

    c⁻¹ = E σ_s(g)², g ~ N(0, 1),   i.e.   c = 2/(s₊² + s₋²).

Where c enters: Eq. 4 scales the *post* weight, f(X) = σ_s(X W_pre/√n) √(c/n) W_post; App. B (Eq. 22) scales the
*pre-activation* instead, f(X) = σ_s(√(c/n) X W_pre) W_post/√n. Both are the same map because σ_s is positively
homogeneous. This module applies σ_s alone by default (``normalize=False``, the map as Eq. 4 defines it) and
√c·σ_s(x) = σ_s(√c·x) with ``normalize=True`` — the form in which a zero-mean unit-variance Gaussian input keeps
E[out²] = 1, whatever the slopes.

Moment rules. Write σ_s(x) = s₋ x + Δ relu(x), Δ = s₊ − s₋. For x Gaussian with mean μ, variance σ², pair
correlation ρ and a = μ/σ (φ, Φ, Φ₂ as in :mod:`sigprop.components.relu`), all rules are *exact* for any mean:

    E σ_s(x)          = s₋ μ + Δ (μ Φ(a) + σ φ(a))
    Cov(σ_s x, σ_s y) = s₋² ρσ² + 2 s₋ Δ ρσ² Φ(a) + Δ² Cov(relu x, relu y)

(Stein's lemma gives Cov(x, relu y) = ρσ² Φ(a); Cov(relu x, relu y) is :func:`~sigprop.components.relu.
relu_cross_moment`). Backward, σ_s'(x) = s₋ + Δ 1{x > 0}:

    E σ_s'(x)²            = s₋² Φ(−a) + s₊² Φ(a)
    E σ_s'(x_t) σ_s'(x_s) = s₋² + 2 s₋ Δ Φ(a) + Δ² Φ₂(a, a; r).

Paper consistency (checked in the tests): at μ = 0, c·K₁(ρ) = c E[σ_s(g_t) σ_s(g_s)] = ρ + ν(ρ)/n + O(n^{-3/2}) with
ν(ρ) = (c₊ − c₋)²/(2π) (√(1−ρ²) − ρ arccos ρ) — Sec. 3, Eq. 6 (:func:`shaped_relu_nu`). App. B prints
(c₊ + c₋)²/(2π)(√(1−ρ²) + ρ arccos ρ) instead; that is a typo: it does not vanish at ρ = 1, where c K₁(1) = 1
exactly. Our exact closed form is c K₁(ρ) = ρ + c Δ²/(2π) (√(1−ρ²) − ρ arccos ρ), which gives Eq. 6 since
Δ² = (c₊ − c₋)²/n and c = 1 + O(n^{-1/2}).

"Recover" (App. D): s₋ is annealed linearly to 0 over the first ``anneal_steps`` optimiser steps (plain ReLU when
c₊ = 0); :meth:`ShapedReLU.anneal` sets it for a given step. "Learn" (App. D): s₋ is a learnable parameter.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import nn

from ..core.gaussian import bvn_cdf, norm_cdf, norm_pdf
from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import TOKEN_WISE
from .relu import check_standardized_mean, relu_cross_moment

__all__ = [
    "ShapedReLU",
    "SHAPED_MODES",
    "shaped_relu_slopes",
    "shaped_relu_constant",
    "shaped_relu_nu",
    "shaped_relu_forward",
    "shaped_relu_backward",
    "linear_anneal",
    "check_shaped_mode",
]

#: How the shaping parameters evolve during training (Noci et al. App. D): kept fixed, learned, or linearly
#: annealed to zero ("recover").
SHAPED_MODES = ("fixed", "learn", "recover")


def check_shaped_mode(mode: str, anneal_steps: int | None, name: str = "mode") -> None:
    """A shaped module's ``mode`` must be one of :data:`SHAPED_MODES`; "recover" needs ``anneal_steps`` (an integer
    >= 1) and the other modes refuse it (App. D's schedules)."""
    if mode not in SHAPED_MODES:
        raise ValueError(f"{name} must be one of {SHAPED_MODES} (got {mode!r})")
    if mode == "recover":
        if anneal_steps is None:
            raise ValueError(f"{name}='recover' needs anneal_steps (an integer >= 1)")
        check_range(anneal_steps, "anneal_steps", lo=1.0, allowed="integers >= 1")
    elif anneal_steps is not None:
        raise ValueError(f"anneal_steps applies to {name}='recover' only (got {name}={mode!r})")


def linear_anneal(value0: Stat, step: Stat, steps: Stat) -> Stat:
    """The "recover" schedule of Noci et al. App. D: value0 · max(0, 1 − step/steps), reaching 0 at step = steps.

    ``step`` ≥ 0 (an optimiser step count), ``steps`` ≥ 1. Raises ``ValueError`` otherwise.
    """
    step = check_range(step, "anneal step", lo=0.0, allowed="[0, inf)")
    steps = check_range(steps, "anneal_steps", lo=1.0, allowed="[1, inf)")
    return value0 * np.maximum(0.0, 1.0 - np.asarray(step, dtype=np.float64) / steps)


def shaped_relu_slopes(n: Stat, c_plus: Stat = 0.0, c_minus: Stat = -1.0) -> tuple[Stat, Stat]:
    """Slopes s± = 1 + c±/√n of the shaped ReLU at width n (Noci et al. Eq. 4). Defaults c₊ = 0, c₋ = −1 are
    App. D's choice s₋ = 1 − 1/√n (and Fig. 3's). Raises ``ValueError`` unless n ≥ 1."""
    n = check_range(n, "width n", lo=1.0, allowed="[1, inf)")
    return 1.0 + np.asarray(c_plus, dtype=np.float64) / np.sqrt(n), 1.0 + np.asarray(c_minus, np.float64) / np.sqrt(n)


def _check_slopes(s_plus: Stat, s_minus: Stat) -> tuple[Stat, Stat]:
    s_plus = check_range(s_plus, "s_plus")
    s_minus = check_range(s_minus, "s_minus")
    if np.any((np.asarray(s_plus) == 0.0) & (np.asarray(s_minus) == 0.0)):
        raise ValueError("s_plus and s_minus must not both be 0 (the activation would be identically zero)")
    return s_plus, s_minus


def shaped_relu_constant(s_plus: Stat, s_minus: Stat) -> Stat:
    """The normalising constant c of Noci et al. Eq. 4 / App. B: c⁻¹ = E σ_s(g)², g ~ N(0,1), i.e.
    c = 2/(s₊² + s₋²) (E relu(g)² = E min(g,0)² = 1/2). c = 1 at s₊ = s₋ = 1, c = 2 for the plain ReLU."""
    s_plus, s_minus = _check_slopes(s_plus, s_minus)
    return 2.0 / (s_plus**2 + s_minus**2)


def shaped_relu_nu(rho: Stat, c_plus: Stat, c_minus: Stat) -> Stat:
    """ν(ρ) = (c₊ − c₋)²/(2π) (√(1−ρ²) − ρ arccos ρ) (Noci et al. Sec. 3, Eq. 6; see the module docstring for the
    typo in App. B): the O(1/n) drift of the correlation through one shaped-ReLU layer, c K₁(ρ) = ρ + ν(ρ)/n + ..."""
    rho = check_range(rho, "rho", lo=-1.0, hi=1.0)
    dc = np.asarray(c_plus, dtype=np.float64) - np.asarray(c_minus, dtype=np.float64)
    return dc**2 / (2.0 * np.pi) * (np.sqrt(np.clip(1.0 - rho**2, 0.0, None)) - rho * np.arccos(rho))


def _check_domain(a: Stat, s_plus: Stat, s_minus: Stat) -> None:
    """Where one slope is zero the rule is a scaled ReLU, with ReLU's float64 limit on the standardised mean."""
    a = np.asarray(a, dtype=np.float64)
    sp, sm = np.broadcast_arrays(np.asarray(s_plus), np.asarray(s_minus))
    a = np.broadcast_to(a, np.broadcast_shapes(a.shape, sp.shape))
    sp, sm = np.broadcast_to(sp, a.shape), np.broadcast_to(sm, a.shape)
    check_standardized_mean(np.where(sm == 0.0, a, 0.0), "shaped relu input mean/std μ/σ (s_minus = 0)")
    check_standardized_mean(np.where(sp == 0.0, -a, 0.0), "−(shaped relu input mean/std) −μ/σ (s_plus = 0)")


def _cross(mean: Stat, var: Stat, rho: Stat, a: Stat, s_plus: Stat, s_minus: Stat) -> Stat:
    """Cov(σ_s x, σ_s y) for a bivariate normal pair with common mean and variance and correlation ρ."""
    delta = s_plus - s_minus
    return (s_minus**2 * rho * var + 2.0 * s_minus * delta * rho * var * norm_cdf(a)
            + delta**2 * relu_cross_moment(mean, var, rho))


def shaped_relu_forward(m: Moments, s_plus: Stat, s_minus: Stat, normalize: bool = False) -> Moments:
    """Moments of σ_s(x) = s₊ max(x,0) + s₋ min(x,0) (times √c if ``normalize``) for Gaussian x (Noci et al. Eq. 4).

    Exact for any input mean (module docstring):
        μ_out  = s₋ μ + Δ (μ Φ(a) + σ φ(a)),           Δ = s₊ − s₋, a = μ/σ,
        σ²_out = s₋² σ² + 2 s₋ Δ σ² Φ(a) + Δ² Var(relu x),
        r_out  = Cov(σ_s x_t, σ_s x_s)/σ²_out at ρ = r^l, r^d_out likewise at ρ = r^d;
    ``normalize`` multiplies the mean by √c and the variance by c = 2/(s₊² + s₋²) (correlations unchanged).
    Assumes: Gaussian input with separable correlations (:mod:`sigprop.core.moments`). Raises ``ValueError`` if both
    slopes are 0, or if one slope is 0 and the input lies beyond ReLU's float64 limit (|μ/σ| > 8 on the dead side).
    """
    s_plus, s_minus = _check_slopes(s_plus, s_minus)
    sigma = np.sqrt(m.var)
    a = m.mean / sigma
    _check_domain(a, s_plus, s_minus)
    delta = s_plus - s_minus
    mean = s_minus * m.mean + delta * (m.mean * norm_cdf(a) + sigma * norm_pdf(a))
    var = _cross(m.mean, m.var, 1.0, a, s_plus, s_minus)
    corr = _cross(m.mean, m.var, m.corr, a, s_plus, s_minus) / var
    corr_h = _cross(m.mean, m.var, m.corr_hidden, a, s_plus, s_minus) / var
    if normalize:
        c = shaped_relu_constant(s_plus, s_minus)
        mean, var = np.sqrt(c) * mean, c * var
    return Moments(mean=mean, var=var, corr=clip_corr(corr), corr_hidden=clip_corr(corr_h))


def shaped_relu_backward(g: GradMoments, m_in: Moments, s_plus: Stat, s_minus: Stat,
                         normalize: bool = False) -> GradMoments:
    """Gradient moments through σ_s: g_in = σ_s'(x) g_out with σ_s'(x) = s₋ + Δ 1{x > 0} (exact, any input mean).

        σ²_gin = (s₋² Φ(−a) + s₊² Φ(a)) σ²_gout,
        r_gin  = (s₋² + 2 s₋ Δ Φ(a) + Δ² Φ₂(a, a; r)) / (s₋² Φ(−a) + s₊² Φ(a)) · r_gout,
    with a = μ/σ and r = r^l of the input; ``normalize`` multiplies the variance by c.
    Assumes: Gaussian input; output gradient zero-mean and independent of the input (as :func:`relu_backward`).
    """
    s_plus, s_minus = _check_slopes(s_plus, s_minus)
    a = m_in.mean / np.sqrt(m_in.var)
    _check_domain(a, s_plus, s_minus)
    delta = s_plus - s_minus
    p = norm_cdf(a)
    second = s_minus**2 * norm_cdf(-a) + s_plus**2 * p
    joint = s_minus**2 + 2.0 * s_minus * delta * p + delta**2 * bvn_cdf(a, a, m_in.corr)
    var = second * g.var
    if normalize:
        var = shaped_relu_constant(s_plus, s_minus) * var
    return GradMoments(var=var, corr=clip_corr(joint / second * g.corr))


class ShapedReLU(nn.Module):
    """σ_s(x) = s₊ max(x,0) + s₋ min(x,0), s± = 1 + c±/√n (Noci et al. Eq. 4), elementwise; √c·σ_s with
    ``normalize=True`` (c = :func:`shaped_relu_constant` of the *current* slopes).

    ``n`` is the width that sets the slopes (the residual stream's width in Eq. 4; App. D uses the model width
    n = 768 for an FFN of width 3072). ``mode`` (:data:`SHAPED_MODES`):

    * ``"fixed"``: s± are buffers;
    * ``"learn"``: s₋ is an ``nn.Parameter`` (App. D "Learn"; s₊ stays a buffer);
    * ``"recover"``: s₋ is a buffer that :meth:`anneal` sets to s₋⁰·max(0, 1 − step/anneal_steps) (App. D
      "Recover": call ``anneal(step)`` once per optimiser step; at step ≥ anneal_steps s₋ = 0, a ReLU when c₊ = 0).

    The moment rules read the current slopes (:func:`shaped_relu_forward`, :func:`shaped_relu_backward`).
    """

    rules = TOKEN_WISE
    s_plus: torch.Tensor
    s_minus: torch.Tensor

    def __init__(self, n: int, c_plus: float = 0.0, c_minus: float = -1.0, normalize: bool = False,
                 mode: str = "fixed", anneal_steps: int | None = None) -> None:
        super().__init__()
        check_range(n, "width n", lo=1.0, allowed="integers >= 1")
        check_range(c_plus, "c_plus")
        check_range(c_minus, "c_minus")
        check_shaped_mode(mode, anneal_steps)
        sp, sm = shaped_relu_slopes(n, c_plus, c_minus)
        _check_slopes(sp, sm)
        self.n, self.c_plus, self.c_minus = int(n), float(c_plus), float(c_minus)
        self.normalize, self.mode, self.anneal_steps = bool(normalize), mode, anneal_steps
        self.s_minus_init = float(sm)
        self.register_buffer("s_plus", torch.tensor(float(sp)))
        if mode == "learn":
            self.s_minus = nn.Parameter(torch.tensor(float(sm)))
        else:
            self.register_buffer("s_minus", torch.tensor(float(sm)))

    @torch.no_grad()
    def anneal(self, step: int) -> float:
        """Set s₋ for optimiser step ``step`` on the "recover" schedule (:func:`linear_anneal`) and return it.
        Raises ``ValueError`` unless ``mode="recover"``."""
        if self.mode != "recover":
            raise ValueError(f"anneal() needs mode='recover' (got mode={self.mode!r})")
        value = float(linear_anneal(self.s_minus_init, step, cast(int, self.anneal_steps)))  # set in "recover"
        self.s_minus.fill_(value)
        return value

    def _slopes(self) -> tuple[float, float]:
        return float(self.s_plus.detach()), float(self.s_minus.detach())

    def constant(self) -> float:
        """c = 2/(s₊² + s₋²) at the current slopes."""
        return float(shaped_relu_constant(*self._slopes()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.s_plus.to(x.dtype) * torch.relu(x) + self.s_minus.to(x.dtype) * torch.clamp(x, max=0.0)
        if self.normalize:
            y = y * torch.rsqrt((self.s_plus.to(x.dtype) ** 2 + self.s_minus.to(x.dtype) ** 2) / 2.0)
        return y

    def forward_moments(self, m: Moments) -> Moments:
        return shaped_relu_forward(m, *self._slopes(), normalize=self.normalize)

    def backward_moments(self, g: GradMoments, m_in: Moments) -> GradMoments:
        return shaped_relu_backward(g, m_in, *self._slopes(), normalize=self.normalize)

    def extra_repr(self) -> str:
        sp, sm = self._slopes()
        return f"n={self.n}, s_plus={sp:.6g}, s_minus={sm:.6g}, normalize={self.normalize}, mode={self.mode!r}"

