"""Tests for sigprop.sde.shaped_attention (Noci et al. Thm. 4.2, Eq. 9-10): closed forms vs the printed sums,
identities, and drift / diffusion vs a one-step Monte Carlo of the shaped-attention residual layer (Eq. 1, 9).

One-step sampler (exact in distribution): with X = sqrt(n) [V^{1/2}, 0], X W^Q / sqrt(n) = V^{1/2} G1 and
X W^K / sqrt(n) = V^{1/2} G2 (G1, G2: m x n_k standard Gaussian), so Y = V^{1/2} G1 G2^T V^{1/2}; for the values
X W^V X^T / n^{3/2} = V^{1/2} M V^{1/2} / sqrt(n) with M = W^V[:m, :m], and X W^V W^{V,T} X^T / n^2 =
V^{1/2} (M M^T + Wishart(I, n - m)) V^{1/2} / n. Cost independent of n, so n can be taken large: the neglected
terms (Softmax Taylor remainder, Wishart 1/n corrections) are O(1/n) relative; we allow max|coef| / sqrt(n) (the
order O(n^{-1/2}) of the convergence statement, a conservative bound at n = 1e6)."""

import math

import numpy as np
import pytest
import torch

from sigprop.sde.shaped_attention import (
    attention_a_term,
    s1_tensor,
    s2_matrix,
    shaped_attention_diffusion,
    shaped_attention_drift,
)
from sigprop.sde.triu import sigma_lin, to_triu, triu_pairs
from tests.helpers import Z
from tests.sde.sde_helpers import bartlett_wishart_identity, cov_with_se, mean_with_se, random_cov


def test_closed_forms_match_printed_sums():
    gen = torch.Generator().manual_seed(5)
    m, gamma, tau0 = 4, 0.6, 1.3
    v = random_cov(m, gen)
    s1 = s1_tensor(v)[0]                 # [a, d, b, w]
    s2 = s2_matrix(v)[0]
    vv = v.numpy()
    b = np.zeros((m, m))
    for a in range(m):
        for bb in range(m):
            t1 = sum(vv[nu, ka] * s1[a, nu, bb, ka] for nu in range(m) for ka in range(m)) / m**2
            t2 = sum(vv[bb, nu] * s2[a, nu] + vv[a, nu] * s2[bb, nu] for nu in range(m)) / (2 * m)
            b[a, bb] = gamma**2 / tau0**2 * (t1 + t2)
    assert np.allclose(to_triu(torch.from_numpy(b)).numpy(), shaped_attention_drift(v, gamma, tau0)[0].numpy())
    ia, ib = triu_pairs(m)
    p = len(ia)
    big_a = np.zeros((p, p))
    for i in range(p):
        a, bb = int(ia[i]), int(ib[i])
        for j in range(p):
            d, w = int(ia[j]), int(ib[j])
            big_a[i, j] = sum(vv[a, ka] * vv[d, nu] * s1[bb, ka, w, nu] + vv[a, ka] * vv[w, nu] * s1[bb, ka, d, nu]
                              + vv[bb, nu] * vv[d, ka] * s1[a, nu, w, ka] + vv[bb, nu] * vv[w, ka] * s1[a, nu, d, ka]
                              for nu in range(m) for ka in range(m)) / m**2
    assert np.allclose(big_a, attention_a_term(v)[0].numpy())
    # S2 as printed in Eq. 10, entry by entry
    xb = vv.mean(axis=1)
    assert np.isclose(float(s2[1, 2]), vv[1, 1] * (vv[2, 2] - 2 * xb[2] + 2 * vv.mean() - np.trace(vv) / m))


def test_identities():
    gen = torch.Generator().manual_seed(6)
    v = random_cov(3, gen)
    assert torch.count_nonzero(shaped_attention_drift(v, 0.0, 1.0)) == 0
    assert torch.count_nonzero(shaped_attention_diffusion(v, 0.0, 1.0)) == 0
    sig = shaped_attention_diffusion(v, 0.8, 0.7)[0]
    assert torch.allclose(sig, sig.T)
    assert torch.linalg.eigvalsh(sig).min() > 0
    # one token: attention is the identity, no drift, linear diffusion gamma^2 (2 - gamma^2) Sigma_lin
    v1 = torch.tensor([[2.0]], dtype=torch.float64)
    assert torch.count_nonzero(shaped_attention_drift(v1, 0.8, 1.0)) == 0
    assert torch.allclose(shaped_attention_diffusion(v1, 0.8, 1.0), 0.64 * 1.36 * sigma_lin(v1))
    # the drift scales as gamma^2 / tau0^2 and is cubic in V
    assert torch.allclose(shaped_attention_drift(2 * v, 0.5, 2.0), 8 * shaped_attention_drift(v, 1.0, 1.0) / 16)
    with pytest.raises(ValueError, match="tau0"):
        shaped_attention_drift(v, 0.5, 0.0)


def one_step(v, n, nk, s, gamma, tau0, seed):
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    m = v.shape[0]
    lam = math.sqrt(1 - gamma**2)
    w, q = torch.linalg.eigh(v)
    root = q @ torch.diag(w.sqrt()) @ q.T
    g1 = torch.randn((s, m, nk), generator=gen, dtype=torch.float64)
    g2 = torch.randn((s, m, nk), generator=gen, dtype=torch.float64)
    y = root @ g1 @ g2.transpose(-1, -2) @ root
    tau = tau0 * math.sqrt(n * nk)
    a = torch.eye(m, dtype=torch.float64) + torch.softmax(y / tau, dim=-1) - 1.0 / m
    lin = (y - y.mean(dim=-1, keepdim=True)) / (tau * m)       # first-order Softmax term: mean zero exactly
    mv = torch.randn((s, m, m), generator=gen, dtype=torch.float64)
    wish = (mv @ mv.transpose(-1, -2) + bartlett_wishart_identity(s, m, n - m, rng)) / n
    t1 = root @ mv.transpose(-1, -2) @ root @ a.transpose(-1, -2) / math.sqrt(n)
    v_next = lam**2 * v + lam * gamma * (t1 + t1.transpose(-1, -2)) + gamma**2 * a @ root @ wish @ root @ a.mT
    cond = gamma**2 * (a @ v @ a.mT - v)                       # E[V_{l+1} - V_l | W^Q, W^K]
    control = gamma**2 * (lin @ v + v @ lin.mT)
    return v_next, cond, control


def test_drift_vs_finite_network():
    gen = torch.Generator().manual_seed(31)
    n, nk, s, gamma, tau0 = 10**6, 8, 2**15, 0.9, 0.8
    v = random_cov(3, gen)
    _, cond, control = one_step(v, n, nk, s, gamma, tau0, seed=32)
    est, se = mean_with_se(n * to_triu(cond - control))
    pred = shaped_attention_drift(v, gamma, tau0)[0].numpy()
    allow = np.abs(pred).max() / math.sqrt(n)
    assert np.all(np.abs(est - pred) <= Z * se + allow), (est, pred, se)


def test_diffusion_vs_finite_network():
    gen = torch.Generator().manual_seed(41)
    n, nk, s, gamma, tau0 = 10**6, 8, 2**15, 0.9, 0.8
    v = random_cov(3, gen)
    v_next, _, _ = one_step(v, n, nk, s, gamma, tau0, seed=42)
    est, se = cov_with_se(math.sqrt(n) * to_triu(v_next))
    pred = shaped_attention_diffusion(v, gamma, tau0)[0].numpy()
    allow = np.abs(pred).max() / math.sqrt(n)
    assert np.all(np.abs(est - pred) <= Z * se + allow), ((est - pred) / se)
    # the A term matters at this resolution: without it the prediction is rejected
    lin_only = (gamma**2 * (2 - gamma**2) * sigma_lin(v)[0]).numpy()
    assert np.any(np.abs(est - lin_only) > Z * se + allow)
