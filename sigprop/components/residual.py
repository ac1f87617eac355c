"""The residual add y = λ·x + β·f(x): module and moment rules (Kedia et al. Sec. 3.5, App. E; DeepScaleLM's λ, β)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..core.gaussian import clip_corr
from ..core.moments import GradMoments, Moments
from ..core.validate import check_range
from .sequential import call_rule

__all__ = ["Residual", "residual_forward", "residual_backward"]


def _scale(v, name):
    return check_range(v, name, lo=0.0, allowed="[0, inf)")


def residual_forward(skip: Moments, branch: Moments, lam=1.0, beta=1.0) -> Moments:
    """Moments of y = λ x + β f where x has moments ``skip`` and f = branch(x) has moments ``branch``.

    μ_y = λμ_x + βμ_f, σ²_y = λ²σ²_x + β²σ²_f, Cov^l_y = λ² r_x σ²_x + β² r_f σ²_f (and likewise along hidden units),
    Assumes: the branch output is uncorrelated with its input, element by element and across tokens. At
    initialisation this holds in expectation over the weights whenever the branch ends in a zero-mean random linear
    layer (every transformer block does), whatever the input mean (App. E's independence of the residual streams).
    """
    lam, beta = _scale(lam, "lambda"), _scale(beta, "beta")
    mean = lam * skip.mean + beta * branch.mean
    var = lam**2 * skip.var + beta**2 * branch.var
    cov = lam**2 * skip.corr * skip.var + beta**2 * branch.corr * branch.var
    cov_h = lam**2 * skip.corr_hidden * skip.var + beta**2 * branch.corr_hidden * branch.var
    return Moments(mean=mean, var=var, corr=clip_corr(cov / var), corr_hidden=clip_corr(cov_h / var))


def residual_backward(g: GradMoments, branch_grad: GradMoments, lam=1.0, beta=1.0) -> GradMoments:
    """Gradient moments at x of y = λx + βf(x): g_x = λ g + β J_fᵀ g.

    ``branch_grad`` are the moments of J_fᵀ g (the branch's backward rule applied to ``g`` itself; backward rules are
    linear in the gradient). σ²_gx = λ²σ²_g + β²σ²_branch, Cov_gx = λ² r_g σ²_g + β² r_branch σ²_branch.
    Assumes: the two paths are uncorrelated (J_f contains a zero-mean random weight matrix at initialisation).
    """
    lam, beta = _scale(lam, "lambda"), _scale(beta, "beta")
    var = lam**2 * g.var + beta**2 * branch_grad.var
    cov = lam**2 * g.corr * g.var + beta**2 * branch_grad.corr * branch_grad.var
    return GradMoments(var=var, corr=clip_corr(cov / var))


class Residual(nn.Module):
    """y = λ·x + β·branch(x). λ and β are fixed buffers, or β a learnable parameter (``learnable_beta``); both
    broadcast, so a sweep may give each configuration its own values along a leading dimension."""

    def __init__(self, branch: nn.Module, lam=1.0, beta=1.0, learnable_beta: bool = False):
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

    def forward(self, x: torch.Tensor, **context) -> torch.Tensor:
        """λ·x + β·branch(x); ``context`` keywords (padding mask, cross-attention memory) go to the branch
        where its ``forward`` declares them."""
        return self.lam * x + self.beta * call_rule(self.branch, x, **context)

    def _scales(self):
        return self.lam.detach().double().numpy(), self.beta.detach().double().numpy()

    def forward_moments(self, m: Moments, **context) -> Moments:
        return self.forward_moments_and_branch(m, **context)[0]

    def forward_moments_and_branch(self, m: Moments, **context) -> tuple[Moments, Moments]:
        """(moments of the output, moments of the branch output before scaling)."""
        lam, beta = self._scales()
        branch = call_rule(self.branch.forward_moments, m, **context)
        return residual_forward(m, branch, lam, beta), branch

    def backward_moments(self, g: GradMoments, m_in: Moments, **context) -> GradMoments:
        return self.backward_moments_and_branch(g, m_in, **context)[0]

    def backward_moments_and_branch(self, g: GradMoments, m_in: Moments, **context) -> tuple[GradMoments, GradMoments]:
        """(gradient moments at the input, gradient moments at the branch output, i.e. of β·g; None where β = 0,
        whose gradient there is exactly zero)."""
        lam, beta = self._scales()
        branch_g = call_rule(self.branch.backward_moments, g, m_in, **context)
        at_branch_out = GradMoments(var=beta**2 * g.var, corr=g.corr) if np.all(beta > 0) else None
        return residual_backward(g, branch_g, lam, beta), at_branch_out
