"""Tests for sigprop.sde.integrate: Euler-Maruyama on linear SDEs with known moments, dt refinement, seeding, the
square-root policies and the PSD projection."""

import math

import numpy as np
import pytest
import torch

from sigprop.sde.integrate import euler_maruyama, sqrt_psd
from sigprop.sde.transformer import SDECoefficients, covariance_sde
from tests.helpers import Z, assert_close_mc, mc_mean


def scalar(drift, diffusion):
    """A scalar SDE (m = 1, p = 1) as SDECoefficients."""
    return SDECoefficients(lambda v: drift(v[:, 0, :]), lambda v: diffusion(v[:, 0, :])[..., None])


def test_geometric_brownian_motion_moments():
    """dV = mu V dt + s V dB. Euler-Maruyama moments are exact recursions: E V_N = V0 (1 + mu dt)^N and
    E V_N^2 = V0^2 ((1 + mu dt)^2 + s^2 dt)^N; they differ from the SDE's V0 e^{mu T}, V0^2 e^{(2 mu + s^2) T} by
    O(dt), which is the allowance for the comparison with the exact solution."""
    mu, sig, v0, t, dt, s = 0.3, 0.4, 1.5, 1.0, 0.01, 2**14
    path = euler_maruyama(scalar(lambda v: mu * v, lambda v: (sig * v) ** 2), [[v0]], t, dt, s, seed=3,
                          eig_bounds=None)
    x = torch.from_numpy(path.v[:, -1, 0, 0])
    n = path.n_steps
    m1, se1 = mc_mean(x)
    m2, se2 = mc_mean(x**2)
    em1, em2 = v0 * (1 + mu * dt) ** n, v0**2 * ((1 + mu * dt) ** 2 + sig**2 * dt) ** n
    ex1, ex2 = v0 * math.exp(mu * t), v0**2 * math.exp((2 * mu + sig**2) * t)
    assert_close_mc(em1, m1, se1, what="EM mean")
    assert_close_mc(em2, m2, se2, what="EM second moment")
    assert_close_mc(ex1, m1, se1, model_err=abs(ex1 - em1), what="exact mean")
    assert_close_mc(ex2, m2, se2, model_err=abs(ex2 - em2), what="exact second moment")
    assert path.psd_interventions == 0


def test_ornstein_uhlenbeck_mean_and_variance():
    """dV = -theta V dt + s dB (may go negative: psd='none'). Exact: mean V0 e^{-theta T}, variance
    s^2 (1 - e^{-2 theta T}) / (2 theta); EM: V0 q^N and s^2 dt (1 - q^{2N}) / (1 - q^2), q = 1 - theta dt."""
    th, sig, v0, t, dt, s = 1.2, 0.8, 2.0, 1.5, 0.01, 2**14
    path = euler_maruyama(scalar(lambda v: -th * v, lambda v: torch.full_like(v, sig**2)), [[v0]], t, dt, s,
                          seed=4, psd="none", eig_bounds=None)
    x = torch.from_numpy(path.v[:, -1, 0, 0])
    q, n = 1 - th * dt, path.n_steps
    em_mean, em_var = v0 * q**n, sig**2 * dt * (1 - q ** (2 * n)) / (1 - q**2)
    ex_mean, ex_var = v0 * math.exp(-th * t), sig**2 * (1 - math.exp(-2 * th * t)) / (2 * th)
    m, se = mc_mean(x)
    var, se_var = mc_mean((x - x.mean()) ** 2)
    assert_close_mc(ex_mean, m, se, model_err=abs(ex_mean - em_mean), what="OU mean")
    assert_close_mc(ex_var, var, se_var, model_err=abs(ex_var - em_var), what="OU variance")


def test_halving_dt_keeps_quantiles():
    """Shaped attention, m = 2: the fraction of dt/2 samples below the dt quantiles of rho at T matches the level
    within Z sqrt(2 q (1 - q) / S) (two independent samples; a distribution-free test of equal quantiles)."""
    coeffs = covariance_sde("shaped_attention", gamma=0.5, tau0=1.0)
    v0 = torch.tensor([[1.0, 0.2], [0.2, 1.0]], dtype=torch.float64)
    s = 2**13
    a = euler_maruyama(coeffs, v0, 0.5, 0.02, s, seed=5).corr()[:, -1]
    b = euler_maruyama(coeffs, v0, 0.5, 0.01, s, seed=6).corr()[:, -1]
    for q in (0.05, 0.25, 0.5, 0.75, 0.95):
        frac = float(np.mean(b <= np.quantile(a, q)))
        assert abs(frac - q) <= Z * math.sqrt(2 * q * (1 - q) / s), (q, frac)


def test_seeding_recording_and_psd():
    coeffs = covariance_sde("shaped_transformer", gamma=0.6, tau0=1.0, c_plus=0.0, c_minus=-1.0)
    v0 = torch.tensor([[1.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.0]], dtype=torch.float64)
    p1 = euler_maruyama(coeffs, v0, 0.2, 0.01, 64, record_times=[0.0, 0.1, 0.2], seed=7)
    p2 = euler_maruyama(coeffs, v0, 0.2, 0.01, 64, record_times=[0.0, 0.1, 0.2], seed=7)
    p3 = euler_maruyama(coeffs, v0, 0.2, 0.01, 64, record_times=[0.0, 0.1, 0.2], seed=8)
    assert np.array_equal(p1.v, p2.v) and not np.array_equal(p1.v, p3.v)
    assert p1.v.shape == (64, 3, 3, 3) and np.allclose(p1.times, [0, 0.1, 0.2])
    assert np.allclose(p1.v[:, 0], v0.numpy())
    # nearly singular start with large noise: the projection acts and every recorded V is PSD
    near = torch.tensor([[1.0, 0.9999], [0.9999, 1.0]], dtype=torch.float64)
    p = euler_maruyama(covariance_sde("resnet_relu", gamma=1.0, c_minus=-1.0), near, 0.5, 0.05, 256, seed=9,
                       eig_bounds=None)
    assert p.psd_interventions > 0
    assert np.linalg.eigvalsh(p.v).min() >= -1e-12
    with pytest.raises(ValueError, match="t_end"):
        euler_maruyama(coeffs, v0, 0.105, 0.01, 4)
    with pytest.raises(ValueError, match="record_times"):
        euler_maruyama(coeffs, v0, 0.1, 0.01, 4, record_times=[0.015])
    with pytest.raises(ValueError, match="psd"):
        euler_maruyama(coeffs, v0, 0.1, 0.01, 4, psd="abs")


@pytest.mark.parametrize("method", ["eigh", "cholesky"])
def test_sqrt_psd(method):
    gen = torch.Generator().manual_seed(10)
    g = torch.randn((5, 4, 4), generator=gen, dtype=torch.float64)
    sig = g @ g.mT
    sig[0] = torch.outer(g[0, :, 0], g[0, :, 0])      # rank one: Cholesky fails without jitter, falls back / jitters
    r, _ = sqrt_psd(sig, method)
    scale = sig.abs().amax(dim=(-1, -2), keepdim=True)
    assert torch.all((r @ r.mT - sig).abs() <= 1e-9 * scale)
