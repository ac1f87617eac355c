"""The exchangeable state: one :class:`~sigprop.core.moments.Moments` for a site (every token pair the same
correlation; Kedia et al. Sec. 2.3), and its gradient's :class:`~sigprop.core.moments.GradMoments`. The state of
the component rules themselves: a composite's ``forward_moments`` / ``backward_moments`` walk it
(:func:`forward_moments`, :func:`backward_moments`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from torch import nn

from ..core.moments import GradMoments, Moments, Stat, independent_grad_sum, independent_sum
from .protocol import Leaf, MemoryLeaf, PostNormLeaf, Rules
from .walker import Flow, GradFlow, Walker

if TYPE_CHECKING:
    from .state import WalkState

__all__ = ["ExchangeableState", "EXCHANGEABLE", "forward_moments", "backward_moments"]


class ExchangeableState:
    """How the walker's steps act on :class:`Moments` (the contract of each step: :class:`~sigprop.walk.state.
    WalkState`)."""

    name = "exchangeable"
    #: The backward sweep reuses each layer's forward draws of a sampled rule (it needs the forward's attention).
    fresh_backward_draws = False
    #: Tapes are a few floats a module: the sweep keeps them between its forward and backward walks.
    keeps_tapes = True

    @staticmethod
    def whole(module: nn.Module) -> bool:
        """Composites are walked child by child."""
        return False

    @staticmethod
    def forward(module: nn.Module, x: Moments, context: dict[str, Any], source: Rules | None) -> Moments:
        return cast(Leaf, module).forward_moments(x, **context)

    @staticmethod
    def backward(module: nn.Module, g: GradMoments, x: Moments, context: dict[str, Any],
                 source: Rules | None) -> GradMoments:
        return cast(Leaf, module).backward_moments(g, x, **context)

    @staticmethod
    def memory_backward(module: nn.Module, g: GradMoments, x: Moments, context: dict[str, Any]) -> GradMoments:
        return cast(MemoryLeaf, module).memory_backward_moments(g, x, **context)

    @staticmethod
    def add(terms: Iterable[tuple[Stat, Moments]]) -> Moments:
        return independent_sum(terms)

    @staticmethod
    def add_grad(terms: Iterable[tuple[Stat, GradMoments]]) -> GradMoments:
        return independent_grad_sum(terms)

    @staticmethod
    def postnorm_forward(norm: nn.Module, skip: Moments, branch: Moments, lam: Stat, beta: Stat) -> Moments:
        return cast(PostNormLeaf, norm).forward_moments_postnorm(skip, branch, lam, beta)

    @staticmethod
    def postnorm_backward(norm: nn.Module, g: GradMoments, skip: Moments, branch: Moments, lam: Stat, beta: Stat,
                          skip_fraction: Stat | None) -> GradMoments:
        return cast(PostNormLeaf, norm).backward_moments_postnorm(
            g, skip, branch, lam, beta, skip_fraction=0.0 if skip_fraction is None else skip_fraction)

    @staticmethod
    def skip_fraction(lam: Stat, g_out: GradMoments, g_in: GradMoments) -> Stat:
        """The share λ²σ²_out/σ²_in of the input gradient's variance that came down the skip path (elementwise when
        the moments are arrays: a layer that mixes no tokens is walked whole, pair by pair, in the token-resolved
        state)."""
        fraction = np.clip(lam**2 * np.asarray(g_out.var) / np.asarray(g_in.var), 0.0, 1.0)
        return float(fraction) if np.ndim(fraction) == 0 else fraction

    @staticmethod
    def scale_grad(g: GradMoments, factor: Stat) -> GradMoments | None:
        """The gradient ``factor`` times ``g`` in variance; None where that is zero."""
        if isinstance(factor, float) and factor == 1.0:
            return g
        if not np.all(np.asarray(factor) > 0):
            return None
        return GradMoments(var=factor * g.var, corr=g.corr)

    @staticmethod
    def check_boundary(g: object, output: Moments) -> None:
        if not isinstance(g, GradMoments):
            raise ValueError(f"the gradient at the last layer's output must be a GradMoments (got {type(g).__name__})")

    @staticmethod
    def pool(x: Moments) -> Moments:
        return x

    @staticmethod
    def pool_grad(g: GradMoments) -> GradMoments:
        return g


EXCHANGEABLE = ExchangeableState()

if TYPE_CHECKING:  # mypy checks here that the exchangeable state is one the walker can walk
    _CHECKED: WalkState[Moments, GradMoments] = EXCHANGEABLE


def forward_moments(module: nn.Module, m: Moments, **context: Any) -> Moments:
    """Output moments of ``module`` (a component) for input moments ``m``, by the walker (a composite's rule)."""
    return Walker(EXCHANGEABLE, context).forward(module, Flow(m))[0].value


def backward_moments(module: nn.Module, g: GradMoments, m_in: Moments, **context: Any) -> GradMoments:
    """Input-gradient moments of ``module`` for gradient moments ``g`` at its output and input moments ``m_in``, by
    the walker (a composite's rule): the forward walk gives every child's input, the backward walk reverses it."""
    walker = Walker(EXCHANGEABLE, context)
    _, tape = walker.forward(module, Flow(m_in))
    return walker.backward(module, GradFlow(g), tape).value
