"""Tests for sigprop.sde.triu: vectorisation round trip, Sigma_lin identities, Sigma_lin vs Wishart Monte Carlo."""

import numpy as np
import pytest
import torch

from sigprop.sde.triu import as_cov_batch, correlation, from_triu, sigma_lin, to_triu, triu_pairs
from tests.helpers import Z
from tests.sde.sde_helpers import bartlett_wishart_identity, cov_with_se, random_cov


def test_round_trip_and_order():
    gen = torch.Generator().manual_seed(1)
    v = torch.stack([random_cov(4, gen) for _ in range(3)])
    x = to_triu(v)
    assert x.shape == (3, 10)
    assert torch.equal(from_triu(x, 4), v)
    a, b = triu_pairs(3)
    assert list(zip(a.tolist(), b.tolist(), strict=True)) == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]


def test_sigma_lin_identities():
    gen = torch.Generator().manual_seed(2)
    v = random_cov(3, gen)
    s = sigma_lin(v)[0]
    assert torch.allclose(s, s.T)
    assert torch.linalg.eigvalsh(s).min() > 0  # V positive definite -> Sigma_lin positive definite
    # diagonal entry (aa, aa) = 2 (V^{aa})^2 ; (ab, ab) = V^{aa} V^{bb} + (V^{ab})^2
    assert torch.isclose(s[0, 0], 2 * v[0, 0] ** 2)
    assert torch.isclose(s[1, 1], v[0, 0] * v[1, 1] + v[0, 1] ** 2)


def test_sigma_lin_is_wishart_covariance():
    """n Cov(upper triangle of Wishart(V, n)/n) = Sigma_lin(V) exactly (Isserlis), checked by Monte Carlo."""
    gen = torch.Generator().manual_seed(3)
    rng = np.random.default_rng(3)
    m, n, s = 3, 50, 2**15
    v = random_cov(m, gen)
    lv = torch.linalg.cholesky(v)
    w = lv @ bartlett_wishart_identity(s, m, n, rng) @ lv.T / n
    est, se = cov_with_se(np.sqrt(n) * to_triu(w))
    pred = sigma_lin(v)[0].numpy()
    assert np.all(np.abs(est - pred) <= Z * se), (est, pred, se)


def test_validation_and_correlation():
    with pytest.raises(ValueError, match="shape"):
        as_cov_batch(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="symmetric"):
        as_cov_batch(torch.tensor([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="m must be"):
        triu_pairs(0)
    v = torch.tensor([[4.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    assert torch.isclose(correlation(v)[0, 1], torch.tensor(0.5, dtype=torch.float64))
    assert correlation(torch.zeros(2, 2, dtype=torch.float64))[0, 1] == 0
