"""Zipf tokens: probabilities, empirical frequencies and the embedding's repetition correlation (Kedia App. A.1)."""

import math

import numpy as np
import pytest
import torch

from sigprop.components.embedding import repetition_correlation, zipf_correlation
from sigprop.data.zipf import zipf_probs, zipf_tokens
from tests.helpers import Z


def test_probs_identities():
    p = zipf_probs(100, 1.0)
    assert p.dtype == np.float64 and math.isclose(p.sum(), 1.0, rel_tol=1e-15)
    harmonic = sum(1.0 / i for i in range(1, 101))
    assert math.isclose(p[0], 1.0 / harmonic, rel_tol=1e-14)  # Kedia App. A.1: c = 1 / Σ 1/i
    i = np.arange(1, 101)
    assert np.allclose(p[0] / p, i, rtol=1e-13)  # p_1 / p_i = i for s = 1
    assert np.allclose(zipf_probs(100, 2.0)[0] / zipf_probs(100, 2.0), i**2.0, rtol=1e-13)
    assert np.allclose(zipf_probs(7, 0.0), 1.0 / 7)  # s = 0 is uniform
    assert zipf_probs(1).tolist() == [1.0]


@pytest.mark.parametrize("exponent", [1.0, 1.5])
def test_frequencies_match_probs(exponent):
    """Each id's empirical frequency is Binomial(N, p_i)/N: within Z·sqrt(p_i(1 − p_i)/N) of p_i."""
    V, first = 64, 5
    g = torch.Generator().manual_seed(11)
    x = zipf_tokens(128, 1024, V, exponent=exponent, generator=g, first_id=first)
    assert x.dtype == torch.int64 and x.shape == (128, 1024)
    assert int(x.min()) >= first and int(x.max()) < first + V
    n = x.numel()
    freq = torch.bincount(x.reshape(-1) - first, minlength=V).double().numpy() / n
    p = zipf_probs(V, exponent)
    se = np.sqrt(p * (1.0 - p) / n)
    assert np.all(np.abs(freq - p) <= Z * se), np.max(np.abs(freq - p) / se)


@pytest.mark.parametrize(("V", "exponent"), [(1000, 1.0), (50, 1.0), (200, 1.3)])
def test_repetition_correlation_matches_theory(V, exponent):
    """E[repetition correlation of a batch] = Σ p_i² exactly for i.i.d. tokens (zipf_correlation, approx="exact");
    the standard error comes from the spread of K independent batches."""
    g = torch.Generator().manual_seed(5)
    K = 40
    r = np.array([repetition_correlation(zipf_tokens(16, 128, V, exponent=exponent, generator=g)) for _ in range(K)])
    est, se = r.mean(), r.std(ddof=1) / math.sqrt(K)
    pred = zipf_correlation(V, approx="exact", exponent=exponent)
    assert math.isclose(pred, float(np.sum(zipf_probs(V, exponent) ** 2)), rel_tol=1e-12)
    assert abs(est - pred) <= Z * se, (est, se, pred)


def test_reproducible_with_generator():
    a = zipf_tokens(4, 8, 50, generator=torch.Generator().manual_seed(1))
    b = zipf_tokens(4, 8, 50, generator=torch.Generator().manual_seed(1))
    c = zipf_tokens(4, 8, 50, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert zipf_tokens(3, 5, 1, first_id=9).eq(9).all()  # one-token vocabulary


def test_errors():
    for kw, field in [({"vocab_size": 0}, "vocab_size"), ({"vocab_size": 2.5}, "vocab_size"),
                      ({"exponent": -1.0}, "exponent"), ({"exponent": float("nan")}, "exponent"),
                      ({"exponent": "big"}, "exponent"), ({"batch_size": 0}, "batch_size"),
                      ({"seq_len": -1}, "seq_len"), ({"first_id": -1}, "first_id")]:
        args = {"batch_size": 2, "seq_len": 3, "vocab_size": 10} | kw
        with pytest.raises(ValueError, match=field):
            zipf_tokens(**args)
