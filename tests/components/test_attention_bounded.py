"""The bounded sampled attention rule: the same expectation as the sampled rule (its width reduction and its query
subsampling are exact), checked against the sampled rule on the same configuration with a tolerance of Z standard
errors of both samples; the Bartlett law of its weights; where "auto" takes it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention import SAMPLED_MAX_NUMBERS, resolve_approx, sampled_numbers
from sigprop.components.attention_bounded import _bartlett, bounded_heads, sample_bounded
from sigprop.components.attention_sampled import sample_attention
from sigprop.core.moments import Moments
from tests.helpers import Z

STATS = ("fwd_var", "fwd_cov", "in_var", "in_cov", "sh_var", "sh_cov")


def _qk_var(s2, r, d):
    """σ²_q = σ²_k giving the mean score variance s² = (1 − r) d² σ²_q σ²_k at unit input variance."""
    return math.sqrt(s2 / ((1.0 - r) * d * d))


# (d_in, d_k, L, s², r, causal, rotary base, dropout, mean): rotary causal; bidirectional with dropout and a mean;
# a width below 2·d_k (no coordinates left over); a width of 16·d_k (most coordinates taken in expectation)
CONFIGS = [(64, 16, 24, 2.0, 0.3, True, 10000.0, 0.0, 0.0), (64, 16, 24, 0.5, 0.6, False, None, 0.1, 0.3),
           (24, 16, 24, 1.0, 0.3, True, 10000.0, 0.0, 0.0), (256, 8, 16, 4.0, 0.2, True, None, 0.0, 0.0)]


@pytest.mark.parametrize("d,dk,L,s2,r,causal,rope,p,mean", CONFIGS)
@pytest.mark.parametrize("queries", [None, 6])
def test_bounded_rule_estimates_the_sampled_rules_expectation(d, dk, L, s2, r, causal, rope, p, mean, queries):
    """All query positions (the width reduction alone) and 6 of them (the reweighting too): every statistic within
    Z standard errors of the two samples, which are independent (different seeds)."""
    sq = _qk_var(s2, r, d)
    old = sample_attention(1.0, r, d, dk, L, sq, sq, 1.0 / d, p, causal, mean, heads=256, seed=1, rope=rope)
    new = sample_bounded(1.0, r, d, dk, L, sq, sq, 1.0 / d, p, causal, mean, heads=128, seed=2, rope=rope,
                         queries=queries or L)
    for stat in STATS:
        a, b = getattr(old, stat), getattr(new, stat)
        se = math.hypot(getattr(old, stat + "_se"), getattr(new, stat + "_se"))
        assert abs(a - b) <= Z * se, (stat, a, b, se)


def test_bartlett_factor_has_the_law_of_a_gaussian_matrix_qr():
    """R of the QR decomposition of a d × n Gaussian matrix: E R_jj² = d − j on the diagonal, entries above it
    N(0, 1), zero below; against R drawn by QR itself (sign-fixed to a positive diagonal)."""
    d, n, draws = 12, 8, 4000
    gen = torch.Generator().manual_seed(3)
    ours = torch.stack([_bartlett(d if d < n else n, n, d, gen) for _ in range(draws)])
    qr = torch.linalg.qr(torch.randn(draws, d, n, dtype=torch.float64, generator=gen)).R
    qr = qr * torch.sign(torch.diagonal(qr, dim1=-2, dim2=-1))[..., :, None]
    for stat in (lambda t: t.pow(2), lambda t: t):
        a, b = stat(ours), stat(qr)
        se = torch.sqrt(a.var(0) / draws + b.var(0) / draws) + 1e-12
        assert torch.all((a.mean(0) - b.mean(0)).abs() <= Z * se)
    assert torch.all(ours.tril(-1) == 0.0)


def test_auto_takes_the_bounded_rule_where_the_sampled_draw_would_not_fit():
    m = Moments(0.0, 1.0, 0.3)
    sq = 0.02**2
    assert sampled_numbers(128, 128, 256) <= SAMPLED_MAX_NUMBERS  # the presets' own sizes keep the sampled rule
    assert resolve_approx("auto", m, 256, sq, sq, True, 10000.0, 128, 128) == "sampled"
    assert resolve_approx("auto", m, 4096, sq, sq, True, 500000.0, 8192, 128) == "bounded"
    assert resolve_approx("auto", m, 4096, 1e-12, 1e-12, True, None, 8192, 128) == "exact"  # small scores
    assert resolve_approx("sampled", m, 4096, sq, sq, True, None, 8192, 128) == "sampled"  # asked for: kept


def test_bounded_heads_keep_the_draw_within_budget():
    assert bounded_heads(128, 128, 256, 64) == 128
    assert bounded_heads(128, 8192, 4096, 128) == 2  # at least two, for a standard error
    assert bounded_heads(128, 1024, 256, 64) == 16  # 2²¹ coordinates: 16 heads of 1024 × 128


def test_bounded_draw_is_cached_reproducible_and_validated():
    args = (1.0, 0.3, 64, 16, 32, 1e-3, 1e-3, 1.0 / 64, 0.0, True, 0.0, 4, 11)
    a = sample_bounded(*args)
    assert sample_bounded(*args) is a  # the backward rule reuses the forward's draw
    assert sample_bounded(*args[:-1], 12).fwd_var != a.fwd_var
    assert np.isfinite(a.fwd_var_se) and a.heads == 4
    with pytest.raises(ValueError, match="queries"):
        sample_bounded(*args, queries=1)
    with pytest.raises(ValueError, match="token correlation"):
        sample_bounded(1.0, 1.5, 64, 16, 32, 1e-3, 1e-3, 1e-2)
