"""Sequential composition: a block's theory is its children's rules in order, walked by the one walker
(:mod:`sigprop.walk.walker`), never a restatement of its wiring (ARCHITECTURE.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..core.moments import GradMoments, Moments
from ..walk.exchangeable import backward_moments, forward_moments
from ..walk.protocol import COMPOSITE, forward_inputs
from ..walk.state import Forward, Gradient
from ..walk.walker import Flow, GradFlow, Tape, Walker

__all__ = ["Sequential"]


class Sequential(nn.Sequential):
    """``torch.nn.Sequential`` whose moment rules are its children's, composed in order (a composite of
    :mod:`sigprop.walk.protocol`).

    ``forward_moments(m, **context)`` and ``backward_moments(g, m_in, **context)`` walk the children with the
    exchangeable state; each child's rules get only the ``context`` keywords it declares (e.g. ``L`` for attention).
    """

    rules = COMPOSITE

    def forward(self, x: torch.Tensor, **context: Any) -> torch.Tensor:  # type: ignore[override]  # x, not input
        """Apply the children in order, passing each only the ``context`` keywords its ``forward`` declares
        (e.g. ``key_padding_mask`` for attention, ``memory`` for cross-attention)."""
        for child in self:
            x = child(x, **forward_inputs(child, context))
        return x

    def walk_forward(self, walker: Walker[Forward, Gradient],
                     flow: Flow[Forward]) -> tuple[Flow[Forward], list[Tape[Forward]]]:
        tapes = []
        for child in self:
            flow, tape = walker.forward(child, flow)
            tapes.append(tape)
        return flow, tapes

    def walk_backward(self, walker: Walker[Forward, Gradient], gflow: GradFlow[Gradient],
                      tapes: list[Tape[Forward]]) -> GradFlow[Gradient]:
        for tape in reversed(tapes):
            gflow = walker.backward(tape.module, gflow, tape)
        return gflow

    def forward_moments(self, m: Moments, **context: Any) -> Moments:
        return forward_moments(self, m, **context)

    def backward_moments(self, g: GradMoments, m_in: Moments, **context: Any) -> GradMoments:
        return backward_moments(self, g, m_in, **context)
