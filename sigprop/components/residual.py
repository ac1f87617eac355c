"""The residual add y = λ·x + β·f(x): module and moment rules (Kedia et al. Sec. 3.5, App. E; DeepScaleLM's λ, β)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..core.moments import GradMoments, Moments, Stat, independent_grad_sum, independent_sum
from ..core.validate import check_range
from ..walk.exchangeable import backward_moments, forward_moments
from ..walk.protocol import SUM, forward_inputs
from ..walk.state import Forward, Gradient
from ..walk.walker import Flow, GradFlow, Tape, Walker

__all__ = ["Residual", "residual_forward", "residual_backward"]


def _scale(v: Stat, name: str) -> Stat:
    return check_range(v, name, lo=0.0, allowed="[0, inf)")


def residual_forward(skip: Moments, branch: Moments, lam: Stat = 1.0, beta: Stat = 1.0) -> Moments:
    """Moments of y = λ x + β f where x has moments ``skip`` and f = branch(x) has moments ``branch``.

    μ_y = λμ_x + βμ_f, σ²_y = λ²σ²_x + β²σ²_f, Cov^l_y = λ² r_x σ²_x + β² r_f σ²_f (and likewise along hidden units),
    Assumes: the branch output is uncorrelated with its input, element by element and across tokens. At
    initialisation this holds in expectation over the weights whenever the branch ends in a zero-mean random linear
    layer (every transformer block does), whatever the input mean (App. E's independence of the residual streams).
    """
    return independent_sum([(_scale(lam, "lambda"), skip), (_scale(beta, "beta"), branch)])


def residual_backward(g: GradMoments, branch_grad: GradMoments, lam: Stat = 1.0, beta: Stat = 1.0) -> GradMoments:
    """Gradient moments at x of y = λx + βf(x): g_x = λ g + β J_fᵀ g.

    ``branch_grad`` are the moments of J_fᵀ g (the branch's backward rule applied to ``g`` itself; backward rules are
    linear in the gradient). σ²_gx = λ²σ²_g + β²σ²_branch, Cov_gx = λ² r_g σ²_g + β² r_branch σ²_branch.
    Assumes: the two paths are uncorrelated (J_f contains a zero-mean random weight matrix at initialisation).
    """
    return independent_grad_sum([(_scale(lam, "lambda"), g), (_scale(beta, "beta"), branch_grad)])


class Residual(nn.Module):
    """y = λ·x + β·branch(x). λ and β are fixed buffers, or β a learnable parameter (``learnable_beta``); both
    broadcast, so a sweep may give each configuration its own values along a leading dimension.

    A composite (:mod:`sigprop.walk.protocol`): its theory is its branch's, added to the skip path as independent
    terms by the walker's state (:func:`residual_forward` for the exchangeable state, λ²G + β²G_f for Gram
    matrices). The gradient at the branch output, the site the measurement records there, is β²σ²_g; the branch's
    rules are applied to the unscaled gradient (they are linear in it) and β² enters where the paths add, so β = 0
    stays exact. An add whose skip input left a norm with a post-norm rule offers its parts (x, f, λ, β) to a norm
    right after it (the Post-LN wiring, :func:`~sigprop.components.layernorm.layernorm_forward_postnorm`).
    """

    rules = SUM

    lam: torch.Tensor
    beta: torch.Tensor

    def __init__(self, branch: nn.Module, lam: Stat = 1.0, beta: Stat = 1.0, learnable_beta: bool = False) -> None:
        super().__init__()
        _scale(lam, "lambda")
        _scale(beta, "beta")
        self.branch = branch
        self.register_buffer("lam", torch.as_tensor(lam, dtype=torch.float32))
        beta_t = torch.as_tensor(beta, dtype=torch.float32)
        if learnable_beta:
            self.beta = nn.Parameter(beta_t)
        else:
            self.register_buffer("beta", beta_t)

    def set_learnable_beta(self, learnable: bool) -> None:
        """Make β a learnable parameter or a fixed buffer, keeping its value (an optimiser built before holds the
        old tensor: build it after).

        Args:
            learnable: whether β is to be learned.

        Example:
            >>> from torch import nn
            >>> block = Residual(nn.Identity(), beta=0.5)
            >>> block.set_learnable_beta(True)
            >>> [name for name, _ in block.named_parameters()], float(block.beta)
            (['beta'], 0.5)
        """
        if learnable == isinstance(self.beta, nn.Parameter):
            return
        value = self.beta.detach().clone()
        del self.beta
        if learnable:
            self.beta = nn.Parameter(value)
        else:
            self.register_buffer("beta", value)

    def forward(self, x: torch.Tensor, **context: Any) -> torch.Tensor:
        """λ·x + β·branch(x); ``context`` keywords (padding mask, cross-attention memory) go to the branch
        where its ``forward`` declares them."""
        return self.lam * x + self.beta * self.branch(x, **forward_inputs(self.branch, context))

    def scales(self) -> tuple[Stat, Stat]:
        """(λ, β) as the rules take them: floats, or float64 arrays over configurations."""
        lam, beta = (v.detach().double().cpu().numpy() for v in (self.lam, self.beta))
        return _scale(lam, "lambda"), _scale(beta, "beta")

    def walk_forward(self, walker: Walker[Forward, Gradient],
                     flow: Flow[Forward]) -> tuple[Flow[Forward], tuple[Tape[Forward], Stat, Stat]]:
        lam, beta = self.scales()
        branch, tape = walker.forward(self.branch, Flow(flow.value, flow.source))
        value = walker.branch_output(self, flow.value, branch.value)
        out = walker.state.add([(lam, flow.value), (beta, value)])
        postnorm = flow.source is not None and flow.source.postnorm
        return Flow(out, self.rules, (flow.value, value, lam, beta) if postnorm else None), (tape, lam, beta)

    def walk_backward(self, walker: Walker[Forward, Gradient], gflow: GradFlow[Gradient],
                      inner: tuple[Tape[Forward], Stat, Stat]) -> GradFlow[Gradient]:
        tape, lam, beta = inner
        branch = walker.backward(self.branch, GradFlow(gflow.value, gflow.scale * beta**2), tape)
        g_in = walker.state.add_grad([(lam, gflow.value), (beta, branch.value)])
        return GradFlow(g_in, gflow.scale, walker.state.skip_fraction(lam, gflow.value, g_in))

    def forward_moments(self, m: Moments, **context: Any) -> Moments:
        return forward_moments(self, m, **context)

    def backward_moments(self, g: GradMoments, m_in: Moments, **context: Any) -> GradMoments:
        return backward_moments(self, g, m_in, **context)
