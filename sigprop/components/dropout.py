"""Dropout: the module and its moment rules (Kedia et al. App. A.3, Tables 15–20)."""

from __future__ import annotations

import torch
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import TOKEN_WISE

__all__ = ["Dropout", "dropout_forward", "dropout_backward"]


def _check_p(p: Stat) -> Stat:
    return check_range(p, "dropout p", lo=0.0, hi=1.0, hi_open=True)


def dropout_forward(m: Moments, p: Stat) -> Moments:
    """Moments after inverted dropout x ↦ x·b/(1−p), b ~ Bernoulli(1−p) independent per element (App. A.3).

    μ_out = μ, σ²_out = (σ² + pμ²)/(1−p), r_out = r σ²(1−p)/(σ² + pμ²) for the token and the hidden correlation
    alike (masks are independent, so E[x_t x_s] is unchanged while E[x²] grows by 1/(1−p)).
    Exact for any input distribution with the given first two moments. Raises ``ValueError`` unless 0 ≤ p < 1.
    """
    p = _check_p(p)
    var = (m.var + p * m.mean**2) / (1.0 - p)
    shrink = m.var * (1.0 - p) / (m.var + p * m.mean**2)
    return Moments(mean=m.mean, var=var, corr=clip_corr(m.corr * shrink),
                   corr_hidden=clip_corr(m.corr_hidden * shrink))


def dropout_backward(g: GradMoments, p: Stat) -> GradMoments:
    """Gradient moments through dropout: the same mask scales the gradient, g_in = g·b/(1−p) (App. A.3).

    σ²_gin = σ²_g/(1−p) and r_gin = (1−p) r_g (zero-mean gradient). Exact.
    """
    p = _check_p(p)
    return GradMoments(var=g.var / (1.0 - p), corr=clip_corr(g.corr * (1.0 - p)))


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` that also transforms moments (:func:`dropout_forward`, :func:`dropout_backward`)."""

    rules = TOKEN_WISE

    def __init__(self, p: float = 0.0) -> None:
        _check_p(p)
        super().__init__(p=p)

    def forward_moments(self, m: Moments) -> Moments:
        return dropout_forward(m, self.p)

    def backward_moments(self, g: GradMoments, m_in: Moments | None = None) -> GradMoments:
        return dropout_backward(g, self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102 (inherited behaviour)
        return super().forward(x)
