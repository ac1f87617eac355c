"""Linear layer: the module and its moment rules (Kedia et al. App. A.2, Tables 15–20 row "FFN (d1.d2)")."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import TOKEN_WISE

__all__ = ["Linear", "linear_forward", "linear_backward", "linear_log_gain_variance"]


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


def linear_log_gain_variance(n_out: Stat, width: Stat, corr: Stat, sequences: Stat, length: Stat) -> Stat:
    """The seed-to-seed variance of the log gain of a random linear map on one batch: Var_W[log Q] with
    Q = Σ_t |W x_t|², W ∈ R^{n_out × width} with i.i.d. N(0, σ²_w) entries, and x_1 … x_N (N = ``sequences`` ×
    ``length`` rows of dimension ``width``) the batch's rows, held fixed while W is redrawn. Forward, n_out is the
    layer's output width; backward (g_x = Wᵀ g_y), the map is Wᵀ and n_out is the layer's *input* width.

    Derivation. With S = Σ_t x_t x_tᵀ and w_i the rows of W, Q = Σ_i w_iᵀ S w_i: a sum of n_out independent
    Gaussian quadratic forms, E_W Q = n_out σ²_w tr S and Var_W Q = 2 n_out σ⁴_w tr(S²), so to first order in the
    fluctuation (delta method) Var_W[log Q] = 2 tr(S²) / (n_out (tr S)²) — 2/n_out over the effective rank of the
    rows, (tr S)²/tr(S²) (the χ²-type factor of Hanin & Nica 2019, whose products give log-normal gains).

    The rows' ratio is then taken in expectation over Gaussian rows with the exchangeable state's moments: zero
    mean, variance σ², correlation ρ ≥ 0 between two tokens of one sequence (a shared vector c_b per sequence,
    x_t = σ(√ρ c_b + √(1 − ρ) e_t)), independent across sequences (Kedia et al. Sec. 2.3's r^l, a correlation
    within a sequence). With tr(S²) = Σ_{t,t'} (x_t·x_t')² and d = ``width``:

    * t = t': E|x|⁴ = σ⁴ (d² + 2d);
    * t ≠ t' in one sequence: σ⁴ [ρ² (d² + 2d) + 2ρ(1 − ρ) d + (1 − ρ)² d];
    * t, t' in different sequences: σ⁴ d;

    and E[(tr S)²] = σ⁴ [N² d² + 2d (N + B L (L − 1) ρ²)] (Var tr S = 2d Σ_{t,t'} ρ_{tt'}²). The ratio of these two
    expectations stands for E[tr(S²)/(tr S)²]; it is exact at ρ = 1 with one sequence (Q/E Q is then χ²_{n_out} /
    n_out) and its error is O(1/d) relative elsewhere. A negative ρ is taken as 0.

    For large N and d the three terms are 1/N, 1/d and ρ²/B: a batch whose tokens share a direction within each
    sequence acts like B vectors, and its log gain varies like 2ρ²/(B n_out). Rows that share one direction across
    the whole batch are the case of one sequence of N tokens (``sequences=1``, ``length=N``).

    Args:
        n_out: the output dimension of the map (≥ 1).
        width: the rows' dimension d (≥ 1).
        corr: the rows' token correlation within a sequence, in [−1, 1].
        sequences: B, the batch's sequences (≥ 1).
        length: L, tokens per sequence (≥ 1).

    Returns:
        Var_W[log Q] (an array for array inputs).

    Raises:
        ValueError: a dimension below 1 or a correlation outside [−1, 1].

    Example:
        >>> from sigprop.components.linear import linear_log_gain_variance
        >>> v = linear_log_gain_variance(n_out=128, width=128, corr=1.0, sequences=1, length=64)
        >>> round(float(v) * 128 / 2, 12)  # one shared direction: Q is σ²|c|²·χ²_128, Var log Q ≈ 2/128
        1.0
    """
    n_out = _check_dims(n_out, "n_out")
    d = _check_dims(width, "width")
    B = _check_dims(sequences, "sequences")
    L = _check_dims(length, "length")
    rho = np.clip(check_range(corr, "corr", lo=-1.0, hi=1.0), 0.0, 1.0)
    N = B * L
    same = B * L * (L - 1.0)
    top = (N * (d * d + 2 * d) + same * (rho**2 * (d * d + 2 * d) + 2 * rho * (1 - rho) * d + (1 - rho) ** 2 * d)
           + N * (N - L) * d)
    bottom = N * N * d * d + 2 * d * (N + same * rho**2)
    return 2.0 * top / (n_out * bottom)


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
