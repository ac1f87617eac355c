"""Rotary position embedding and grouped-query attention: the rotation itself against a complex-number reference, the
score statistics RoPE changes against Monte Carlo, and the attention rules (sampled, token-resolved) against the real
:class:`MultiHeadAttention` module with RoPE and with shared key/value heads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention import MultiHeadAttention, attention_forward, mha_backward, mha_forward
from sigprop.components.attention_gram import gram_attention
from sigprop.components.attention_sampled import sample_attention
from sigprop.components.rope import apply_rope, rope_frequencies, rope_score_correlation, rope_score_variance
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z, mc_mean, mha_module_moments

D, DK, L = 64, 16, 32


def test_rotation_is_the_complex_phase():
    """Pair (m, m + e/2) as the complex number a + ib turns by e^{i t θ_m} (the Hugging Face Llama convention)."""
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(3, 7, 10, generator=gen, dtype=torch.float64)
    out = apply_rope(t, theta=50.0)
    z = torch.complex(t[..., :5], t[..., 5:])
    angle = torch.arange(7, dtype=torch.float64)[:, None] * torch.as_tensor(rope_frequencies(10, 50.0))[None]
    ref = z * torch.exp(1j * angle)
    torch.testing.assert_close(out, torch.cat((ref.real, ref.imag), dim=-1), rtol=0, atol=1e-12)
    assert rope_frequencies(8, 10000.0)[0] == 1.0 and rope_frequencies(8, 10000.0)[-1] == pytest.approx(10000 ** -0.75)


def test_scores_depend_on_the_gap_only():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, DK, generator=gen, dtype=torch.float64), torch.randn(1, DK, generator=gen,
                                                                                 dtype=torch.float64)
    pos = torch.arange(40)
    qs, ks = apply_rope(q.expand(40, DK), 100.0, pos), apply_rope(k.expand(40, DK), 100.0, pos)
    s = qs @ ks.T
    for gap in (0, 3, 17):
        diag = torch.diagonal(s, offset=gap)
        assert float(diag.std()) < 1e-12 * float(diag.abs().max() + 1)


def test_score_covariance_factor_against_monte_carlo():
    """Over Gaussian W_Q, W_K with fixed inputs, Cov(s_ik, s_il) = σ²_qk |x_i|² (x_k·x_l) ψ(k − l)."""
    gen = torch.Generator().manual_seed(2)
    e, theta, n = 16, 30.0, 40_000
    x = torch.randn(3, D, generator=gen, dtype=torch.float64)
    x[2] = x[1]  # keys k and l hold the same vector: x_k·x_l = |x_k|², so the covariance shows ψ alone
    pos = torch.tensor([0, 4, 15])
    wq = torch.randn(n, D, e, generator=gen, dtype=torch.float64) / math.sqrt(D)
    wk = torch.randn(n, D, e, generator=gen, dtype=torch.float64) / math.sqrt(D)
    q = apply_rope((x @ wq), theta, pos)
    k = apply_rope((x @ wk), theta, pos)
    s = (q[:, 0:1] * k[:, 1:]).sum(-1) / math.sqrt(e)  # scores of query 0 on keys 1, 2
    sqk = 1.0 / D**2
    base = sqk * float(x[0] @ x[0]) * float(x[1] @ x[1])
    prod, se = mc_mean(s[:, 0] * s[:, 1])
    assert abs(prod - base * rope_score_correlation(11, e, theta)) <= Z * se
    var, se_v = mc_mean(s[:, 0] ** 2)
    assert abs(var - base) <= Z * se_v
    assert abs(rope_score_correlation(11, e, theta) - 1.0) > 10 * se / base  # the rotation is visible here


@pytest.mark.parametrize("r", [0.0, 0.6])
def test_score_difference_variance_against_monte_carlo(r):
    gen = torch.Generator().manual_seed(3)
    e, theta, n, d = 16, 30.0, 20_000, 32
    c = torch.randn(n, 1, d, generator=gen, dtype=torch.float64)
    x = math.sqrt(r) * c + math.sqrt(1 - r) * torch.randn(n, 3, d, generator=gen, dtype=torch.float64)
    pos = torch.tensor([2, 9, 29])
    wq = torch.randn(n, d, e, generator=gen, dtype=torch.float64) * 0.2
    wk = torch.randn(n, d, e, generator=gen, dtype=torch.float64) * 0.3
    q, k = apply_rope(x @ wq, theta, pos), apply_rope(x @ wk, theta, pos)
    s = (q[:, 0:1] * k[:, 1:]).sum(-1) / math.sqrt(e)
    est, se = mc_mean(0.5 * (s[:, 0] - s[:, 1]) ** 2)
    pred = rope_score_variance(1.0, r, d, 0.04, 0.09, 9 - 29, e, theta)
    assert abs(est - pred) <= Z * se, (est, pred, se)


def _module_moments(n_heads, n_kv, rope, r, s2, causal=False):
    """Monte Carlo of the real module (:func:`tests.helpers.mha_module_moments`, 48 draws) and its σ²_q."""
    sq = math.sqrt(s2 / ((1.0 - r) * D * D)) if r < 1 else 1e-3
    return mha_module_moments(D, DK, L, sq, r, n_heads, n_kv, rope, causal, draws=48), sq


def _rule(n_heads, sq, r, rope, causal=False, heads=256, seed=7):
    m, g = Moments(0.0, 1.0, r), GradMoments(1.0, 0.3)
    args = (n_heads, D, DK, L, sq, sq, 1.0 / D, 0.0, causal, "sampled", heads, seed, rope)
    s = sample_attention(1.0, r, D, DK, L, sq, sq, 1.0 / D, 0.0, causal, 0.0, heads, seed, rope)
    f, b = mha_forward(m, *args), mha_backward(g, m, *args)
    se = {"fv": s.fwd_var_se, "fc": s.fwd_cov_se, "gv": n_heads * math.hypot(0.3 * s.sh_var_se, 0.7 * s.in_var_se),
          "gc": n_heads * math.hypot(0.3 * s.sh_cov_se, 0.7 * s.in_cov_se)}
    return {"fv": f.var, "fc": f.corr * f.var, "gv": b.var, "gc": b.corr * b.var}, se


@pytest.mark.parametrize("n_heads,n_kv,rope,r,causal", [(4, 1, None, 0.3, False), (4, 2, None, 0.5, True),
                                                         (2, 2, 100.0, 0.6, False), (4, 2, 100.0, 0.6, True)])
def test_rules_match_the_module(n_heads, n_kv, rope, r, causal):
    """Grouped-query heads have the multi-head rules; RoPE's rule is the sampled one with rotated heads."""
    mod, sq = _module_moments(n_heads, n_kv, rope, r, s2=2.0, causal=causal)
    pred, se = _rule(n_heads, sq, r, rope, causal)
    for key in pred:
        est, est_se = mod[key]
        assert abs(pred[key] - est) <= Z * math.hypot(se[key], est_se), (key, pred[key], est, se[key], est_se)


def test_rope_changes_the_moments():
    """The rotation matters where tokens are alike: with r = 0.6 the input gradient for a shared output gradient
    (the keys' and queries' paths, which the shared part no longer leaves idle) differs from the rule without RoPE
    by many standard errors, so the test above can tell them apart."""
    sq = math.sqrt(2.0 / (0.4 * D * D))
    with_rope = sample_attention(1.0, 0.6, D, DK, L, sq, sq, 1.0 / D, 0.0, False, 0.0, 256, 7, 100.0)
    without = sample_attention(1.0, 0.6, D, DK, L, sq, sq, 1.0 / D, 0.0, False, 0.0, 256, 7)
    gap = abs(with_rope.sh_var - without.sh_var)
    assert gap > 10 * math.hypot(with_rope.sh_var_se, without.sh_var_se)
    assert with_rope.s2 > without.s2  # the shared part no longer cancels: larger score spread over keys


def test_token_resolved_rule_with_rope_matches_the_exchangeable_one():
    """On an equicorrelated Gram matrix the token-resolved rule with RoPE estimates the sampled rule's expectation."""
    r, sq = 0.6, 2e-3
    gram = torch.full((2, L, L), r, dtype=torch.float64) + (1 - r) * torch.eye(L, dtype=torch.float64)
    vals = [gram_attention(gram, D, DK, sq, sq, 1.0 / D, heads=64, seed=20 + i, rope=100.0) for i in range(6)]
    diag = [float(torch.diagonal(v.gram, dim1=-2, dim2=-1).mean()) for v in vals]
    ref = sample_attention(1.0, r, D, DK, L, sq, sq, 1.0 / D, 0.0, False, 0.0, 512, 3, 100.0)
    est, se = float(np.mean(diag)), float(np.std(diag, ddof=1) / math.sqrt(len(diag)))
    assert abs(est - ref.fwd_var) <= Z * math.hypot(se, ref.fwd_var_se)


def test_closed_forms_refuse_rope_and_modules_check_groups():
    m = Moments(0.0, 1.0, 0.2)
    with pytest.raises(NotImplementedError, match="rotary"):
        attention_forward(m, D, DK, L, 1e-3, 1e-3, 1e-2, approx="exact", rope=10000.0)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        MultiHeadAttention(D, 4, DK, n_kv_heads=3)
    with pytest.raises(ValueError, match="even d_head"):
        MultiHeadAttention(D, 4, 15, rope=10000.0)
    mha = MultiHeadAttention(D, 4, DK, n_kv_heads=1, rope=10000.0)
    assert mha.w_k.shape == (D, DK) and mha.w_q.shape == (D, 4 * DK)
    mha.forward_moments(m, L, attention_heads=8)
    assert mha.rule_used == "sampled"


def test_grouped_heads_share_keys_and_values():
    """Query heads 0, 1 use key/value head 0 and heads 2, 3 head 1: the module equals attention computed by hand."""
    gen = torch.Generator().manual_seed(5)
    mha = MultiHeadAttention(D, 4, DK, n_kv_heads=2, rope=500.0, causal=True).double()
    mha.reset_parameters(generator=gen)
    x = torch.randn(2, L, D, generator=gen, dtype=torch.float64)
    y = mha(x)
    for h in range(4):
        g = h // 2
        q = apply_rope(x @ mha.w_q[:, h * DK:(h + 1) * DK], 500.0)
        k = apply_rope(x @ mha.w_k[:, g * DK:(g + 1) * DK], 500.0)
        v = x @ mha.w_v[:, g * DK:(g + 1) * DK]
        s = (q @ k.transpose(-1, -2) / math.sqrt(DK)).masked_fill(torch.ones(L, L).triu(1).bool(), float("-inf"))
        torch.testing.assert_close(y[..., h * DK:(h + 1) * DK], torch.softmax(s, -1) @ v, rtol=1e-10, atol=1e-12)
