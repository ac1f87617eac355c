"""The walker's state: what a state object must do for :class:`~sigprop.walk.walker.Walker` to walk a module tree in it.

Two states satisfy :class:`WalkState`: the exchangeable one (:class:`~sigprop.walk.exchangeable.ExchangeableState`,
``Forward`` = :class:`~sigprop.core.moments.Moments`, ``Gradient`` = :class:`~sigprop.core.moments.GradMoments`) and
the token-resolved one (:class:`~sigprop.theory.resolved.GramState`, each sequence's token Gram matrix for both). The
walker says in which order a tree is walked; the state says what each step does to its values. ``module`` is always a
component with a declaration (:mod:`sigprop.walk.protocol`); ``context`` the keywords of the sweep's context that the
module's rules declare; ``source`` the declaration of the module that produced the forward value (None at the
embedding).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from .protocol import Rules

__all__ = ["WalkState", "Forward", "Gradient"]

#: The forward value a state carries from site to site.
Forward = TypeVar("Forward")
#: The gradient value a state carries back.
Gradient = TypeVar("Gradient")


@runtime_checkable
class WalkState(Protocol[Forward, Gradient]):
    """How the walker's steps act on a state's forward values (``Forward``) and gradients (``Gradient``)."""

    #: What the state is called in a prediction's meta ("exchangeable", "token-resolved").
    name: str
    #: Whether a sweep's backward walk draws a sampled rule's heads afresh (True) or reuses the forward's (False).
    fresh_backward_draws: bool
    #: Whether a sweep keeps each layer's tape from the forward walk to the backward one (True) or re-walks the
    #: layer's forward from its recorded input (False: tapes too large to keep for every layer).
    keeps_tapes: bool

    def whole(self, module: nn.Module) -> bool:
        """Whether the composite ``module`` is applied whole as a leaf (its composed exchangeable rule) instead of
        being walked child by child. Never true of a composite that adds independent terms (``adds``)."""
        ...

    def forward(self, module: nn.Module, x: Forward, context: dict[str, Any], source: Rules | None) -> Forward:
        """The leaf ``module``'s output for its input ``x``, by its rules under ``context``. Raises
        ``ValueError`` for an input outside the rules' domain, ``NotImplementedError`` where the state has no rule
        for the module."""
        ...

    def backward(self, module: nn.Module, g: Gradient, x: Forward, context: dict[str, Any],
                 source: Rules | None) -> Gradient:
        """The gradient at the leaf ``module``'s input for the gradient ``g`` at its output, its forward input being
        ``x``. Linear in ``g``: the walker scales gradients afterwards (:meth:`scale_grad`)."""
        ...

    def memory_backward(self, module: nn.Module, g: Gradient, x: Forward, context: dict[str, Any]) -> Gradient:
        """The gradient that a leaf declaring ``memory`` (cross-attention) sends to the encoder output it reads, for
        the gradient ``g`` at its output and its input ``x``; ``NotImplementedError`` where the state has none."""
        ...

    def add(self, terms: Iterable[tuple[Stat, Forward]]) -> Forward:
        """The forward value of Σ cᵢ xᵢ for terms (cᵢ, xᵢ) uncorrelated with each other (a residual add, parallel
        branches each ending in their own zero-mean random matrix)."""
        ...

    def add_grad(self, terms: Iterable[tuple[Stat, Gradient]]) -> Gradient:
        """The gradient Σ cᵢ gᵢ for terms (cᵢ, gᵢ) uncorrelated with each other (:meth:`add` for gradients)."""
        ...

    def postnorm_forward(self, norm: nn.Module, skip: Forward, branch: Forward, lam: Stat, beta: Stat) -> Forward:
        """The output of the norm declaring ``postnorm`` for Norm(λ·skip + β·branch), ``skip`` being itself this
        kind of norm's output (the Post-LN wiring)."""
        ...

    def postnorm_backward(self, norm: nn.Module, g: Gradient, skip: Forward, branch: Forward, lam: Stat, beta: Stat,
                          skip_fraction: Stat | None) -> Gradient:
        """The gradient at the residual add before a ``postnorm`` norm, for the gradient ``g`` at the norm's output;
        ``skip_fraction`` is what :meth:`skip_fraction` gave for the add above (None: no add above, read as 0)."""
        ...

    def skip_fraction(self, lam: Stat, g_out: Gradient, g_in: Gradient) -> Stat:
        """The share, in [0, 1], of the input gradient ``g_in`` of a residual add y = λx + βf that came down the skip
        path, from the gradient ``g_out`` at its output (per token pair where the state resolves them)."""
        ...

    def scale_grad(self, g: Gradient, factor: Stat) -> Gradient | None:
        """The gradient whose variance is ``factor`` times ``g``'s (the walker's deferred β² of a residual branch);
        None where that is exactly zero (a branch scaled by β = 0)."""
        ...

    def check_boundary(self, g: object, output: Forward) -> None:
        """Raise ``ValueError`` unless ``g`` is a gradient of this state that fits the forward ``output`` of the last
        layer (the backward walk's starting point)."""
        ...

    def pool(self, x: Forward) -> Moments | Forward:
        """What a site records of the forward value ``x``: its pooled :class:`Moments`, or ``x`` itself for a state
        asked to keep its values whole."""
        ...

    def pool_grad(self, g: Gradient) -> GradMoments | Gradient:
        """What a site records of the gradient ``g``: its pooled :class:`GradMoments`,
        or ``g`` itself (:meth:`pool`)."""
        ...
