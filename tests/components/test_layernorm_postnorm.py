"""LayerNorm after a Post-LN residual, LN(λ·x̂ + β·f) with x̂ a LayerNorm output: the rule that replaces the Gaussian
rule's Olkin–Pratt bias by the bias of a fixed-norm + Gaussian mixture (layernorm_forward_postnorm)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.layernorm import layernorm_forward, layernorm_forward_postnorm
from sigprop.components.residual import residual_forward
from sigprop.core.moments import Moments
from sigprop.verify.sampling import correlated_gaussian
from tests.helpers import Z


def _tokens(generator, batch, length, d, r, var, dtype=torch.float64):
    """Gaussian tokens (batch, length, d) with variance ``var`` and token correlation ``r`` within a sequence."""
    return correlated_gaussian(1, 1, batch, length, d, np.zeros(1), np.array([var]), np.array([r]), generator,
                               dtype)[0, 0]


def _skip(d, r):
    return layernorm_forward(Moments(0.0, 1.0, r, 0.0), d)


def test_no_branch_keeps_the_correlation_of_a_fixed_norm_input():
    """β = 0: LN of an LN output is the identity, so the correlation must not move (the Gaussian rule lowers it)."""
    d = 64
    skip = _skip(d, 0.6)
    out = layernorm_forward_postnorm(skip, Moments(0.0, 1.0, 0.3, 0.0), 1.0, 0.0, d)
    # exact Gaussian rule with its first-order bias swapped out: equal up to the O(1/n²) terms of that bias
    assert out.corr == pytest.approx(float(skip.corr), abs=1.0 / (d - 1) ** 2)
    assert layernorm_forward(skip, d).corr < skip.corr - 1e-3


def test_no_skip_is_the_gaussian_rule_to_second_order():
    """λ = 0: only the Gaussian branch is left; the first-order mixture bias equals Olkin–Pratt's, so the result is
    the exact Gaussian rule up to the O(1/n²) terms the first-order swap leaves."""
    d, branch = 256, Moments(0.0, 1.3, 0.45, 0.0)
    a = layernorm_forward_postnorm(_skip(d, 0.2), branch, 0.0, 1.0, d)
    b = layernorm_forward(residual_forward(_skip(d, 0.2), branch, 0.0, 1.0), d)
    assert abs(float(a.corr) - float(b.corr)) < 1e-12 + 1.0 / (d - 1) ** 2


@pytest.mark.long
@pytest.mark.parametrize("d,lam2,beta2,rx,rf,n_seq", [(128, 0.99, 0.01, 0.3, 0.9, 300_000),
                                                      (256, 0.9, 0.1, 0.5, 0.85, 200_000),
                                                      (256, 0.5, 0.5, 0.6, 0.2, 200_000),
                                                      # unequal correlations at a small width: the base rule must
                                                      # be taken at the centred-space correlation R
                                                      (32, 0.5, 0.5, 0.9, 0.2, 200_000)])
def test_monte_carlo_on_the_real_modules(d, lam2, beta2, rx, rf, n_seq):
    """One Post-LN step on real tensors: x̂ = LayerNorm of Gaussian tokens with correlation rx, f Gaussian with
    correlation rf, y = LayerNorm(λx̂ + βf). Each sequence holds one token pair with its own shared parts, so the
    pairs are independent and the standard error of the mean cosine is exact from the sample."""
    chunk = 25_000
    lam, beta = math.sqrt(lam2), math.sqrt(beta2)
    g = torch.Generator().manual_seed(1)

    def tokens(r, var, b):
        return _tokens(g, b, 2, d, r, var, torch.float32)

    cos = []
    for _ in range(n_seq // chunk):
        xh = torch.nn.functional.layer_norm(tokens(rx, 1.0, chunk), (d,), eps=0.0)
        y = torch.nn.functional.layer_norm(lam * xh + beta * tokens(rf, 1.7, chunk), (d,), eps=0.0)
        norms = y.square().sum(-1).sqrt()
        cos.append((y[:, 0] * y[:, 1]).sum(-1) / (norms[:, 0] * norms[:, 1]))
    cos = torch.cat(cos).double().numpy()
    mean, se = float(cos.mean()), float(cos.std(ddof=1) / math.sqrt(cos.size))
    skip = layernorm_forward(Moments(0.0, 1.0, rx, 0.0), d, eps=0.0)
    branch = Moments(0.0, 1.7, rf, 0.0)
    rule = float(layernorm_forward_postnorm(skip, branch, lam, beta, d, eps=0.0).corr)
    # the rule is first order in 1/n: its O(1/n²) remainder (coefficient taken as 1) is part of the tolerance
    assert abs(rule - mean) <= Z * se + 1.0 / (d - 1) ** 2, (rule, mean, se)
    gauss = float(layernorm_forward(residual_forward(skip, branch, lam, beta), d, eps=0.0).corr)
    if beta2 <= 0.01:  # where the skip dominates, the Gaussian rule's bias is resolved by this sample
        assert abs(gauss - mean) > Z * se, (gauss, mean, se)
    assert np.isfinite(rule)


def test_backward_without_fresh_direction_keeps_the_gradient_correlation():
    from sigprop.components.layernorm import layernorm_backward_postnorm
    from sigprop.core.moments import GradMoments

    d = 64
    g = GradMoments(2.0, 0.3)
    out = layernorm_backward_postnorm(g, _skip(d, 0.5), Moments(0.0, 1.0, 0.2, 0.0), 1.0, 0.0, d)
    assert float(out.corr) == pytest.approx(0.3, abs=1e-15)


def test_backward_without_skip_is_the_gaussian_rule():
    """λ = 0: no skip path (φ = 0) and a purely Gaussian input: the correlation is the Gaussian rule's, and the
    variance differs from it only by the first-order treatment of E[1/σ̂²]: (1 + 2/n)/n against 1/(n − 2), an exact
    ratio of (d² − 2d − 3)/(d² − 2d + 1) = 1 − O(1/d²)."""
    from sigprop.components.layernorm import layernorm_backward, layernorm_backward_postnorm
    from sigprop.core.moments import GradMoments

    d, g, branch = 64, GradMoments(2.0, 0.3), Moments(0.0, 1.4, 0.6, 0.0)
    a = layernorm_backward_postnorm(g, _skip(d, 0.5), branch, 0.0, 1.0, d, skip_fraction=0.0)
    b = layernorm_backward(g, residual_forward(_skip(d, 0.5), branch, 0.0, 1.0), d)
    assert float(a.corr) == pytest.approx(float(b.corr), rel=1e-12)
    assert float(a.var) / float(b.var) == pytest.approx((d * d - 2 * d - 3) / (d * d - 2 * d + 1), rel=1e-12)


def test_post_ln_chain_on_real_modules_keeps_gradient_correlation():
    """N Post-LN steps x ← LayerNorm(λx + βf) with fresh Gaussian f, then a gradient with correlation 0.2 pushed
    back: the composed postnorm rules against the measured correlation at the bottom (standard error from
    independent replicates; the rules are first order in 1/n, so N/n² is part of the tolerance)."""
    from sigprop.components.layernorm import layernorm_backward, layernorm_backward_postnorm
    from sigprop.core.moments import GradMoments
    from sigprop.core.stats import moment_sums

    d, b, L, n_steps, beta2, rf, vf = 128, 16, 16, 30, 0.05, 0.5, 1.0
    lam, beta = math.sqrt(1 - beta2), math.sqrt(beta2)
    g = torch.Generator().manual_seed(3)

    def tokens(r, var):
        return _tokens(g, b, L, d, r, var)

    measured = []
    for _ in range(12):
        x = torch.nn.functional.layer_norm(tokens(0.3, 1.0), (d,)).requires_grad_(True)
        y = x
        for _ in range(n_steps):
            y = torch.nn.functional.layer_norm(lam * y + beta * tokens(rf, vf), (d,))
        y.backward(tokens(0.2, 1.0))
        measured.append(float(moment_sums(x.grad).corr()))
    mean, se = float(np.mean(measured)), float(np.std(measured, ddof=1) / math.sqrt(len(measured)))
    m = layernorm_forward(Moments(0.0, 1.0, 0.3, 0.0), d)
    states = []
    for _ in range(n_steps):
        states.append(m)
        m = layernorm_forward_postnorm(m, Moments(0.0, vf, rf, 0.0), lam, beta, d)
    gm = gg = GradMoments(1.0, 0.2)
    for s in reversed(states):
        gm = layernorm_backward_postnorm(gm, s, Moments(0.0, vf, rf, 0.0), lam, beta, d)
        gg = layernorm_backward(gg, residual_forward(s, Moments(0.0, vf, rf, 0.0), lam, beta), d)
    tol = Z * se + 0.2 * n_steps / (d - 1) ** 2
    assert abs(float(gm.corr) - mean) <= tol, (float(gm.corr), mean, se)
    assert abs(float(gg.corr) - mean) > tol, (float(gg.corr), mean, se)  # the Gaussian rule's drift is resolved


def test_post_ln_chain_on_real_modules_gradient_variance():
    """N Post-LN steps with β = λ = 1 (Xavier Post-LN), gradient pushed back through the skip path only (φ = 1):
    the postnorm rule's variance against the measured one; the Gaussian rule's −0.3% per step is resolved."""
    from sigprop.components.layernorm import layernorm_backward, layernorm_backward_postnorm
    from sigprop.core.moments import GradMoments
    from sigprop.core.stats import moment_sums

    d, b, L, n_steps, rf, vf = 256, 16, 16, 20, 0.5, 0.36
    g = torch.Generator().manual_seed(4)

    def tokens(r, var):
        return _tokens(g, b, L, d, r, var)

    measured = []
    for _ in range(48):
        x = torch.nn.functional.layer_norm(tokens(0.3, 1.0), (d,)).requires_grad_(True)
        y = x
        for _ in range(n_steps):
            y = torch.nn.functional.layer_norm(y + tokens(rf, vf), (d,))
        y.backward(tokens(0.1, 1.0))
        measured.append(float(moment_sums(x.grad).var()))
    mean, se = float(np.mean(measured)), float(np.std(measured, ddof=1) / math.sqrt(len(measured)))
    m = layernorm_forward(Moments(0.0, 1.0, 0.3, 0.0), d)
    states = []
    for _ in range(n_steps):
        states.append(m)
        m = layernorm_forward_postnorm(m, Moments(0.0, vf, rf, 0.0), 1.0, 1.0, d)
    gm = gg = GradMoments(1.0, 0.1)
    for s in reversed(states):
        gm = layernorm_backward_postnorm(gm, s, Moments(0.0, vf, rf, 0.0), 1.0, 1.0, d, skip_fraction=1.0)
        gg = layernorm_backward(gg, residual_forward(s, Moments(0.0, vf, rf, 0.0), 1.0, 1.0), d)
    tol = Z * se + mean * n_steps / (d - 1) ** 2
    assert abs(float(gm.var) - mean) <= tol, (float(gm.var), mean, se)
    assert abs(float(gg.var) - mean) > tol, (float(gg.var), mean, se)
