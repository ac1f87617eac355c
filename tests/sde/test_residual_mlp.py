"""Tests for sigprop.sde.residual_mlp (Noci et al. Thm. 3.2, Eq. 6): identities, nu vs quadrature, and the drift and
diffusion against a one-step Monte Carlo of the finite residual shaped-ReLU layer (Eq. 4) at width n.

One-step sampler (exact in distribution for any n): with X = sqrt(n) [V^{1/2}, 0] (so X X^T / n = V), the
pre-activations are h = X W_pre / sqrt(n) = V^{1/2} G with G an m x n standard Gaussian, and, writing P = sqrt(c)
sigma_s(h) (m x n), R = W_post: X f^T / n = V^{1/2} (P R_{:, :m})^T / n and f f^T / n = P R R^T P^T / n^2. Given P,
P R_{:, :m} = L xi (L = chol(P P^T), xi an m x m standard Gaussian) and the other n - m columns give
L Wishart(I, n - m) L^T, independent: V' = lambda^2 V + lambda gamma (cross + cross^T) + gamma^2 (f f^T / n).
"""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from sigprop.sde.residual_mlp import nu_shaped_relu, resnet_relu_diffusion, resnet_relu_drift
from sigprop.sde.triu import pair_products, sigma_lin, to_triu
from tests.helpers import Z, assert_close_mc
from tests.sde.sde_helpers import bartlett_wishart_identity, cov_with_se, mean_with_se, random_cov


def shaped_relu(x, n, c_plus, c_minus):
    sp, sm = 1 + c_plus / math.sqrt(n), 1 + c_minus / math.sqrt(n)
    return sp * x.clamp_min(0) + sm * x.clamp_max(0), 1.0 / ((sp**2 + sm**2) / 2)  # (sigma_s(x), c)


def one_step(v, n, s, gamma, c_plus, c_minus, seed):
    """S independent draws of (V_{l+1}, E[V_{l+1} | W_pre], linear control variate) for the layer of Eq. 4."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    m = v.shape[0]
    lam = math.sqrt(1 - gamma**2)
    root = torch.linalg.cholesky(v)
    h = root @ torch.randn((s, m, n), generator=gen, dtype=torch.float64)
    act, c = shaped_relu(h, n, c_plus, c_minus)
    p = math.sqrt(c) * act
    psi = p @ p.transpose(-1, -2)
    lp = torch.linalg.cholesky(psi)
    head = lp @ torch.randn((s, m, m), generator=gen, dtype=torch.float64)
    cross = root @ head.transpose(-1, -2) / n
    fft = (head @ head.transpose(-1, -2) + lp @ bartlett_wishart_identity(s, m, n - m, rng) @ lp.transpose(-1, -2))
    v_next = lam**2 * v + lam * gamma * (cross + cross.transpose(-1, -2)) + gamma**2 * fft / n**2
    cond_mean = lam**2 * v + gamma**2 * psi / n             # E[V_{l+1} | W_pre]
    control = lam**2 * v + gamma**2 * (h @ h.transpose(-1, -2)) / n  # same with identity activation: mean V exactly
    return v_next, cond_mean, control


def test_identities():
    gen = torch.Generator().manual_seed(0)
    v = random_cov(3, gen)
    assert torch.count_nonzero(resnet_relu_drift(v, 0.0, 1.0, -2.0)) == 0
    assert torch.count_nonzero(resnet_relu_diffusion(v, 0.0)) == 0
    assert torch.count_nonzero(resnet_relu_drift(v, 0.7, 1.5, 1.5)) == 0  # c_+ = c_-: linear, no drift
    b = resnet_relu_drift(v, 0.7, 1.0, -2.0)[0]
    assert torch.all(b[[0, 3, 5]] == 0)                                  # nu(1) = 0: diagonal drift vanishes
    s = resnet_relu_diffusion(v, 0.6)[0]
    assert torch.allclose(s, s.T) and torch.allclose(s, 2 * 0.36 * sigma_lin(v)[0])
    assert torch.allclose(pair_products(v[None], v[None]), sigma_lin(v))
    assert float(nu_shaped_relu(1.0, 1.0, -1.0)) == 0.0
    assert math.isclose(float(nu_shaped_relu(0.0, 1.0, -1.0)), 4 / (2 * math.pi))
    with pytest.raises(ValueError, match="gamma"):
        resnet_relu_drift(v, 1.5, 0.0, 1.0)


@pytest.mark.parametrize("rho", [-0.6, 0.45])
def test_nu_against_quadrature(rho):
    """n (c K_1(rho) - rho) -> nu(rho): quadrature of E[sigma_s(g1) sigma_s(g2)] at n = 1e8. The remaining error is
    nu * |1 - 1/(a^2+b^2)| <= nu * x/(1-x), x = |c_+ + c_-|/sqrt(n) + (c_+^2 + c_-^2)/(2n) (module docstring), plus
    the quadrature tolerance."""
    n, cp, cm = 1e8, 0.7, -1.9
    sp, sm = 1 + cp / math.sqrt(n), 1 + cm / math.sqrt(n)
    c = 2 / (sp**2 + sm**2)
    # E[sigma(g1) sigma(g2)] = rho + E[g1 delta(g2) + delta(g1) g2 + delta(g1) delta(g2)], delta(x) = sigma(x) - x:
    # only the small pieces are integrated numerically, so float64 resolves the O(1/n) term (1e-12 n: rounding).
    dens = stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]])

    def delta(x):
        return np.where(x > 0, sp - 1, sm - 1) * x

    def f(y, x):
        return (x * delta(y) + delta(x) * y + delta(x) * delta(y)) * dens.pdf([x, y])

    parts = [integrate.dblquad(f, qa, qb, ra, rb, epsabs=1e-13, epsrel=1e-11)
             for qa, qb in ((-12, 0), (0, 12)) for ra, rb in ((-12, 0), (0, 12))]
    cross = sum(p[0] for p in parts)
    quad_err = sum(p[1] for p in parts)
    ck1 = c * (rho + cross)
    got = n * (ck1 - rho)
    want = float(nu_shaped_relu(rho, cp, cm))
    x = abs(cp + cm) / math.sqrt(n) + (cp**2 + cm**2) / (2 * n)
    assert abs(got - want) <= abs(want) * x / (1 - x) + n * c * quad_err + 1e-12 * n, (got, want)


def test_drift_vs_finite_network():
    """n E[V_{l+1} - V_l] vs b_res(V). Estimator: E over W_post in closed form (cond_mean) minus the identity-activation
    control variate (exact mean V), both at the same W_pre; unbiased for the finite-n mean. Allowance: the exact
    finite-n mean is gamma^2 sqrt(V^aa V^bb) nu(rho) / (a^2 + b^2) (module docstring of residual_mlp), so
    |finite - b_res| <= |b_res| x / (1 - x), x = |c_+ + c_-|/sqrt(n) + (c_+^2 + c_-^2)/(2n) = O(n^{-1/2})."""
    gen = torch.Generator().manual_seed(11)
    n, s, gamma, cp, cm = 2048, 2**12, 0.8, 0.5, -2.5
    v = random_cov(3, gen)
    _, cond_mean, control = one_step(v, n, s, gamma, cp, cm, seed=12)
    est, se = mean_with_se(n * to_triu(cond_mean - control))
    pred = resnet_relu_drift(v, gamma, cp, cm)[0].numpy()
    x = abs(cp + cm) / math.sqrt(n) + (cp**2 + cm**2) / (2 * n)
    for i in range(len(pred)):
        assert_close_mc(pred[i], est[i], se[i], model_err=abs(pred[i]) * x / (1 - x), what=f"drift[{i}]")


def test_diffusion_vs_finite_linear_network():
    """n Cov(V_{l+1}) vs Sigma_res(V) for the linear layer (c_+ = c_- = 0). There the finite-n covariance is exact
    (App. B, Lemmas B.1-B.3 with K_1(rho) = rho, K_2 the Gaussian fourth moment, and the Wishart identity
    E[H^{ab} H^{dw}] = V^{ab} V^{dw} + (V^{ad} V^{bw} + V^{aw} V^{bd}) / n):
        n Cov = 2 gamma^2 Sigma_lin + gamma^4 / n (2 [V^{ab} V^{dw}] + Sigma_lin),
    so the only tolerance is Z x SE."""
    gen = torch.Generator().manual_seed(21)
    n, s, gamma = 256, 2**14, 0.7
    v = random_cov(3, gen)
    v_next, _, _ = one_step(v, n, s, gamma, 0.0, 0.0, seed=22)
    est, se = cov_with_se(math.sqrt(n) * to_triu(v_next))
    vt = to_triu(v)
    sl = sigma_lin(v)[0]
    exact = (resnet_relu_diffusion(v, gamma)[0] + gamma**4 / n * (2 * torch.outer(vt, vt) + sl)).numpy()
    assert np.all(np.abs(est - exact) <= Z * se), (est - exact) / se
