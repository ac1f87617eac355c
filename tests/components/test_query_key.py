"""What a head does to its queries and keys before the scores (:mod:`sigprop.components.query_key`): QK-norm (Qwen3)
and rotary embedding on part of each head (GPT-NeoX), the map itself against direct computation, and the sampled
attention rules through it against the real :class:`MultiHeadAttention` module."""

from __future__ import annotations

import math

import pytest
import torch

from sigprop.components.attention import MultiHeadAttention, mha_backward, mha_forward
from sigprop.components.attention_sampled import sample_attention
from sigprop.components.query_key import QueryKeyMap, query_key_map
from sigprop.components.rope import apply_rope
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z, mha_module_moments

D, DK, L = 64, 16, 32


def test_the_map_normalises_then_rotates_the_leading_coordinates():
    gen = torch.Generator().manual_seed(0)
    t = 3.0 * torch.randn(2, 7, DK, generator=gen, dtype=torch.float64)
    qk = QueryKeyMap(theta=100.0, rotary_fraction=0.25, norm_eps=1e-6)
    out = qk(t)
    unit = t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(out[..., 4:], unit[..., 4:], rtol=0, atol=1e-14)  # 12 of 16 coordinates untouched
    torch.testing.assert_close(out[..., :4], apply_rope(unit[..., :4], 100.0), rtol=0, atol=1e-14)
    torch.testing.assert_close(out.pow(2).mean(-1), torch.ones(2, 7, dtype=torch.float64), rtol=1e-5, atol=0)
    full = QueryKeyMap(theta=100.0)
    assert torch.equal(full(t), apply_rope(t, 100.0))  # a float rope means this map, bit for bit


def test_query_key_map_reads_every_form_and_refuses_the_rest():
    assert query_key_map(None) is None and query_key_map(QueryKeyMap()) is None
    assert query_key_map(500.0) == QueryKeyMap(theta=500.0)
    for bad in ("x", True, math.nan):
        with pytest.raises(ValueError, match="rope"):
            query_key_map(bad)
    with pytest.raises(ValueError, match="rotary_fraction"):
        QueryKeyMap(theta=100.0, rotary_fraction=0.0)
    with pytest.raises(ValueError, match="rotates 3 coordinates"):
        MultiHeadAttention(D, 4, 12, rope=100.0, rotary_fraction=0.25)  # 3 coordinates: odd
    with pytest.raises(ValueError, match="QK-norm"):
        MultiHeadAttention(D, 4, DK, qk_norm_eps=1e-6, approx="exact")


def test_the_module_applies_its_gains_between_norm_and_rotation():
    gen = torch.Generator().manual_seed(1)
    mha = MultiHeadAttention(D, 2, DK, rope=50.0, rotary_fraction=0.5, qk_norm_eps=1e-6).double()
    mha.reset_parameters(generator=gen)
    with torch.no_grad():
        mha.q_gain.copy_(torch.linspace(0.5, 2.0, DK))
        mha.k_gain.copy_(torch.linspace(2.0, 0.5, DK))
    x = torch.randn(3, L, D, generator=gen, dtype=torch.float64)
    q, k = mha.queries_and_keys(x)
    qk = QueryKeyMap(theta=50.0, rotary_fraction=0.5, norm_eps=1e-6)
    q_ref = qk.rotate(qk.normalise(mha._heads(x @ mha.w_q)) * mha.q_gain)
    k_ref = qk.rotate(qk.normalise(mha._heads(x @ mha.w_k)) * mha.k_gain)
    torch.testing.assert_close(q, q_ref, rtol=0, atol=1e-13)
    torch.testing.assert_close(k, k_ref, rtol=0, atol=1e-13)


CASES = [(dict(qk_norm_eps=1e-6), None, 0.3, False), (dict(qk_norm_eps=1e-6), 100.0, 0.6, True),
         (dict(rotary_fraction=0.25), 100.0, 0.6, False), (dict(qk_norm_eps=1e-6, rotary_fraction=0.5), 100.0, 0.5,
                                                            True)]


@pytest.mark.parametrize("kwargs,rope,r,causal", CASES)
def test_sampled_rules_through_the_map_match_the_module(kwargs, rope, r, causal):
    """The sampled rule, with the module's query–key map, against Monte Carlo of the real module (48 weight draws):
    forward and input-gradient variance and token covariance within Z combined standard errors."""
    sq = 1e-3  # small weights: without QK-norm the scores would be near zero; with it their variance is ~1
    mod = mha_module_moments(D, DK, L, sq, r, 4, 2, rope, causal, draws=48, **kwargs)
    qk = MultiHeadAttention(D, 4, DK, rope=rope, **kwargs).qk_map
    m, g = Moments(0.0, 1.0, r), GradMoments(1.0, 0.3)
    args = (4, D, DK, L, sq, sq, 1.0 / D, 0.0, causal, "sampled", 256, 7, qk)
    s = sample_attention(1.0, r, D, DK, L, sq, sq, 1.0 / D, 0.0, causal, 0.0, 256, 7, qk)
    f, b = mha_forward(m, *args), mha_backward(g, m, *args)
    pred = {"fv": f.var, "fc": f.corr * f.var, "gv": b.var, "gc": b.corr * b.var}
    se = {"fv": s.fwd_var_se, "fc": s.fwd_cov_se, "gv": 4 * math.hypot(0.3 * s.sh_var_se, 0.7 * s.in_var_se),
          "gc": 4 * math.hypot(0.3 * s.sh_cov_se, 0.7 * s.in_cov_se)}
    for key in pred:
        est, est_se = mod[key]
        assert abs(pred[key] - est) <= Z * math.hypot(se[key], est_se), (key, pred[key], est, se[key], est_se)


def test_qk_norm_changes_the_moments():
    """At small weights QK-norm turns near-uniform attention into scores of variance ~1: the score paths come alive,
    and the input gradient for a shared output gradient moves by many standard errors, so the test above tells the
    two apart."""
    sq, r = 1e-3, 0.3
    normed = sample_attention(1.0, r, D, DK, L, sq, sq, 1.0 / D, 0.0, False, 0.0, 256, 7, QueryKeyMap(norm_eps=1e-6))
    plain = sample_attention(1.0, r, D, DK, L, sq, sq, 1.0 / D, 0.0, False, 0.0, 256, 7)
    assert normed.s2 > 0.5 > 100 * plain.s2
    assert abs(normed.sh_var - plain.sh_var) > 10 * math.hypot(normed.sh_var_se, plain.sh_var_se)
