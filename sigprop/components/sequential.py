"""Sequential composition whose moment rules walk the children: a block's theory is the composition of its
components' rules, never a restatement of its wiring (DESIGN.md, "theory walks the same module tree")."""

from __future__ import annotations

import inspect

from torch import nn

from ..moments import GradMoments, Moments

__all__ = ["Sequential", "call_rule"]


def call_rule(method, *args, **context):
    """Call a child's moment rule with the positional ``args`` and only those ``context`` keywords (e.g.
    ``seq_len``) that its signature declares, so that context-free components need not accept them."""
    params = inspect.signature(method).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return method(*args, **context)
    return method(*args, **{k: v for k, v in context.items() if k in params})


class Sequential(nn.Sequential):
    """``torch.nn.Sequential`` that also propagates moments through its children.

    ``forward_moments(m, **context)`` applies each child's rule in order. ``backward_moments(g, m_in, **context)``
    recomputes the forward moments at every child's input (closed forms: cheap) and applies the children's backward
    rules in reverse order, each with the moments of its own input.
    """

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
