"""Theorem 3.2 of Noci et al.: the covariance SDE of a residual network with shaped-ReLU layers.

Network (Eq. 4): X_{l+1} = lambda X_l + gamma sigma_s(X_l W_pre / sqrt n) sqrt(c/n) W_post, with shaped ReLU
sigma_s(x) = s_+ max(x, 0) + s_- min(x, 0), slopes s_pm = 1 + c_pm / sqrt(n), c^{-1} = E sigma_s(g)^2,
lambda^2 + gamma^2 = 1, i.i.d. N(0, 1) weights. With V = X X^T / n and t = l / n (Eq. 5):

    dV = b_res(V) dt + Sigma_res(V)^{1/2} dB,
    b_res(V)     = gamma^2 [nu(rho^{ab}) sqrt(V^{aa} V^{bb})]_{a<=b},
    Sigma_res(V) = 2 gamma^2 Sigma_lin(V),
    nu(rho)      = (c_+ - c_-)^2 / (2 pi) * (sqrt(1 - rho^2) - rho arccos rho)            (Eq. 6).

Reading of the paper where it is inconsistent: App. B (below Eq. 23) prints nu with (c_+ + c_-)^2 and
"+ rho arccos rho". We implement the main text's Eq. 6, because it is what the expansion gives: writing
sigma_s(x) = a x + b |x| with a = 1 + (c_+ + c_-)/(2 sqrt n), b = (c_+ - c_-)/(2 sqrt n), E|g1||g2| =
(2/pi)(sqrt(1-rho^2) + rho arcsin rho) and c = 1/(a^2 + b^2), one gets
c K_1(rho) = rho + b^2 c ((2/pi)(sqrt(1-rho^2) + rho arcsin rho) - rho) = rho + nu(rho)/n + O(n^{-3/2}) with Eq. 6
(nu(1) = 0: identical tokens stay identical). The test file checks this against a Monte Carlo of Eq. 4.
"""

from __future__ import annotations

import math

import torch

from ..core.validate import check_range
from .triu import as_cov_batch, correlation, sigma_lin, to_triu

__all__ = ["nu_shaped_relu", "resnet_relu_drift", "resnet_relu_diffusion", "check_gamma"]


def check_gamma(gamma, name: str = "gamma") -> float:
    """Residual-branch weight gamma in [0, 1] (lambda = sqrt(1 - gamma^2), Noci et al. Eq. 1/4)."""
    return float(check_range(gamma, name, lo=0.0, hi=1.0))


def nu_shaped_relu(rho, c_plus: float, c_minus: float) -> torch.Tensor:
    """nu(rho) = (c_+ - c_-)^2 / (2 pi) (sqrt(1 - rho^2) - rho arccos rho), Noci et al. Eq. 6 (Li et al. 2022).

    The O(1/n) correction of the normalised shaped-ReLU kernel: c E[sigma_s(g1) sigma_s(g2)] = rho + nu(rho)/n +
    O(n^{-3/2}) for standard Gaussians of correlation rho. rho is clipped to [-1, 1] (round-off). Any shape.
    """
    c_plus = float(check_range(c_plus, "c_plus"))
    c_minus = float(check_range(c_minus, "c_minus"))
    r = torch.as_tensor(rho, dtype=torch.float64).clamp(-1.0, 1.0)
    return (c_plus - c_minus) ** 2 / (2.0 * math.pi) * (torch.sqrt(1.0 - r * r) - r * torch.arccos(r))


def resnet_relu_drift(v, gamma, c_plus: float, c_minus: float) -> torch.Tensor:
    """b_res(V) = gamma^2 [nu(rho^{ab}) sqrt(V^{aa} V^{bb})]_{a<=b} (Noci et al. Thm. 3.2, Eq. 5-6).

    ``v``: (S, m, m) or (m, m) covariances; returns (S, p) upper-triangle drifts, p = m(m+1)/2. The diagonal drift is
    gamma^2 nu(1) V^{aa} = 0. Assumes lambda^2 + gamma^2 = 1 and slopes s_pm = 1 + c_pm / sqrt(n).
    """
    gamma = check_gamma(gamma)
    v = as_cov_batch(v)
    d = torch.diagonal(v, dim1=-2, dim2=-1).clamp_min(0.0).sqrt()
    scale = d[..., :, None] * d[..., None, :]
    return gamma**2 * to_triu(nu_shaped_relu(correlation(v), c_plus, c_minus) * scale)


def resnet_relu_diffusion(v, gamma) -> torch.Tensor:
    """Sigma_res(V) = 2 gamma^2 Sigma_lin(V), Sigma_lin = [V^{ad}V^{bw} + V^{aw}V^{bd}] (Noci et al. Thm. 3.2).

    The factor 2 counts the two weight matrices per residual layer (W_pre and W_post); the diffusion does not depend
    on the activation at leading order (App. B, Lemmas B.1-B.3). Returns (S, p, p).
    """
    gamma = check_gamma(gamma)
    return 2.0 * gamma**2 * sigma_lin(v)
