"""The sweep's random inputs have exactly the requested law (else every sweep would be biased)."""

import math

import numpy as np
import torch

from sigprop.verify.sampling import correlated_gaussian, linear_weights
from tests.helpers import Z


def test_correlated_gaussian_moments():
    g = torch.Generator().manual_seed(0)
    x = correlated_gaussian(1, 1, 20000, 2, 8, [1.5], [2.0], [0.6], g, dtype=torch.float64)[0, 0]
    n = x.shape[0] * x.shape[2]
    assert abs(float(x.mean()) - 1.5) <= Z * math.sqrt(2.0 / n) * 2  # token pairs share ε: ≤ 2x the iid SE
    xc = x - 1.5
    var = float((xc**2).mean())
    cov = float((xc[:, 0] * xc[:, 1]).mean())
    # SE of a sample variance of Gaussian data: σ²·sqrt(2/n) per independent pair (pessimistic for the pooled mean).
    assert abs(var - 2.0) <= Z * 2.0 * math.sqrt(2.0 / n)
    assert abs(cov / var - 0.6) <= Z * math.sqrt(1.0 / n) * (1 + 0.6**2)


def test_stratified_linear_weights_keep_the_gaussian_law():
    g = torch.Generator().manual_seed(1)
    d_in, d_out, draws, std = 16, 8, 512, 0.3
    w = linear_weights(1, draws, d_out, d_in, np.array([std]), g, replicates=8).double()[0]
    n = w.numel()
    assert abs(float(w.mean())) <= Z * std / math.sqrt(n) * 2
    assert abs(float(w.var()) / std**2 - 1) <= Z * math.sqrt(2.0 / n) * 2
    # Row sums are N(0, d_in std²); stratified, their sample second moment lands closer than one i.i.d. standard
    # error sqrt(2/rows) (an i.i.d. draw would exceed that a third of the time).
    c = w.sum(dim=-1)
    assert abs(float(c.pow(2).mean()) / (d_in * std**2) - 1) <= math.sqrt(2.0 / c.numel())
    # Entries of different rows stay uncorrelated.
    a, b = w[:, 0, :].reshape(-1), w[:, 1, :].reshape(-1)
    assert abs(float((a * b).mean())) <= Z * std**2 / math.sqrt(a.numel())
