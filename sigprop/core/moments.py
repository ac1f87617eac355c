"""The state that every moment rule transforms: :class:`Moments` (forward) and :class:`GradMoments` (backward).

A *site* is a point in the network where a tensor ``x`` of shape (batch, tokens, hidden) lives, together with its
gradient ``g = dLoss/dx``. All statistics are per element, averaged over batch, tokens and hidden units.

Notation (how the papers name these fields):

==========================  ===============================  ====================================================
field                       symbol in the papers             meaning
==========================  ===============================  ====================================================
``Moments.mean``            μ_x                              mean of one element
``Moments.var``             σ²_x                             variance of one element
``Moments.corr``            r^l_x (Kedia), p/q (Alekseev),   correlation between the same hidden unit at two
                            ρ (Noci)                         different tokens of one sequence
``Moments.corr_hidden``     r^d_x (Kedia)                    correlation between two hidden units of one token
``GradMoments.var``         σ²_g                             variance of one gradient element
``GradMoments.corr``        r^l_g (Kedia)                    correlation of the gradient at two tokens
==========================  ===============================  ====================================================

Alekseev's quantities map onto these as q = var + mean² and p = corr·var + mean².

Covariance model assumed by the rules (stated once here): the token and hidden-unit correlations are *separable*,
Cov(x_ti, x_sj) = σ² R_ts H_ij with R_ts = corr for t ≠ s and H_ij = corr_hidden for i ≠ j, and every element shares
the same mean. Gradients are zero-mean (a gradient mean is not tracked).

Fields may be Python floats or numpy arrays of one common shape: rules are written with numpy so that a whole sweep
of configurations is transformed in one call. Everything is stored as float64.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias

import numpy as np

from .validate import as_float64, check_range, clip_corr

__all__ = ["Moments", "GradMoments", "independent_sum", "independent_grad_sum", "Stat"]

#: A statistic as the rules take and give it: a float, or a float64 array with one entry per configuration of a sweep.
Stat: TypeAlias = float | np.ndarray


@dataclass(frozen=True)
class Moments:
    """Forward statistics of one site: mean, variance, token correlation and hidden-unit correlation.

    The state every forward moment rule maps to another (``*_forward(Moments, …) -> Moments``). The module docstring
    gives the notation (μ_x, σ²_x, r^l_x of Kedia et al. Sec. 2.3, r^d_x; Alekseev's q and p) and the separable
    covariance model the rules assume. Fields may be floats or numpy arrays of one common shape (a sweep of
    configurations in one call); all are stored as float64.

    Attributes:
        mean: μ_x, the mean of one element.
        var: σ²_x, the variance of one element (> 0).
        corr: r^l_x, the correlation of one hidden unit at two different tokens of a sequence, in [-1, 1].
        corr_hidden: r^d_x, the correlation of two hidden units of one token, in [-1, 1].

    Raises:
        ValueError: ``var <= 0``, a correlation outside [-1, 1], or a field that is not finite.

    Example:
        >>> import sigprop
        >>> m = sigprop.Moments(mean=0.5, var=2.0, corr=0.25)
        >>> float(m.second_moment), float(m.token_second_moment)  # q = σ² + μ², p = rσ² + μ²
        (2.25, 0.75)
        >>> sigprop.Moments(var=0.0)
        Traceback (most recent call last):
        ...
        ValueError: Moments.var must be in (0, inf) (got 0.0)
    """

    mean: float | np.ndarray = 0.0
    var: float | np.ndarray = 1.0
    corr: float | np.ndarray = 0.0
    corr_hidden: float | np.ndarray = field(default=0.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", as_float64(self.mean, "Moments.mean"))
        object.__setattr__(self, "var", check_range(self.var, "Moments.var", lo=0.0, lo_open=True,
                                                     allowed="(0, inf)"))
        object.__setattr__(self, "corr", check_range(self.corr, "Moments.corr", lo=-1.0, hi=1.0))
        object.__setattr__(self, "corr_hidden",
                           check_range(self.corr_hidden, "Moments.corr_hidden", lo=-1.0, hi=1.0))

    @property
    def second_moment(self) -> Stat:
        """E[x²] = σ² + μ² (Alekseev's q)."""
        return self.var + self.mean**2

    @property
    def token_second_moment(self) -> Stat:
        """E[x_t x_s] for t ≠ s: r σ² + μ² (Alekseev's p)."""
        return self.corr * self.var + self.mean**2

    def as_dict(self) -> dict[str, float | list[Any]]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True)
class GradMoments:
    """Backward statistics of one site: variance σ²_g and token correlation r^l_g of the (zero-mean) gradient.

    The state every backward moment rule maps to another (``*_backward(GradMoments, Moments, …) -> GradMoments``):
    the statistics of g = ∂Loss/∂x at a site (Kedia et al. Sec. 2.3's σ²_g and r^l_g). A gradient mean is not
    tracked. Fields may be floats or numpy arrays of one common shape; both are stored as float64.

    Attributes:
        var: σ²_g, the variance of one gradient element (> 0).
        corr: r^l_g, the correlation of the gradient of one hidden unit at two different tokens, in [-1, 1].

    Raises:
        ValueError: ``var <= 0``, ``corr`` outside [-1, 1], or a field that is not finite.

    Example:
        >>> import numpy as np, sigprop
        >>> g = sigprop.GradMoments(var=np.array([1.0, 4.0]), corr=0.1)  # two configurations at once
        >>> g.var.dtype, g.as_dict()
        (dtype('float64'), {'var': [1.0, 4.0], 'corr': 0.1})
    """

    var: float | np.ndarray = 1.0
    corr: float | np.ndarray = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "var", check_range(self.var, "GradMoments.var", lo=0.0, lo_open=True,
                                                     allowed="(0, inf)"))
        object.__setattr__(self, "corr", check_range(self.corr, "GradMoments.corr", lo=-1.0, hi=1.0))

    def as_dict(self) -> dict:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


def _jsonable(v: Stat) -> float | list[Any]:
    return v.tolist() if isinstance(v, np.ndarray) else float(v)


def independent_sum(terms: Iterable[tuple[Stat, Moments]]) -> Moments:
    """Moments of y = Σ_i c_i x_i for terms (c_i, Moments of x_i) that are uncorrelated with each other, element by
    element, across tokens and across hidden units: μ_y = Σ c_i μ_i, σ²_y = Σ c_i² σ²_i, and the token (hidden)
    covariance Σ c_i² r_i σ²_i, divided by σ²_y for the correlations. The residual add y = λx + βf(x)
    (:func:`~sigprop.components.residual.residual_forward`) is the sum of two such terms; so are parallel branches
    that each end in their own zero-mean random matrix."""
    terms = list(terms)
    mean = sum(c * t.mean for c, t in terms)
    var = sum(c**2 * t.var for c, t in terms)
    cov = sum(c**2 * t.corr * t.var for c, t in terms)
    cov_h = sum(c**2 * t.corr_hidden * t.var for c, t in terms)
    return Moments(mean=mean, var=var, corr=clip_corr(cov / var), corr_hidden=clip_corr(cov_h / var))


def independent_grad_sum(terms: Iterable[tuple[Stat, GradMoments]]) -> GradMoments:
    """Gradient moments of Σ_i c_i g_i for terms (c_i, GradMoments of g_i) with zero cross-covariance (each path
    through its own zero-mean random matrix): variances and token covariances add with weights c_i²."""
    terms = list(terms)
    var = sum(c**2 * t.var for c, t in terms)
    cov = sum(c**2 * t.corr * t.var for c, t in terms)
    return GradMoments(var=var, corr=clip_corr(cov / var))
