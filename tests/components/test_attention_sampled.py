"""The sampled attention rule: against the closed form where that is verified (small scores), against the real
:class:`MultiHeadAttention` module (a separate code path: W_V and the output gradient drawn, SDPA, autograd through
the module) at large scores and with a causal mask, and the "auto" dispatch."""

from __future__ import annotations

import math

import pytest

from sigprop.components.attention import (
    CLOSED_FORM_MAX_S2,
    MultiHeadAttention,
    attention_backward,
    attention_forward,
    resolve_approx,
)
from sigprop.components.attention_sampled import sample_attention, sampled_backward, sampled_forward
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z, mha_module_moments

D, DK, L = 64, 16, 32


def _qk_var(s2, r, var=1.0, d=D):
    """The variance σ²_q = σ²_k giving the closed form's mean score variance s² = (1 − r)σ⁴ d² σ²_q σ²_k."""
    return math.sqrt(s2 / ((1.0 - r) * var**2 * d * d))


@pytest.mark.parametrize("s2,r,p", [(0.05, 0.1, 0.0), (0.3, 0.5, 0.1), (0.3, 0.0, 0.0)])
def test_sampled_equals_closed_form_at_small_scores(s2, r, p):
    """Where the closed form is verified its value is the expectation the sampled rule estimates: they agree
    within Z standard errors of the sample (the closed form's own error there is ≤ 0.1%, far below the SE)."""
    sq = _qk_var(s2, r)
    sv = 1.0 / D
    m, g = Moments(0.0, 1.0, r), GradMoments(1.0, 0.2)
    s = sample_attention(1.0, r, D, DK, L, sq, sq, sv, p, heads=512, seed=3)
    cf, cb = attention_forward(m, D, DK, L, sq, sq, sv, p), attention_backward(g, m, D, DK, L, sq, sq, sv, p)
    assert s.s2 == pytest.approx(s2, rel=0.05)
    assert abs(s.fwd_var - cf.var) <= Z * s.fwd_var_se
    assert abs(s.fwd_cov - cf.corr * cf.var) <= Z * s.fwd_cov_se
    gv = 0.2 * s.sh_var + 0.8 * s.in_var
    gv_se = math.hypot(0.2 * s.sh_var_se, 0.8 * s.in_var_se)
    assert abs(gv - cb.var) <= Z * gv_se
    gc = 0.2 * s.sh_cov + 0.8 * s.in_cov
    gc_se = math.hypot(0.2 * s.sh_cov_se, 0.8 * s.in_cov_se)
    assert abs(gc - cb.corr * cb.var) <= Z * gc_se


def test_closed_form_threshold_is_where_it_still_agrees():
    """At s² = CLOSED_FORM_MAX_S2 the closed form's gradient variance is within 2% (plus Z·SE) of the sampled
    expectation, and at 20× that s² it is not: the closed form does drift at large scores (the threshold is
    conservative: see its comment). Short sequences are the hardest case (the truncated terms are O(s⁴/L))."""
    r, sv, n = 0.0, 1.0 / 256, 32
    m, g = Moments(0.0, 1.0, r), GradMoments(1.0, 0.0)

    def rel_gap(s2, heads):
        sq = _qk_var(s2, r, d=256)
        s = sample_attention(1.0, r, 256, 64, n, sq, sq, sv, 0.0, heads=heads, seed=5)
        cb = attention_backward(g, m, 256, 64, n, sq, sq, sv, 0.0)
        return abs(cb.var / s.in_var - 1.0), s.in_var_se / s.in_var

    gap, se = rel_gap(CLOSED_FORM_MAX_S2, 256)
    assert gap <= 0.02 + Z * se
    gap20, se20 = rel_gap(20 * CLOSED_FORM_MAX_S2, 512)
    assert gap20 > 0.02 + Z * se20


def _module_moments(s2, r, causal, p):
    """Monte Carlo of the real module (:func:`tests.helpers.mha_module_moments`, one head, 64 draws)."""
    return mha_module_moments(D, DK, L, _qk_var(s2, r), r, causal=causal, p=p)


@pytest.mark.parametrize("s2,r,causal,p", [(16.0, 0.2, False, 0.0), (4.0, 0.5, True, 0.0),
                                           (0.5, 0.1, True, 0.1)])
def test_sampled_rule_matches_the_module(s2, r, causal, p):
    """Large scores (the closed form's domain ends at s² ≈ 0.75) and causal masks, against the module itself."""
    sq = _qk_var(s2, r)
    m, g = Moments(0.0, 1.0, r), GradMoments(1.0, 0.3)
    s = sample_attention(1.0, r, D, DK, L, sq, sq, 1.0 / D, p, causal, heads=256, seed=7)
    f = sampled_forward(m, D, DK, L, sq, sq, 1.0 / D, p, causal, 256, 7)
    b = sampled_backward(g, m, D, DK, L, sq, sq, 1.0 / D, p, causal, 256, 7)
    mod = _module_moments(s2, r, causal, p)
    pairs = [("fv", f.var, s.fwd_var_se), ("fc", f.corr * f.var, s.fwd_cov_se),
             ("gv", b.var, math.hypot(0.3 * s.sh_var_se, 0.7 * s.in_var_se)),
             ("gc", b.corr * b.var, math.hypot(0.3 * s.sh_cov_se, 0.7 * s.in_cov_se))]
    for key, value, se in pairs:
        est, est_se = mod[key]
        assert abs(value - est) <= Z * math.hypot(se, est_se), (key, value, est, se, est_se)


def test_auto_dispatch():
    m = Moments(0.0, 1.0, 0.2)
    small, large = _qk_var(0.5 * CLOSED_FORM_MAX_S2, 0.2), _qk_var(2 * CLOSED_FORM_MAX_S2, 0.2)
    assert resolve_approx("auto", m, D, small, small, False) == "exact"
    assert resolve_approx("auto", m, D, large, large, False) == "sampled"
    assert resolve_approx("kedia", m, D, large, large, False) == "kedia"
    mha = MultiHeadAttention(D, 2, DK, sigma_q=math.sqrt(large), sigma_k=math.sqrt(large), causal=False)
    mha.forward_moments(m, L)
    assert mha.rule_used == "sampled"


def test_short_bidirectional_sequences_take_the_sampled_rule():
    """Below CLOSED_FORM_MIN_L the bidirectional closed form is not used (at L = 2 its token covariance exceeds
    the variance); a plain encoder of a few tokens is predicted, and the causal closed form is kept."""
    import sigprop
    from sigprop.components.attention import CLOSED_FORM_MIN_L

    m = Moments(0.0, 1.0, 0.5)
    small = _qk_var(0.5 * CLOSED_FORM_MAX_S2, 0.5)
    assert resolve_approx("auto", m, D, small, small, False, L=CLOSED_FORM_MIN_L - 1) == "sampled"
    assert resolve_approx("auto", m, D, small, small, False, L=CLOSED_FORM_MIN_L) == "exact"
    assert resolve_approx("auto", m, D, small, small, True, L=2) == "exact"
    for length in (2, 4, 8):
        config = sigprop.TransformerConfig(n_layers=6, d_model=64, n_heads=2, vocab_size=256, seq_len=length,
                                           dropout=0.0)
        profile = sigprop.predict(config)
        assert profile.meta["attention_rule"].startswith("sampled")
        assert all(-1.0 <= r.fwd_corr <= 1.0 for r in profile.site("layer"))


def test_sampled_draw_is_cached_and_reproducible():
    args = (1.0, 0.3, D, DK, L, 1e-3, 1e-3, 1.0 / D, 0.0, False, 0.0, 64, 11)
    a = sample_attention(*args)
    assert sample_attention(*args) is a  # the backward rule reuses the forward's draw
    b = sample_attention(*args[:-1], 12)
    assert b.fwd_var != a.fwd_var


def test_sampled_rule_rejects_bad_input():
    with pytest.raises(ValueError, match="token correlation"):
        sample_attention(1.0, 1.5, D, DK, L, 1e-3, 1e-3, 1e-2)
    with pytest.raises(ValueError, match="heads"):
        sample_attention(1.0, 0.5, D, DK, L, 1e-3, 1e-3, 1e-2, heads=1)
    with pytest.raises(ValueError, match="sequence length"):
        sample_attention(1.0, 0.5, D, DK, 1, 1e-3, 1e-3, 1e-2)
