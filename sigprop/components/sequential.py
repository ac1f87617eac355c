"""Sequential composition whose moment rules walk the children: a block's theory is the composition of its
components' rules, never a restatement of its wiring (DESIGN.md, "theory walks the same module tree")."""

from __future__ import annotations

import functools
import inspect

from torch import nn

from ..core.moments import GradMoments, Moments

__all__ = ["Sequential", "call_rule"]


def call_rule(method, *args, **context):
    """Call a child's moment rule (or a module, through ``__call__`` so that its hooks run) with the positional
    ``args`` and only those ``context`` keywords (e.g. ``L``) that its signature (a module's ``forward``)
    declares, so that context-free components need not accept them."""
    if not context:
        return method(*args)
    declared = method.forward if isinstance(method, nn.Module) else method  # a module is called (hooks run)
    accepts_all, params = _declared_keywords(getattr(declared, "__func__", declared))
    if accepts_all:
        return method(*args, **context)
    return method(*args, **{k: v for k, v in context.items() if k in params})


@functools.lru_cache(maxsize=1024)
def _declared_keywords(func) -> tuple[bool, frozenset]:
    """(accepts **kwargs, declared parameter names) of a function; cached because a deep model calls it for every
    child on every forward."""
    params = inspect.signature(func).parameters
    return (any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), frozenset(params))


class Sequential(nn.Sequential):
    """``torch.nn.Sequential`` that also propagates moments through its children.

    ``forward_moments(m, **context)`` applies each child's rule in order. ``backward_moments(g, m_in, **context)``
    recomputes the forward moments at every child's input (closed forms: cheap) and applies the children's backward
    rules in reverse order, each with the moments of its own input.
    """

    def forward(self, x, **context):
        """Apply the children in order, passing each only the ``context`` keywords its ``forward`` declares
        (e.g. ``key_padding_mask`` for attention, ``memory`` for cross-attention)."""
        for child in self:
            x = call_rule(child, x, **context)
        return x

    def forward_moments(self, m: Moments, **context) -> Moments:
        for child in self:
            m = call_rule(child.forward_moments, m, **context)
        return m

    def input_moments(self, m: Moments, **context) -> list[Moments]:
        """The moments at the input of every child, in order."""
        out = []
        for child in self:
            out.append(m)
            m = call_rule(child.forward_moments, m, **context)
        return out

    def backward_moments(self, g: GradMoments, m_in: Moments, **context) -> GradMoments:
        for child, m in zip(reversed(self), reversed(self.input_moments(m_in, **context)), strict=True):
            g = call_rule(child.backward_moments, g, m, **context)
        return g
