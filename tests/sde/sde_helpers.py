"""Helpers for the SDE tests: Monte Carlo covariance of upper-triangle vectors with standard errors."""

from __future__ import annotations

import numpy as np
import torch

from tests.helpers import mc_mean


def random_cov(m: int, gen: torch.Generator, ridge: float = 0.3) -> torch.Tensor:
    """A well-conditioned random m x m covariance with unit-order entries."""
    g = torch.randn((m, m + 2), generator=gen, dtype=torch.float64)
    v = g @ g.T / (m + 2) + ridge * torch.eye(m, dtype=torch.float64)
    return v


def cov_with_se(y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Sample covariance of the rows of y (S, p) and the standard error of every entry (batch means of products)."""
    yc = y - y.mean(dim=0)
    p = y.shape[1]
    est = np.zeros((p, p))
    se = np.zeros((p, p))
    for i in range(p):
        for j in range(p):
            est[i, j], se[i, j] = mc_mean(yc[:, i] * yc[:, j])
    return est, se


def mean_with_se(y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Mean of the rows of y (S, p) and its standard error per entry."""
    out = [mc_mean(y[:, i]) for i in range(y.shape[1])]
    return np.array([o[0] for o in out]), np.array([o[1] for o in out])


def bartlett_wishart_identity(s: int, m: int, dof: int, rng: np.random.Generator) -> torch.Tensor:
    """S draws of a Wishart(I_m, dof) matrix by Bartlett's decomposition (L L^T, L lower triangular with
    L_ii = sqrt(chi2(dof - i)) and L_ij ~ N(0, 1) below the diagonal)."""
    low = np.tril(rng.standard_normal((s, m, m)), k=-1)
    diag = np.sqrt(rng.chisquare(dof - np.arange(m), size=(s, m)))
    low[:, np.arange(m), np.arange(m)] = diag
    t = torch.from_numpy(low)
    return t @ t.transpose(-1, -2)
