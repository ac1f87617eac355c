"""Shaped attention (Noci et al. Eqs. 9, 33, Sec. 4.2, Thm. 4.2): identities of the attention matrix, the n^{-1/2}
shrinkage of the centred softmax, the first-order-in-κ Gram rule by antithetic Monte Carlo, the module's moments
by Monte Carlo, the recover schedule, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.shaped_attention import (
    ShapedAttention,
    shaped_attention,
    shaped_attention_backward,
    shaped_attention_forward,
    shaped_attention_gram,
    shaped_attention_matrix,
    shaped_mask_sums,
    shaped_temperature,
)
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z, assert_close_mc, mc_mean


def _exact_gram_x(q2, p2, L, n, dtype=torch.float64):
    """X (L, n) whose Gram XXᵀ/n is exactly V = (q−p)I + pJ: X = √n · chol(V) · first L unit vectors."""
    v = (q2 - p2) * torch.eye(L, dtype=dtype) + p2 * torch.ones(L, L, dtype=dtype)
    x = torch.zeros(L, n, dtype=dtype)
    x[:, :L] = math.sqrt(n) * torch.linalg.cholesky(v)
    return x, v


# tier 1: the attention matrix -----------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_rows_sum_to_one_and_causal_centring(causal):
    """γ₁ = γ₂ = 1: every row of A sums to 1 (also causal); Softmax − W has zero row sums over each row's m_i visible
    keys and A is zero above the diagonal when causal (Sec. 4.2); general γ: rows sum to γ₁ + 1 − γ₂."""
    mod = ShapedAttention(32, 4, 8, tau0=0.05, causal=causal).double()  # small τ₀: far from uniform
    x = torch.randn(3, 7, 32, dtype=torch.float64)
    a = mod.attention_matrix(x)
    torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:-1], dtype=torch.float64), rtol=0, atol=1e-12)
    centred = a - torch.eye(7, dtype=torch.float64)
    if causal:
        assert torch.all(torch.triu(a, 1) == 0)
        # row i: the softmax part is a distribution over i+1 keys, centred by 1/(i+1) on exactly those keys
        soft = centred + torch.tril(torch.ones(7, 7, dtype=torch.float64)) / torch.arange(1, 8)[:, None]
        assert torch.all(torch.triu(soft, 1) == 0) and torch.all(torch.tril(soft) >= 0)
        torch.testing.assert_close(soft.sum(-1), torch.ones(3, 4, 7, dtype=torch.float64), rtol=0, atol=1e-12)
        torch.testing.assert_close(a[..., 0, :], torch.eye(7, dtype=torch.float64)[0].expand(3, 4, 7))
    g = shaped_attention_matrix(torch.randn(5, 8), torch.randn(5, 8), 2.0, 0.3, 0.8, causal)
    torch.testing.assert_close(g.sum(-1), torch.full((5,), 0.5), rtol=0, atol=1e-6)


def test_forward_equals_explicit_matrix_product():
    """The SDPA + (cumulative-)mean forward equals A X W_V with the explicit A, with and without a padding mask."""
    for causal in (False, True):
        mod = ShapedAttention(16, 2, 8, gamma1=0.7, gamma2=0.4, causal=causal).double()
        x = torch.randn(3, 5, 16, dtype=torch.float64)
        kp = torch.ones(3, 5, dtype=torch.bool)
        kp[1, -2:] = False

        def heads(t):
            return t.unflatten(-1, (2, 8)).transpose(-2, -3)

        v = heads(x @ mod.w_v)
        for mask in (None, kp):
            a = shaped_attention_matrix(heads(x @ mod.w_q), heads(x @ mod.w_k), mod.tau, mod.gamma1, mod.gamma2, causal,
                                        None if mask is None else mask[:, None, :])
            ref = (a @ v).transpose(-2, -3).flatten(-2)
            torch.testing.assert_close(mod(x, key_padding_mask=mask), ref, rtol=0, atol=1e-12)


def test_mask_sums_match_explicit_matrices():
    """Closed forms of :func:`shaped_mask_sums` (harmonic numbers) against the explicit W for L = 1..12."""
    for causal in (False, True):
        for L in range(1, 13):
            vis = torch.ones(L, L, dtype=torch.bool)
            vis = vis.tril() if causal else vis
            w = (vis.double() / vis.sum(-1, keepdim=True)).numpy()
            m = vis.sum(-1).numpy()
            a, b = np.minimum.outer(m, m), np.maximum.outer(m, m)
            k = (a - 1) / (a * b)
            t = shaped_mask_sums(L, causal)
            got = [t["tr_w"], t["tr_wwt"], t["sum_wwt"], t["sum_w"], t["k_diag"], t["k_off"]]
            ref = [np.trace(w), np.trace(w @ w.T), (w.sum(0) ** 2).sum(), w.sum(), np.trace(k), k.sum() - np.trace(k)]
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


# n^{-1/2} shrinkage -----------------------------------------------------------------------------------------------
def test_centred_softmax_shrinks_like_inverse_sqrt_width():
    """‖Softmax(Y/τ) − 11ᵀ/m‖²_F at the paper's init (σ = 1/√n, τ = τ₀√(n n_k)) has mean κ q s k_diag with
    κ = 1/(τ₀² n) to leading order, so its norm shrinks like n^{-1/2}: E at n over E at 4n is 4 (Z × SE of the
    ratio), and n·E matches the closed form at both widths. The relative O(κ) = O(1/n) bias is required (asserted)
    to be 10× below the tolerance, so it cannot decide the test."""
    q2, p2, L, dk, draws = 1.0, 0.3, 6, 8, 4096
    est = {}
    for n in (256, 1024):
        x, _ = _exact_gram_x(q2, p2, L, n)
        tau = shaped_temperature(n, dk, 1.0)
        wq = torch.randn(draws, n, dk, dtype=torch.float64) / math.sqrt(n)
        wk = torch.randn(draws, n, dk, dtype=torch.float64) / math.sqrt(n)
        a = shaped_attention_matrix(x @ wq, x @ wk, tau, 0.0, 1.0)  # γ₁ = 0: A = Softmax − 11ᵀ/m
        mean, se = mc_mean((a**2).sum((-1, -2)))
        kappa = 1.0 / n
        pred = kappa * q2 * (q2 - p2) * shaped_mask_sums(L)["k_diag"]
        assert 10 * kappa * pred < Z * se  # the neglected O(κ) relative bias is well inside the tolerance
        assert_close_mc(n * pred, n * mean, n * se, what=f"n·E‖S − J/m‖² at n={n}")
        est[n] = (mean, se)
    (m1, s1), (m4, s4) = est[256], est[1024]
    ratio = m1 / m4
    se_ratio = ratio * math.sqrt((s1 / m1) ** 2 + (s4 / m4) ** 2)
    assert_close_mc(4.0, ratio, se_ratio, what="E_n / E_4n")


# the Gram rule (first order in κ) ---------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gammas", [(1.0, 1.0), (0.6, 0.3)])
def test_gram_rule_first_order_antithetic(causal, gammas):
    """(E[AVAᵀ] − A₀VA₀ᵀ)/κ → κ-coefficient of :func:`shaped_attention_gram` as κ → 0, estimated with antithetic
    pairs (W_Q, −W_Q) that cancel the odd orders exactly; at κ = 1e-4 the remaining O(κ) relative bias is far below
    Z × SE. The κ⁰ part is checked exactly against the explicit A₀VA₀ᵀ."""
    g1, g2 = gammas
    q2, p2, L, n, dk, draws = 1.3, 0.4, 5, 16, 4, 8192
    x, v = _exact_gram_x(q2, p2, L, n)
    kappa = 1e-4
    tau = math.sqrt(dk * n**2 / kappa)  # κ = n_k σ_q²σ_k² n²/τ² with σ = 1
    wq = torch.randn(draws, n, dk, dtype=torch.float64)
    wk = torch.randn(draws, n, dk, dtype=torch.float64)
    ap = shaped_attention_matrix(x @ wq, x @ wk, tau, g1, g2, causal)
    am = shaped_attention_matrix(-(x @ wq), x @ wk, tau, g1, g2, causal)
    a0 = shaped_attention_matrix(torch.zeros(L, dk, dtype=torch.float64), torch.zeros(L, dk, dtype=torch.float64),
                                 tau, g1, g2, causal)
    g0 = a0 @ v @ a0.T
    sym = 0.5 * (ap @ v @ ap.transpose(-1, -2) + am @ v @ am.transpose(-1, -2)) - g0
    eye = torch.eye(L, dtype=torch.bool)
    d0, o0 = shaped_attention_gram(q2, p2, L, 0.0, g1, g2, causal)
    assert d0 == pytest.approx(g0[eye].mean().item(), rel=1e-12)
    assert o0 == pytest.approx(g0[~eye].mean().item(), rel=1e-12)
    d1, o1 = shaped_attention_gram(q2, p2, L, 1.0, g1, g2, causal)
    assert_close_mc(d1 - d0, *mc_mean(sym[:, eye].mean(-1) / kappa), what="κ-term, diagonal")
    assert_close_mc(o1 - o0, *mc_mean(sym[:, ~eye].mean(-1) / kappa), what="κ-term, off-diagonal")


# tier 3: the module's moments -------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_module_forward_and_value_path_backward_monte_carlo(causal):
    """Output moments of the real module (many weight draws × Gaussian exchangeable inputs with a mean) vs
    :func:`shaped_attention_forward`; input-gradient moments vs :func:`shaped_attention_backward` with γ₁ = γ₂ = 1
    and κ = 1/n (the omitted O(κ) terms are ~1e-2 relative: checked only at the Z × SE level of this sample)."""
    d, heads, dk, L, draws, batch = 32, 2, 16, 6, 256, 8
    mu, var, r = 0.3, 1.2, 0.4
    mod = ShapedAttention(d, heads, dk, gamma1=0.8, gamma2=0.5, causal=causal).double()
    wq, wk, wv = (torch.randn(draws, 1, d, heads * dk, dtype=torch.float64) / math.sqrt(d) for _ in range(3))
    shared = torch.randn(draws, batch, 1, d, dtype=torch.float64)
    x = mu + math.sqrt(r * var) * shared + math.sqrt((1 - r) * var) * torch.randn(draws, batch, L, d,
                                                                                   dtype=torch.float64)
    y = shaped_attention(x, wq, wk, wv, heads, mod.tau, 0.8, 0.5, causal)
    pred = mod.forward_moments(Moments(mu, var, r), L=L)
    assert_close_mc(0.0, *mc_mean(y), what="mean")
    assert_close_mc(pred.var, *mc_mean(y**2), what="var")
    tok = (y.sum(-2) ** 2 - (y**2).sum(-2)) / (L * (L - 1))  # mean over token pairs t ≠ s of y_t y_s
    assert_close_mc(pred.corr * pred.var, *mc_mean(tok), what="token cov")
    # backward through the value path at γ₁ = γ₂ = 1 (A ≈ I + O(√κ))
    xg = x.clone().requires_grad_()
    rg = 0.5
    gsh = torch.randn(draws, batch, 1, heads * dk, dtype=torch.float64)
    gout = math.sqrt(rg) * gsh + math.sqrt(1 - rg) * torch.randn(draws, batch, L, heads * dk, dtype=torch.float64)
    (shaped_attention(xg, wq, wk, wv, heads, mod.tau, 1.0, 1.0, causal) * gout).sum().backward()
    gp = shaped_attention_backward(GradMoments(1.0, rg), Moments(mu, var, r), heads * dk, L, 1.0 / d, 1.0, 1.0,
                                   causal)
    gx = xg.grad
    assert_close_mc(gp.var, *mc_mean(gx**2), what="grad var")
    gtok = (gx.sum(-2) ** 2 - (gx**2).sum(-2)) / (L * (L - 1))
    assert_close_mc(gp.corr * gp.var, *mc_mean(gtok), what="grad token cov")


def test_rule_identities():
    """γ₁ = γ₂ = 1, bidirectional: σ²_out = nσ_v² q(1 + κs²(L−1)/L²) and the correlation is unchanged (the exchangeable
    drift is proportional to V); γ₁ = 0, γ₂ = 1 reduces the κ⁰ part to zero (pure centred softmax); backward at
    γ₁ = γ₂ = 1 is the linear value map."""
    m = Moments(0.0, 1.0, 0.25)
    n, dk, L = 64, 16, 8
    tau = shaped_temperature(n, dk, 1.0)
    out = shaped_attention_forward(m, n, dk, L, 1 / n, 1 / n, 1 / n, tau)
    kappa = 1.0 / n
    assert out.var == pytest.approx(1.0 + kappa * 0.75**2 * (L - 1) / L**2, rel=1e-12)
    assert out.corr == pytest.approx(0.25, rel=1e-12)
    d, o = shaped_attention_gram(1.0, 0.25, L, kappa, 0.0, 1.0)
    assert d == pytest.approx(kappa * 0.75**2 * (L - 1) / L**2, rel=1e-12)
    g = shaped_attention_backward(GradMoments(2.0, 0.3), m, 64, L, 1 / 64)
    assert (g.var, g.corr) == pytest.approx((2.0, 0.3), rel=1e-12)


# schedule and validation ------------------------------------------------------------------------------------------
def test_recover_anneal_reaches_zero_and_learn_mode():
    mod = ShapedAttention(16, 2, 8, gamma_mode="recover", anneal_steps=100)
    assert mod.anneal(0) == (1.0, 1.0)
    assert mod.anneal(50) == pytest.approx((0.5, 0.5))
    assert mod.anneal(100) == (0.0, 0.0) and mod.anneal(1000) == (0.0, 0.0)
    x = torch.randn(2, 5, 16)
    heads = lambda t: t.unflatten(-1, (2, 8)).transpose(-2, -3)  # noqa: E731
    soft = torch.softmax(heads(x @ mod.w_q) @ heads(x @ mod.w_k).transpose(-1, -2) / mod.tau, -1)
    torch.testing.assert_close(mod.attention_matrix(x), soft)  # standard attention recovered
    learn = ShapedAttention(16, 2, 8, gamma_mode="learn")
    learn(torch.randn(2, 5, 16)).sum().backward()
    assert learn.gamma1.grad is not None and learn.gamma2.grad is not None


def test_bad_input():
    with pytest.raises(ValueError, match="gamma_mode"):
        ShapedAttention(16, 2, 8, gamma_mode="anneal")
    with pytest.raises(ValueError, match="anneal_steps"):
        ShapedAttention(16, 2, 8, gamma_mode="recover")
    with pytest.raises(ValueError, match="anneal_steps"):
        ShapedAttention(16, 2, 8, anneal_steps=3)
    with pytest.raises(ValueError, match="anneal"):
        ShapedAttention(16, 2, 8).anneal(1)
    with pytest.raises(ValueError, match="n_heads"):
        ShapedAttention(16, 0, 8)
    with pytest.raises(ValueError, match="tau0"):
        ShapedAttention(16, 2, 8, tau0=0.0)
    with pytest.raises(ValueError, match="input must have shape"):
        ShapedAttention(16, 2, 8)(torch.randn(5, 12))
    with pytest.raises(ValueError, match="same last dimension"):
        shaped_attention_matrix(torch.randn(4, 3), torch.randn(4, 5), 1.0)
    with pytest.raises(ValueError, match="causal"):
        shaped_attention_matrix(torch.randn(4, 3), torch.randn(5, 3), 1.0, causal=True)
    with pytest.raises(ValueError, match="sequence length"):
        shaped_mask_sums(0)
    with pytest.raises(ValueError, match="sigma_v2"):
        shaped_attention_forward(Moments(), 16, 8, 4, 1.0, 1.0, 0.0, 1.0)
