"""The causal closed form (:mod:`sigprop.components.attention_causal`) against the sampled rule, the Monte Carlo of
the same model (which ``tests/components/test_attention_sampled.py`` checks against the module itself), and the
score paths' weight K against a direct Monte Carlo of the softmax."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention import (
    CAUSAL_MAX_S2,
    attention_backward,
    attention_forward,
    resolve_approx,
)
from sigprop.components.attention_sampled import sample_attention
from sigprop.components.attention_theory import softmax_score_weights
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z, mc_mean

D, DK = 64, 16


def _qk_var(s2, r, d=D):
    """σ²_q = σ²_k giving the mean score variance s² = (1 − r) d² σ²_q σ²_k at unit input variance."""
    return math.sqrt(s2 / ((1.0 - r) * d * d))


def _gaps(s2, r, p, L, heads=512, seed=1, d=D, dk=DK):
    """(closed form − sampled)/SE for the forward variance and covariance and, at output-gradient correlation 0
    and 1, the gradient variance and covariance; and the relative gaps of the gradient variances."""
    sq, sv = _qk_var(s2, r, d), 1.0 / d
    s = sample_attention(1.0, r, d, dk, L, sq, sq, sv, p, True, heads=heads, seed=seed)
    m = Moments(0.0, 1.0, r)
    f = attention_forward(m, d, dk, L, sq, sq, sv, p, causal=True, approx="exact")
    z = [(f.var - s.fwd_var) / s.fwd_var_se, (f.var * f.corr - s.fwd_cov) / s.fwd_cov_se]
    rel = []
    for rg, var, var_se, cov, cov_se in ((0.0, s.in_var, s.in_var_se, s.in_cov, s.in_cov_se),
                                          (1.0, s.sh_var, s.sh_var_se, s.sh_cov, s.sh_cov_se)):
        b = attention_backward(GradMoments(1.0, rg), m, d, dk, L, sq, sq, sv, p, causal=True, approx="exact")
        z += [(b.var - var) / var_se, (b.var * b.corr - cov) / cov_se]
        rel.append((b.var / var - 1.0, var_se / var))
    return np.array(z), rel


@pytest.mark.parametrize("s2,r,p,L", [(0.05, 0.3, 0.0, 32), (0.05, 0.8, 0.1, 32), (0.2, 0.3, 0.1, 32),
                                      (0.05, 0.5, 0.0, 2), (0.05, 0.5, 0.0, 5)])
def test_causal_closed_form_is_the_sampled_expectation_at_small_scores(s2, r, p, L):
    """At small scores every statistic of the closed form is within Z standard errors of the sampled rule's
    (512 heads), short sequences (L = 2: position 0 sees one key) and dropout included."""
    z, _ = _gaps(s2, r, p, L)
    assert np.all(np.abs(z) <= Z), z


def test_causal_threshold_is_where_it_still_agrees():
    """At s² = CAUSAL_MAX_S2 and L = 128 the gradient variance is within 2% (plus Z·SE) of the sampled expectation
    for an independent and a shared output gradient; at 3× that s² (and r = 0.8), the shared one is off by more."""
    _, rel = _gaps(CAUSAL_MAX_S2, 0.8, 0.1, 128, heads=256, d=256, dk=64)
    for gap, se in rel:
        assert abs(gap) <= 0.02 + Z * se, (gap, se)
    _, rel2 = _gaps(3 * CAUSAL_MAX_S2, 0.8, 0.1, 128, heads=256, d=256, dk=64)
    gap, se = rel2[1]
    assert gap > 0.02 + Z * se, (gap, se)


def test_auto_takes_the_causal_closed_form_inside_its_domain():
    m = Moments(0.0, 1.0, 0.2)
    small, large = _qk_var(0.5 * CAUSAL_MAX_S2, 0.2), _qk_var(2 * CAUSAL_MAX_S2, 0.2)
    assert resolve_approx("auto", m, D, small, small, True) == "exact"
    assert resolve_approx("auto", m, D, large, large, True) == "sampled"
    assert resolve_approx("auto", m, D, small, small, True, rope=1e4) == "sampled"


def test_kedia_refuses_causal():
    m = Moments(0.0, 1.0, 0.3)
    with pytest.raises(NotImplementedError, match="causal"):
        attention_forward(m, 64, 16, 32, 1e-4, 1e-4, 0.01, causal=True, approx="kedia")


@pytest.mark.parametrize("s2,L", [(0.2, 2), (0.5, 4), (1.0, 16)])
def test_score_path_weight_against_monte_carlo(s2, L):
    """K = E Σ_k A_k²(1 − 2A_k + Σ_m A_m²), P2 and Q = E(Σ A²)² of a softmax over L i.i.d. N(0, s²) scores (fixed
    s², no spread) against 2¹⁸ sampled rows."""
    gen = torch.Generator().manual_seed(0)
    a = torch.softmax(math.sqrt(s2) * torch.randn(1 << 18, L, generator=gen, dtype=torch.float64), -1)
    p2row = (a * a).sum(-1)
    k_row = (a * a * (1.0 - 2.0 * a + p2row[:, None])).sum(-1)
    p2, k, q = softmax_score_weights(s2, 0.0, L)
    for pred, row in ((p2, p2row), (k, k_row), (q, p2row * p2row)):
        est, se = mc_mean(row)
        assert abs(pred - est) <= Z * se, (pred, est, se)


@pytest.mark.parametrize("s2,kappa,L", [(0.1, 0.02, 2), (0.5, 0.3, 37), (1.2, 0.0, 200)])
def test_pair_sums_equal_the_double_sum_over_key_counts(s2, kappa, L):
    """The running-sum form of the pair sums is the double sum Σ_{a<b} over the key counts of two positions of
    :func:`_pair_weight`, to rounding."""
    from sigprop.components.attention_causal import _pair_sums, _pair_weight

    ek = math.exp(kappa + 0.01)
    n = np.arange(1.0, L + 1.0)
    a, b = np.meshgrid(n, n, indexing="ij")
    w = np.where(a < b, _pair_weight(s2, kappa, ek, a, b), 0.0)
    shared, keys = _pair_sums(s2, kappa, ek, float(L))
    assert shared == pytest.approx(2.0 * np.sum(a * w), rel=1e-12)
    assert keys == pytest.approx(2.0 * np.sum((a - 1.0) * w), rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("sqk2", [1e-8, 5e-8, 1.2e-7])  # s² = 0.12, 0.59, 1.4 at d_in 4096, r 0.3
def test_long_sequences_interpolate_the_softmax_terms_between_quadrature_nodes(sqk2):
    """Beyond EXACT_KEY_COUNTS the per-query P2, K and Q come from a spline between quadrature nodes: against the
    quadrature at every key count (n ≥ 2; n = 1 is set exactly by the rules), relative error below 1e-7, at GPT-3's
    2048 tokens, where the nodes are spaced as at production lengths."""
    from sigprop.components.attention_causal import EXACT_KEY_COUNTS, _configurations
    from sigprop.components.attention_theory import attention_terms

    L = 2048
    assert L > EXACT_KEY_COUNTS  # interpolated
    args = [np.asarray(v, dtype=np.float64) for v in (1.0, 0.3, 4096.0, 128.0, float(L), sqk2, 0.1)]
    spline = _configurations(*args)[0]
    n = np.arange(1.0, L + 1.0)
    exact = attention_terms(*(v[..., None] for v in args[:4]), n, args[5][..., None], args[6][..., None])
    for name in ("P2", "K", "Q"):
        rel = np.abs(getattr(spline, name)[1:] / getattr(exact, name)[1:] - 1.0)
        assert np.max(rel) < 1e-7, (name, np.max(rel))
