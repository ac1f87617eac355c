"""Parallel branches summed: y = Σ_i f_i(x), every branch reading the same input. In a residual,
``Residual(Parallel(AttentionBlock(d, H), FFNBlock(d)))`` is the parallel block of GPT-J, GPT-NeoX and PaLM,
x + Attn(Norm x) + FFN(Norm x) (each branch here with its own norm, as GPT-NeoX's; at initialisation the two norms
are the same function, so it is GPT-J's shared norm too).

Moment rules: each branch ends in its own zero-mean random matrix (W_O, W_2), so the branches' outputs are
uncorrelated with each other, element by element and across tokens, and so are the gradients they send back to the
shared input (each through its own independent weights): means, variances and covariances add
(:func:`~sigprop.core.moments.independent_sum`, :func:`~sigprop.core.moments.independent_grad_sum`), and in the
token-resolved state the Gram matrices add. A composite that adds (``SUM``): the walker walks each branch from the
same input and the state adds them; nothing else in sigprop knows this class (ARCHITECTURE.md, "Adding a block").

Assumes: every branch ends in a zero-mean random linear layer independent of the other branches' weights.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from ..core.moments import GradMoments, Moments
from ..walk.exchangeable import backward_moments, forward_moments
from ..walk.protocol import SUM, forward_inputs
from ..walk.state import Forward, Gradient
from ..walk.walker import Flow, GradFlow, Tape, Walker

__all__ = ["Parallel"]


class Parallel(nn.Module):
    """Branches (keyword arguments: name = module) applied to the same input and summed."""

    rules = SUM

    def __init__(self, **branches: nn.Module) -> None:
        super().__init__()
        if not branches:
            raise ValueError("Parallel needs at least one branch")
        for name, branch in branches.items():
            if not isinstance(branch, nn.Module):
                raise ValueError(f"branch {name!r} must be a torch.nn.Module (got {type(branch).__name__})")
            self.add_module(name, branch)

    def forward(self, x: torch.Tensor, **context: Any) -> torch.Tensor:
        return cast(torch.Tensor, sum(branch(x, **forward_inputs(branch, context)) for branch in self.children()))

    def walk_forward(self, walker: Walker[Forward, Gradient],
                     flow: Flow[Forward]) -> tuple[Flow[Forward], list[Tape[Forward]]]:
        walks = [walker.forward(branch, Flow(flow.value, flow.source)) for branch in self.children()]
        return Flow(walker.state.add([(1.0, out.value) for out, _ in walks]), self.rules), [t for _, t in walks]

    def walk_backward(self, walker: Walker[Forward, Gradient], gflow: GradFlow[Gradient],
                      tapes: list[Tape[Forward]]) -> GradFlow[Gradient]:
        grads = [walker.backward(branch, GradFlow(gflow.value, gflow.scale), tape)
                 for branch, tape in zip(self.children(), tapes, strict=True)]
        return GradFlow(walker.state.add_grad([(1.0, g.value) for g in grads]), gflow.scale)

    def forward_moments(self, m: Moments, **context: Any) -> Moments:
        return forward_moments(self, m, **context)

    def backward_moments(self, g: GradMoments, m_in: Moments, **context: Any) -> GradMoments:
        return backward_moments(self, g, m_in, **context)
