"""The walker: one walk of a module tree with statistics instead of tensors, generic over the state.

A *state* is what flows: the exchangeable :class:`~sigprop.core.moments.Moments` (one correlation for every token
pair; :class:`~sigprop.walk.exchangeable.ExchangeableState`) or each sequence's token Gram matrix
(:class:`~sigprop.theory.resolved.GramState`). The state object says how a leaf's rule acts on it, how independent
terms add, and how a Post-LN norm's rule reads a residual add's parts; the walker says in which order, and it knows
nothing about any component but its declaration (:mod:`sigprop.walk.protocol`).

Forward: :meth:`Walker.forward` takes a :class:`Flow` (the state, the declaration of the module that produced it,
and, right after a residual add whose skip input left a norm with a post-norm rule, that add's parts) and returns the
module's output flow and a :class:`Tape` of what the backward walk needs. A leaf applies its rule; a composite
composes its children through its own ``walk_forward``; a norm with a post-norm rule takes the offered parts.

Backward: :meth:`Walker.backward` walks the tape in reverse with a :class:`GradFlow` (the gradient state, the
factor of variance by which the true gradient exceeds it — β² inside a residual branch, whose rules are linear in
the gradient — and the share of the gradient that came down the skip path of the residual add just walked, which
a Post-LN norm's backward rule reads).

Sites: the walker records the state at the output of every module in ``sites`` ({id(module): (layer, site)}) going
forward, and the gradient arriving there going backward (:meth:`Walker.record`), pooled by the state's ``pool``.
A leaf that reads an encoder's output (``memory``) adds the gradient it sends there to :attr:`Walker.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, cast

from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from .protocol import Rules, rules_of
from .state import Forward, Gradient, WalkState

__all__ = ["Flow", "GradFlow", "Tape", "Walker", "Composite", "Site"]

#: A measured site: (layer, site name), as a :class:`~sigprop.core.profile.Row` names it.
Site = tuple[int, str]


@dataclass(frozen=True)
class Flow(Generic[Forward]):
    """A forward state on its way (module docstring): ``value``, the ``source`` module's declaration (None at the
    embedding), and the ``offer`` (skip, branch, λ, β) of the residual add that produced it, for a following norm's
    post-norm rule."""

    value: Forward
    source: Rules | None = None
    offer: tuple[Forward, Forward, Stat, Stat] | None = None


@dataclass(frozen=True)
class GradFlow(Generic[Gradient]):
    """A gradient state on its way back (module docstring): ``value``, the variance ``scale`` of the true gradient
    relative to it, and the ``skip_fraction`` of the residual add just walked (None elsewhere)."""

    value: Gradient
    scale: Stat = 1.0
    skip_fraction: Stat | None = None


@dataclass
class Tape(Generic[Forward]):
    """What :meth:`Walker.backward` needs of one module's forward walk: its input flow, how it was walked ("leaf",
    "postnorm" or "composite") and, for a composite, what its ``walk_forward`` returned."""

    module: nn.Module
    flow: Flow[Forward]
    kind: Literal["leaf", "postnorm", "composite"]
    inner: Any = None


class Composite(Protocol):
    """A module that declares ``composite``: it walks its children itself, from the walker's primitives
    (:mod:`sigprop.walk.protocol`). ``walk_forward`` returns the output flow and what ``walk_backward`` will need of
    it (``inner``)."""

    def walk_forward(self, walker: Walker[Forward, Gradient], flow: Flow[Forward]) -> tuple[Flow[Forward], Any]:
        ...

    def walk_backward(self, walker: Walker[Forward, Gradient], gflow: GradFlow[Gradient],
                      inner: Any) -> GradFlow[Gradient]:
        ...


@dataclass
class Walker(Generic[Forward, Gradient]):
    """Walks module trees with ``state`` under the sweep's ``context`` (see :mod:`sigprop.walk.protocol` for the
    keywords), recording the states at ``sites`` into :attr:`rows` (forward) and :attr:`grad_rows` (backward)."""

    state: WalkState[Forward, Gradient]
    context: dict[str, Any] = field(default_factory=dict)
    sites: dict[int, Site] = field(default_factory=dict)
    rows: dict[Site, Moments | Forward] = field(default_factory=dict)
    grad_rows: dict[Site, GradMoments | Gradient | None] = field(default_factory=dict)
    memory: list[Gradient] = field(default_factory=list)

    def rule_context(self, module: nn.Module) -> dict[str, Any]:
        """The sweep context a leaf's rules take (its declared ``context``); all of it for a composite."""
        rules = rules_of(module)
        if rules.composite:
            return self.context
        return {k: v for k, v in self.context.items() if k in rules.context}

    def branch_output(self, residual: nn.Module, skip: Forward, value: Forward) -> Forward:
        """The branch output a residual add y = λ·x + β·f adds, given its branch's output state ``value`` (``skip``:
        the skip input's state x): ``value`` itself. A walker that recalibrates branches forward overrides it
        (``init="auto"``, :mod:`sigprop.model.auto_init`); the backward walk does not see the change."""
        return value

    def forward(self, module: nn.Module, flow: Flow[Forward]) -> tuple[Flow[Forward], Tape[Forward]]:
        """``module``'s output flow for the input ``flow``, and its tape (module docstring)."""
        rules = rules_of(module)
        if flow.offer is not None and rules.postnorm:
            out = Flow(self.state.postnorm_forward(module, *flow.offer), rules)
            tape = Tape(module, flow, "postnorm")
        elif rules.composite and not self.state.whole(module):
            out, inner = cast(Composite, module).walk_forward(self, Flow(flow.value, flow.source))
            tape = Tape(module, flow, "composite", inner)
        else:
            value = self.state.forward(module, flow.value, self.rule_context(module), flow.source)
            out, tape = Flow(value, rules), Tape(module, flow, "leaf")
        key = self.sites.get(id(module))
        if key is not None:
            self.rows[key] = self.state.pool(out.value)
        return out, tape

    def backward(self, module: nn.Module, gflow: GradFlow[Gradient], tape: Tape[Forward]) -> GradFlow[Gradient]:
        """The gradient flow at ``module``'s input for ``gflow`` at its output, from its forward ``tape``."""
        self.record(module, gflow)
        if tape.kind == "postnorm":
            offer = cast("tuple[Forward, Forward, Stat, Stat]", tape.flow.offer)  # a post-norm tape has its offer
            value = self.state.postnorm_backward(module, gflow.value, *offer, gflow.skip_fraction)
            return GradFlow(value, gflow.scale)
        if tape.kind == "composite":
            return cast(Composite, module).walk_backward(self, gflow, tape.inner)
        context = self.rule_context(module)
        x = tape.flow.value
        if rules_of(module).memory:
            sent = self.state.scale_grad(self.state.memory_backward(module, gflow.value, x, context), gflow.scale)
            if sent is not None:
                self.memory.append(sent)
        return GradFlow(self.state.backward(module, gflow.value, x, context, tape.flow.source), gflow.scale)

    def record(self, module: nn.Module, gflow: GradFlow[Gradient]) -> None:
        """The true gradient at ``module``'s output into :attr:`grad_rows` when it is a site (None where it is
        exactly zero: a branch scaled by β = 0)."""
        key = self.sites.get(id(module))
        if key is not None:
            g = self.state.scale_grad(gflow.value, gflow.scale)
            self.grad_rows[key] = None if g is None else self.state.pool_grad(g)
