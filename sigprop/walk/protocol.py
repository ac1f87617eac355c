"""The walker protocol: what a component declares about its moment rules.

sigprop's one idea is that the theory walks the model's own module tree with statistics instead of tensors
(ARCHITECTURE.md). The walker (:mod:`sigprop.walk.walker`) reads nothing about a module but its declaration: the
class attribute ``rules``, a :class:`Rules`. There are two kinds of component:

* a **leaf** has moment rules of its own: ``forward_moments(m, **context) -> Moments`` and
  ``backward_moments(g, m_in, **context) -> GradMoments`` (the exchangeable state), and, if it mixes tokens, a
  token-resolved rule ``gram_forward`` / ``gram_backward`` (``gram=True``). A token-wise leaf needs no Gram rule: its
  exchangeable rule is applied to every token pair (:mod:`sigprop.theory.resolved`);
* a **composite** (``composite=True``) has no rules of its own: its theory is its children's, composed by its
  ``walk_forward(walker, flow)`` / ``walk_backward(walker, gflow, tape)`` from the walker's primitives. A new kind
  of block is one such class; the walker does not change (ARCHITECTURE.md, "Adding a block"). A composite whose
  output is a sum of independent terms (a residual add, parallel branches) declares ``adds=True``: such sums are
  exact in every state (Gram matrices add), so it is always walked, where a chain of token-wise rules is applied
  whole by the token-resolved state (its composed rule pair by pair).

What else a leaf declares:

* ``context``: the keywords its moment rules take from the sweep's context (``L``, ``attention_heads``,
  ``attention_seed``, ``memory_moments``, ``L_memory``); the walker passes those and no others;
* ``inputs``: the keywords its ``forward`` takes besides the tensor (``key_padding_mask``, ``memory``,
  ``memory_padding_mask``); a composite passes each child only what it declares (:func:`forward_inputs`);
* ``mixes_tokens``: its output at one token depends on other tokens (attention);
* ``fixes_length``: its output rows have a fixed length, |x|² = d·var (LayerNorm, RMSNorm at initialisation), which
  the token-resolved attention rule exploits;
* ``postnorm``: it has rules for the Post-LN wiring Norm(λx + βf(x)) with x itself this norm's output,
  ``forward_moments_postnorm(skip, branch, λ, β)`` and ``backward_moments_postnorm(g, skip, branch, λ, β,
  skip_fraction=φ)``: the walker uses them when a residual add whose skip input left such a norm comes right before;
* ``memory``: it reads an encoder's output (cross-attention) and sends gradient back to it,
  ``memory_backward_moments(g, m_in, **context)``;
* ``sampled``: its rule may be a Monte Carlo one; it names the rule it used in ``rule_used``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from torch import nn

from ..core.moments import GradMoments, Moments

__all__ = ["Rules", "rules_of", "forward_inputs", "mixes_tokens", "TOKEN_WISE", "COMPOSITE", "SUM", "Leaf",
           "PostNormLeaf", "MemoryLeaf", "GramLeaf"]

_Value = TypeVar("_Value")


@dataclass(frozen=True)
class Rules:
    """A component's declaration to the walker (module docstring)."""

    composite: bool = False
    adds: bool = False
    context: frozenset[str] = frozenset()
    inputs: frozenset[str] = frozenset()
    mixes_tokens: bool = False
    gram: bool = False
    fixes_length: bool = False
    postnorm: bool = False
    memory: bool = False
    sampled: bool = False


#: A token-wise leaf whose rules need no context: linear layers, dropout, activations, DyT/Derf.
TOKEN_WISE = Rules()
#: A composite: its theory is its children's.
COMPOSITE = Rules(composite=True)
#: A composite whose output is a sum of independent terms: a residual add, parallel branches.
SUM = Rules(composite=True, adds=True)


class Leaf(Protocol):
    """A leaf's moment rules as the exchangeable state calls them (module docstring): each takes the keywords of its
    declared ``context`` and no others, so the signatures differ from leaf to leaf."""

    forward_moments: Callable[..., Moments]
    backward_moments: Callable[..., GradMoments]


class PostNormLeaf(Leaf, Protocol):
    """A norm that declares ``postnorm``: its rules for Norm(λx + βf(x)) with x itself this norm's output."""

    #: Its width: the rules' hidden units.
    d: int
    forward_moments_postnorm: Callable[..., Moments]
    backward_moments_postnorm: Callable[..., GradMoments]


class MemoryLeaf(Leaf, Protocol):
    """A leaf that declares ``memory``: the gradient it sends back to the encoder's output it reads."""

    memory_backward_moments: Callable[..., GradMoments]


class GramLeaf(Leaf, Protocol):
    """A token mixer that declares ``gram``: its token-resolved rules on Gram matrices."""

    gram_forward: Callable[..., Any]
    gram_backward: Callable[..., Any]


def rules_of(module: nn.Module) -> Rules:
    """``module``'s declaration; ``TypeError`` naming its class if it has none (a module sigprop has no rules for)."""
    rules = getattr(type(module), "rules", None)
    if not isinstance(rules, Rules):
        raise TypeError(f"{type(module).__name__} declares no moment rules (a class attribute rules = "
                        "sigprop.walk.protocol.Rules(...)); sigprop's theory walks only modules that do")
    return rules


def forward_inputs(module: nn.Module, context: dict[str, _Value]) -> dict[str, _Value]:
    """The keywords of ``context`` that ``module.forward`` takes: all of them for a composite (it passes them on,
    child by child), the declared ``inputs`` for a leaf, none for a module without a declaration."""
    rules = getattr(type(module), "rules", None)
    if not context or not isinstance(rules, Rules):
        return {}
    if rules.composite:
        return context
    return {k: v for k, v in context.items() if k in rules.inputs}


def mixes_tokens(module: nn.Module) -> bool:
    """Whether any leaf under ``module`` (itself included) mixes tokens."""
    rules = rules_of(module)
    if not rules.composite:
        return rules.mixes_tokens
    return any(mixes_tokens(child) for child in module.children())
