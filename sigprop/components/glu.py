"""Gated linear units: the up-projection of a SwiGLU or GeGLU feed-forward block (Shazeer 2020; the FFN of
Llama-, Qwen- and Mistral-style decoders), the module and its moment rules.

    h = φ(x W_gate) ⊙ (x W_up),   W_gate, W_up ∈ R^{d_in × d_ff} with i.i.d. N(0, σ²_gate), N(0, σ²_up) entries,

φ = SiLU (a·sigmoid(a), "swiglu") or GELU ("geglu"); a block is then norm → GLU → Linear(d_ff, d) → dropout.

Forward rules (over the weight ensemble, input moments μ, σ², token correlation r). Per element the gate and the up
pre-activations a = x·w_gate, b = x·w_up are independent zero-mean Gaussians (different matrices) of variances
s_a = d_in σ²_gate (σ² + μ²), s_b = d_in σ²_up (σ² + μ²) and token correlation ρ = (rσ² + μ²)/(σ² + μ²) each
(:func:`~sigprop.components.linear.linear_forward`). With b independent of a and zero-mean:

    E h = 0,   E h² = E[φ(a)²]·s_b,   E[h_t h_s] = E[φ(a_t) φ(a_s)]·ρ s_b,

so σ²_h = E[φ(a)²] s_b and r_h = ρ·E[φ(a_t)φ(a_s)]/E[φ(a)²], the Gaussian expectations by Gauss–Hermite quadrature
(96 nodes, tensor rule for the pair; for the many pairs of a token-resolved walk, a table over ρ and s_a of the
same rule, interpolated). φ and φ' vary on a scale of ~1 while a's standard deviation is √s_a, so the rule converges
geometrically while s_a is moderate: we state and test the range s_a ≤ 16 (a pre-activation std up to 4; a Llama
block after RMSNorm with σ²_gate ~ 1/d has s_a ~ 1). Beyond it nothing is refused, but the fixed nodes under-resolve
φ's kink at 0 and the gradient variance drifts upwards by percents by s_a ~ 100. The mean is exactly 0 (unlike a
ReLU's output): the gate's mean E φ(a) > 0 is multiplied by b's zero.

Backward (output gradient g_h of variance G and token correlation r_g, zero-mean and independent of the forward at
initialisation, as every rule here assumes): g_a = g_h ⊙ b ⊙ φ'(a), g_b = g_h ⊙ φ(a), g_x = g_a W_gateᵀ + g_b W_upᵀ,
whose two terms are uncorrelated to leading order in 1/d_in (independent zero-mean matrices; at finite width they
are not quite: g_a carries b = x W_up and g_b carries φ(x W_gate), which gives σ²_gx an O(1/d_in) cross term and a
smaller self term, both positive, that the rule leaves out, so it reads σ²_gx low by a relative O(1/d_in)), so

    σ²_gx = d_ff G (σ²_gate s_b E[φ'(a)²] + σ²_up E[φ(a)²]),
    r_gx  = r_g d_ff G (σ²_gate ρ s_b E[φ'(a_t)φ'(a_s)] + σ²_up E[φ(a_t)φ(a_s)]) / σ²_gx.

Assumes: Gaussian pre-activations of one variance for every token, i.e. inputs of a fixed length (a norm's output)
or d_in large: for i.i.d. Gaussian inputs the spread of |x|² across tokens raises E h² by O(2/d_in), because the
gate's and the up projection's variances move together; weights independent of the input and of the output gradient
(true at initialisation); one token correlation ρ for every pair. The last is where finite width shows: r_h is convex
in ρ, so the spread of the pairs' own correlations (about (1 − ρ²)/√d_in) raises the mean output correlation above
r_h(mean ρ), the variance staying exact; through a stack of SwiGLU layers of width 64 the forward variance then
comes out low, further off than a ReLU FFN's (the figures, at these widths and through the stack:
docs/results/accuracy.md, "The gated units at finite width"). Checked against Monte Carlo of the real module
(d_in = 512) in ``tests/components/test_glu.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from scipy import special
from torch import nn

from ..core.gaussian import expect_1d, expect_2d
from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import TOKEN_WISE

__all__ = ["GLU", "GATES", "glu_forward", "glu_backward"]

#: The gates: name → (φ, φ') on float64 arrays.
GATES = {
    "swiglu": (lambda a: a * special.expit(a), lambda a: special.expit(a) * (1.0 + a * (1.0 - special.expit(a)))),
    "geglu": (lambda a: a * special.ndtr(a),
              lambda a: special.ndtr(a) + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)),
}


def _gate(name: str) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    if name not in GATES:
        raise ValueError(f"gate must be one of {', '.join(GATES)} (got {name!r})")
    return GATES[name]


def _pre_activations(m: Moments, d_in: Stat, gate_var: Stat, up_var: Stat) -> tuple[Stat, Stat, Stat]:
    second = m.var + m.mean**2
    rho = clip_corr((m.corr * m.var + m.mean**2) / second)
    return d_in * gate_var * second, d_in * up_var * second, rho


_GRID_ABOVE = 256  # pairs beyond which a table over (s, ρ) is interpolated instead of a tensor rule per pair
_GRID_RHO = np.linspace(-1.0, 1.0, 81)


_SPLINE_NODES = 65  # geometric nodes of the variance where a token-resolved walk's many variances are interpolated,
_SPLINE_RATIO = 1.01  # or more, so that neighbouring nodes are at most this ratio apart


def _expectation(f: Callable[[np.ndarray], np.ndarray], s: Stat) -> Stat:
    """E[f(a)] for a zero-mean Gaussian of variance ``s`` (broadcast), by :func:`expect_1d`. A token-resolved walk
    asks for a million pairs at a time: with few distinct variances (a norm's output at equal token variances: one)
    each is evaluated once, which leaves every number as it was; with more distinct ones than
    :data:`_SPLINE_NODES`, the rule is evaluated at that many geometric nodes between the smallest and largest
    variance (more where the range is wide: neighbours at most :data:`_SPLINE_RATIO` apart) and interpolated by a
    cubic spline in log s (smooth: within 1e-9 relative, tested)."""
    from scipy.interpolate import CubicSpline

    s = np.asarray(s, dtype=np.float64)
    if s.size <= _GRID_ABOVE or not np.all(np.isfinite(s) & (s > 0.0)):
        return expect_1d(f, 0.0, s)
    distinct, back = np.unique(s, return_inverse=True)
    if distinct.size <= _SPLINE_NODES:
        return expect_1d(f, 0.0, distinct)[back.reshape(-1)].reshape(s.shape)
    count = max(_SPLINE_NODES, int(np.ceil(np.log(distinct[-1] / distinct[0]) / np.log(_SPLINE_RATIO))) + 1)
    nodes = np.geomspace(distinct[0], distinct[-1], count)
    return CubicSpline(np.log(nodes), expect_1d(f, 0.0, nodes))(np.log(s))


def _pair_expectation(f: Callable[[np.ndarray, np.ndarray], np.ndarray], s: Stat, rho: Stat) -> Stat:
    """E[f(a_t, a_s)] for zero-mean Gaussians of variance ``s`` and correlation ``rho`` (broadcast): the tensor
    Gauss–Hermite rule per pair, or for the many pairs of a token-resolved walk (or a sweep) a table of the same rule
    over 81 correlations × 17 variances (geometric between the smallest and largest s), holding the ratio
    E[f(a_t, a_s)]/E[f(a, a)], which is smooth in ρ and log s and 1 at ρ = 1; it is interpolated linearly and
    multiplied by the diagonal E[f(a, a)] computed at each pair's own s (a one-dimensional rule). Its error against
    the per-pair rule, as a fraction of E[f(a, a)], is bounded by ``tests/components/test_glu.py``: 1e-4 when the
    pairs' variances lie between 0.97 and 1.03 times one value (a norm's output: a fixed length), 2e-3 when they
    spread over a factor 256 (the verify sweep's range)."""
    s, rho = np.broadcast_arrays(np.asarray(s, dtype=np.float64), np.asarray(rho, dtype=np.float64))
    if s.size <= _GRID_ABOVE:
        return expect_2d(f, 0.0, s, rho)
    lo, hi = float(s.min()), float(s.max())
    grid_s = np.geomspace(lo, hi, 17) if hi > lo * (1.0 + 1e-9) else np.array([lo])
    table = expect_2d(f, 0.0, grid_s[:, None], _GRID_RHO[None, :])  # (len(grid_s), 81); the last column is ρ = 1
    table = table / table[:, -1:]
    by_rho = np.stack([np.interp(np.clip(rho, -1.0, 1.0), _GRID_RHO, row) for row in table])  # (len(grid_s), ...)
    diag = _expectation(lambda a: f(a, a), s)
    if grid_s.size == 1:
        return by_rho[0] * diag
    pos = np.interp(np.log(s), np.log(grid_s), np.arange(grid_s.size))
    i = np.clip(np.floor(pos).astype(int), 0, grid_s.size - 2)
    w = pos - i
    pick = lambda k: np.take_along_axis(by_rho, k[None], axis=0)[0]  # noqa: E731
    return ((1.0 - w) * pick(i) + w * pick(i + 1)) * diag


def glu_forward(m: Moments, d_in: Stat, gate_var: Stat, up_var: Stat, gate: str = "swiglu") -> Moments:
    """Moments of h = φ(xW_gate) ⊙ (xW_up) (module docstring), broadcasting over the moments' arrays."""
    phi, _ = _gate(gate)
    s_a, s_b, rho = _pre_activations(m, d_in, gate_var, up_var)
    e2 = _expectation(lambda a: phi(a) ** 2, s_a)
    cross = _pair_expectation(lambda a1, a2: phi(a1) * phi(a2), s_a, rho)
    var = e2 * s_b
    return Moments(mean=0.0 * var, var=var, corr=clip_corr(rho * cross / e2), corr_hidden=0.0 * var)


def glu_backward(g: GradMoments, m_in: Moments, d_in: Stat, d_ff: Stat, gate_var: Stat, up_var: Stat,
                 gate: str = "swiglu") -> GradMoments:
    """Gradient moments at the input of h = φ(xW_gate) ⊙ (xW_up) (module docstring)."""
    phi, dphi = _gate(gate)
    s_a, s_b, rho = _pre_activations(m_in, d_in, gate_var, up_var)
    e2 = _expectation(lambda a: phi(a) ** 2, s_a)
    d2 = _expectation(lambda a: dphi(a) ** 2, s_a)
    cross = _pair_expectation(lambda a1, a2: phi(a1) * phi(a2), s_a, rho)
    dcross = _pair_expectation(lambda a1, a2: dphi(a1) * dphi(a2), s_a, rho)
    var = d_ff * g.var * (gate_var * s_b * d2 + up_var * e2)
    cov = g.corr * d_ff * g.var * (gate_var * rho * s_b * dcross + up_var * cross)
    return GradMoments(var=var, corr=clip_corr(cov / var))


class GLU(nn.Module):
    """h = φ(x W_gate) ⊙ (x W_up), d_in → d_ff, bias-free, φ = SiLU (``gate="swiglu"``) or GELU (``"geglu"``).

    ``gate_std`` / ``up_std`` (default Xavier-normal, √(2/(d_in + d_ff))) are the declared standard deviations the
    rules read; the weights are stored as (d_in, d_ff) matrices ``w_gate`` and ``w_up``."""

    rules = TOKEN_WISE

    def __init__(self, d_in: int, d_ff: int, gate: str = "swiglu", gate_std: float | None = None,
                 up_std: float | None = None) -> None:
        super().__init__()
        self.d_in = int(check_range(d_in, "d_in", lo=1.0, allowed="integers >= 1"))
        self.d_ff = int(check_range(d_ff, "d_ff", lo=1.0, allowed="integers >= 1"))
        _gate(gate)
        self.gate = gate
        xavier = math.sqrt(2.0 / (self.d_in + self.d_ff))
        self.gate_std = float(check_range(xavier if gate_std is None else gate_std, "gate_std", lo=0.0, lo_open=True))
        self.up_std = float(check_range(xavier if up_std is None else up_std, "up_std", lo=0.0, lo_open=True))
        self.w_gate = nn.Parameter(torch.empty(self.d_in, self.d_ff))
        self.w_up = nn.Parameter(torch.empty(self.d_in, self.d_ff))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        if self.w_gate.is_meta:
            return
        with torch.no_grad():
            self.w_gate.normal_(0.0, self.gate_std, generator=generator)
            self.w_up.normal_(0.0, self.up_std, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x @ self.w_gate
        act = nn.functional.silu(a) if self.gate == "swiglu" else nn.functional.gelu(a)
        return act * (x @ self.w_up)

    def forward_moments(self, m: Moments) -> Moments:
        return glu_forward(m, self.d_in, self.gate_std**2, self.up_std**2, self.gate)

    def backward_moments(self, g: GradMoments, m_in: Moments) -> GradMoments:
        return glu_backward(g, m_in, self.d_in, self.d_ff, self.gate_std**2, self.up_std**2, self.gate)

    def extra_repr(self) -> str:
        return f"d_in={self.d_in}, d_ff={self.d_ff}, gate={self.gate!r}"
