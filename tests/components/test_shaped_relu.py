"""Shaped ReLU (Noci et al. Eq. 4, Eq. 6): identities, the paper's O(1/n) expansion, Monte Carlo on the real module
for any input mean, the recover schedule, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigprop.components.relu import relu_backward, relu_forward
from sigprop.components.shaped_relu import (
    ShapedReLU,
    linear_anneal,
    shaped_relu_backward,
    shaped_relu_constant,
    shaped_relu_forward,
    shaped_relu_nu,
    shaped_relu_slopes,
)
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import assert_close_mc, mc_mean

M_IN = Moments(mean=0.4, var=1.7, corr=0.35, corr_hidden=-0.2)


# tier 1 -------------------------------------------------------------------------------------------------------
def test_zero_shaping_is_identity():
    """c₊ = c₋ = 0 gives s± = 1: σ_s is the identity, c = 1, and the rules return their input."""
    mod = ShapedReLU(64, c_plus=0.0, c_minus=0.0, normalize=True)
    x = torch.randn(1000)
    assert torch.equal(mod(x), x)
    assert mod.constant() == 1.0
    out = mod.forward_moments(M_IN)
    for f in ("mean", "var", "corr", "corr_hidden"):
        assert getattr(out, f) == pytest.approx(getattr(M_IN, f), rel=1e-12, abs=1e-12)
    g = mod.backward_moments(GradMoments(2.0, 0.3), M_IN)
    assert (g.var, g.corr) == pytest.approx((2.0, 0.3), rel=1e-12)


def test_zero_negative_slope_is_relu():
    """s₊ = 1, s₋ = 0 is the plain ReLU: the rules equal relu.py's exact rules; c = 2 (He)."""
    a, b = shaped_relu_forward(M_IN, 1.0, 0.0), relu_forward(M_IN)
    for f in ("mean", "var", "corr", "corr_hidden"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-12)
    ga, gb = shaped_relu_backward(GradMoments(1.0, 0.5), M_IN, 1.0, 0.0), relu_backward(GradMoments(1.0, 0.5), M_IN)
    assert (ga.var, ga.corr) == pytest.approx((gb.var, gb.corr), rel=1e-12)
    assert shaped_relu_constant(1.0, 0.0) == 2.0


def test_normalised_unit_variance():
    """c⁻¹ = E σ_s(g)² (Eq. 4): with normalize, a standard Gaussian input keeps E[out²] = 1 for any slopes."""
    for sp, sm in ((1.2, 0.3), (0.5, -0.7), (1.0, 1.0)):
        out = shaped_relu_forward(Moments(0.0, 1.0, 0.2), sp, sm, normalize=True)
        assert out.var + out.mean**2 == pytest.approx(1.0, rel=1e-12)


def test_paper_expansion_eq6():
    """c K₁(ρ) = ρ + ν(ρ)/n + O(n^{-3/2}) with ν of Sec. 3 Eq. 6: n(cK₁ − ρ) − ν shrinks like n^{-1/2}."""
    rho = np.linspace(-0.9, 0.95, 8)
    errs = []
    for n in (1e4, 1e6):
        sp, sm = shaped_relu_slopes(n, 0.5, -1.0)
        out = shaped_relu_forward(Moments(0.0, 1.0, rho), sp, sm, normalize=True)
        ck1 = out.corr * out.var + out.mean**2  # normalised: c E[σ_s σ_s] = Cov_out + μ_out²
        errs.append(np.max(np.abs(n * (ck1 - rho) - shaped_relu_nu(rho, 0.5, -1.0))))
    assert errs[1] < errs[0] / 5.0  # n^{-1/2}: a factor 10 over two decades; 5 leaves room for the O(1/n) term


# tier 3 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mean", [0.0, 0.8, -1.5])
def test_monte_carlo_forward_backward(mean):
    """Module output and its autograd input gradient vs the exact rules, tolerance Z × SE."""
    sp, sm, normalize = 1.3, -0.4, True
    mod = ShapedReLU(4, c_plus=2 * (sp - 1), c_minus=2 * (sm - 1), normalize=normalize)  # √4 = 2
    r, rd, var = 0.6, -0.3, 1.4
    n = 1 << 17
    z = torch.randn(3, n, dtype=torch.float64)
    x1 = mean + var**0.5 * z[0]
    x2 = mean + var**0.5 * (r * z[0] + (1 - r**2) ** 0.5 * z[1])
    x3 = mean + var**0.5 * (rd * z[0] + (1 - rd**2) ** 0.5 * z[2])
    pred = mod.forward_moments(Moments(mean, var, r, rd))
    y1, y2, y3 = (mod(t) for t in (x1, x2, x3))
    assert_close_mc(pred.mean, *mc_mean(y1), what="mean")
    assert_close_mc(pred.var, *mc_mean((y1 - pred.mean) ** 2), what="var")
    assert_close_mc(pred.corr * pred.var, *mc_mean((y1 - pred.mean) * (y2 - pred.mean)), what="cov")
    assert_close_mc(pred.corr_hidden * pred.var, *mc_mean((y1 - pred.mean) * (y3 - pred.mean)), what="cov_h")
    # backward: g_out i.i.d. unit variance with token correlation r_g, independent of x
    rg = 0.5
    g1 = z[2].clone().normal_()
    g2 = rg * g1 + (1 - rg**2) ** 0.5 * torch.randn_like(g1)
    xa, xb = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    (mod(xa) * g1 + mod(xb) * g2).sum().backward()
    gp = mod.backward_moments(GradMoments(1.0, rg), Moments(mean, var, r))
    assert_close_mc(gp.var, *mc_mean(xa.grad**2), what="grad var")
    assert_close_mc(gp.corr * gp.var, *mc_mean(xa.grad * xb.grad), what="grad cov")


# schedule / modes ---------------------------------------------------------------------------------------------
def test_recover_schedule_and_learn_mode():
    mod = ShapedReLU(16, c_minus=-1.0, mode="recover", anneal_steps=10)
    s0 = mod.s_minus_init
    assert s0 == pytest.approx(0.75)
    assert mod.anneal(5) == pytest.approx(s0 / 2)
    assert mod.anneal(10) == 0.0 and mod.anneal(25) == 0.0
    x = torch.randn(100)
    assert torch.equal(mod(x), torch.relu(x))  # c₊ = 0: plain ReLU once annealed
    assert linear_anneal(2.0, 0, 4) == 2.0
    learn = ShapedReLU(16, mode="learn")
    assert any(p is learn.s_minus for p in learn.parameters())
    learn(torch.randn(10)).sum().backward()
    assert learn.s_minus.grad is not None


def test_bad_input():
    with pytest.raises(ValueError, match="mode"):
        ShapedReLU(8, mode="sometimes")
    with pytest.raises(ValueError, match="anneal_steps"):
        ShapedReLU(8, mode="recover")
    with pytest.raises(ValueError, match="anneal_steps"):
        ShapedReLU(8, anneal_steps=5)
    with pytest.raises(ValueError, match="anneal"):
        ShapedReLU(8).anneal(1)
    with pytest.raises(ValueError, match="width n"):
        ShapedReLU(0)
    with pytest.raises(ValueError, match="both be 0"):
        shaped_relu_forward(M_IN, 0.0, 0.0)
    with pytest.raises(ValueError, match="s_minus = 0"):
        shaped_relu_forward(Moments(-10.0, 1.0), 1.0, 0.0)
    with pytest.raises(ValueError, match="anneal step"):
        linear_anneal(1.0, -1, 10)
