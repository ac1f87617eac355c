"""Linear layer: the module and its moment rules (Kedia et al. App. A.2, Tables 15–20 row "FFN (d1.d2)")."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import TOKEN_WISE

__all__ = ["Linear", "linear_forward", "linear_backward"]


def _check_dims(d: Stat, name: str) -> Stat:
    d = check_range(d, name, lo=1.0, allowed="integers >= 1")
    return d


def linear_forward(m: Moments, d_in: Stat, weight_var: Stat, bias_var: Stat = 0.0) -> Moments:
    """Moments of y = xW + b with W_ij ~ (0, σ²_w) i.i.d. and b_j ~ (0, σ²_b), both independent of x (App. A.2).

    Over the weight ensemble: μ_y = 0,
    σ²_y = d_in σ²_w (σ²_x + μ²_x) + σ²_b,
    r_y  = (d_in σ²_w (r_x σ²_x + μ²_x) + σ²_b) / σ²_y   (the input mean and the bias are shared by all tokens),
    r^d_y = 0                                            (different output units use independent columns).
    Exact for any input distribution with these moments; the bias term extends the paper's bias-free layer.
    Assumes: weights independent of the input (true at initialisation).
    """
    d_in = _check_dims(d_in, "d_in")
    weight_var = check_range(weight_var, "weight_var", lo=0.0, lo_open=True, allowed="(0, inf)")
    bias_var = check_range(bias_var, "bias_var", lo=0.0)
    signal = d_in * weight_var
    var = signal * (m.var + m.mean**2) + bias_var
    cov = signal * (m.corr * m.var + m.mean**2) + bias_var
    zero = 0.0 * var
    return Moments(mean=zero, var=var, corr=clip_corr(cov / var), corr_hidden=zero)


def linear_backward(g: GradMoments, d_out: Stat, weight_var: Stat) -> GradMoments:
    """Gradient moments through y = xW: g_x = g_y Wᵀ (App. A.2).

    σ²_gx = d_out σ²_w σ²_gy and r_gx = r_gy (each input unit sums d_out independent terms; the token covariance
    is carried term by term). Exact when the output gradient is zero-mean and independent of W.
    """
    d_out = _check_dims(d_out, "d_out")
    weight_var = check_range(weight_var, "weight_var", lo=0.0, lo_open=True, allowed="(0, inf)")
    return GradMoments(var=d_out * weight_var * g.var, corr=g.corr)


class Linear(nn.Linear):
    """``torch.nn.Linear`` initialised N(0, weight_std²) (bias zero or N(0, bias_std²)) that transforms moments.

    The rules read the *declared* standard deviations, never the sampled weights. The default ``weight_std`` is
    Xavier-normal, √(2/(d_in + d_out)).
    """

    rules = TOKEN_WISE

    def __init__(self, d_in: int, d_out: int, bias: bool = False, weight_std: float | None = None,
                 bias_std: float = 0.0) -> None:
        _check_dims(d_in, "d_in")
        _check_dims(d_out, "d_out")
        self.weight_std = math.sqrt(2.0 / (d_in + d_out)) if weight_std is None else float(weight_std)
        self.bias_std = float(bias_std)
        check_range(self.weight_std, "weight_std", lo=0.0, lo_open=True, allowed="(0, inf)")
        check_range(self.bias_std, "bias_std", lo=0.0)
        super().__init__(d_in, d_out, bias=bias)

    def reset_parameters(self) -> None:
        if self.weight.is_meta:  # built on the meta device: the owner initialises after materialising
            return
        with torch.no_grad():
            self.weight.normal_(0.0, self.weight_std)
            if self.bias is not None:
                if self.bias_std > 0:
                    self.bias.normal_(0.0, self.bias_std)
                else:
                    self.bias.zero_()

    def forward_moments(self, m: Moments) -> Moments:
        bias_var = self.bias_std**2 if self.bias is not None else 0.0
        return linear_forward(m, self.in_features, self.weight_std**2, bias_var)

    def backward_moments(self, g: GradMoments, m_in: Moments | None = None) -> GradMoments:
        return linear_backward(g, self.out_features, self.weight_std**2)
