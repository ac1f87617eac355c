"""The token-resolved attention rule at zeroth order in the scores: against the real :class:`MultiHeadAttention`
module (fresh weights per draw) at small scores, pair by pair, forward and backward, with a causal mask, dropout and
padding; and which rule a module's token-resolved step takes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention import MultiHeadAttention
from sigprop.components.attention_gram import gram_sqrt
from sigprop.components.attention_uniform import (
    UNIFORM_MAX_S2,
    gram_score_variance,
    uniform_gram_attention,
    uniform_gram_attention_backward,
)
from tests.components.test_attention_gram import DK, B, L, _pair_kinds, _sigma_qk, _token_gram, fresh_module_and_input
from tests.components.test_attention_gram import D as D_IN
from tests.helpers import Z

S2 = 1e-3  # a score variance at which the left-out O(s²) terms are far below the Monte Carlo's resolution


def _padding(padded: bool) -> torch.Tensor | None:
    if not padded:
        return None
    key_mask = torch.ones(B, L, dtype=torch.bool)
    key_mask[0, -5:] = False
    key_mask[2, -9:] = False
    return key_mask


def _module_grams(gram, causal, p, key_mask, draws=96, seed=3):
    """Monte Carlo of the module: per draw fresh weights, input X = G^{1/2} Z (a norm's fixed-length rows) and an
    output gradient w with per-element Gram H = I; the per-element output Gram and input-gradient Gram, as
    {kind: (mean, se)} over draws for each kind of pair."""
    gen = torch.Generator().manual_seed(seed)
    root = gram_sqrt(gram)
    kinds = _pair_kinds(key_mask)
    fwd = {k: [] for k in kinds}
    bwd = {k: [] for k in kinds}
    for _ in range(draws):
        mha, x = fresh_module_and_input(gram, root, _sigma_qk(S2), causal, p, gen, fixed_norm=True)
        x.requires_grad_(True)
        y = mha(x, key_padding_mask=key_mask)
        w = torch.randn(y.shape, generator=gen, dtype=torch.float64)
        (dx,) = torch.autograd.grad(y, x, w)
        g_out = y.detach() @ y.detach().transpose(-1, -2) / DK
        g_in = dx @ dx.transpose(-1, -2) / D_IN
        for k, sel in kinds.items():
            fwd[k].append(float(g_out[sel].mean()))
            bwd[k].append(float(g_in[sel].mean()))
    stat = lambda v: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v))))  # noqa: E731
    return {k: stat(v) for k, v in fwd.items()}, {k: stat(v) for k, v in bwd.items()}


@pytest.mark.parametrize("causal,p,padded", [(True, 0.0, False), (True, 0.2, False), (True, 0.1, True),
                                             (False, 0.1, True)])
def test_uniform_rule_matches_the_module_pair_by_pair_at_small_scores(causal, p, padded):
    """Repeated tokens make three kinds of pair (diagonal, repeated ids, others); at s² = 1e-3 the rule's forward and
    backward Gram matrices, mean over each kind, lie within Z standard errors of the module's (the rule is exact, so
    only the module's error counts); under a causal mask two kinds differ by more than that, so the check can
    fail."""
    gram = _token_gram()
    key_mask = _padding(padded)
    sv = 1.0 / D_IN  # the module's sigma_v = 1/√D
    rule_fwd = uniform_gram_attention(gram, D_IN, sv, p, causal, key_mask)
    rule_bwd = uniform_gram_attention_backward(torch.eye(L, dtype=torch.float64).expand(B, L, L), DK, sv, p,
                                               causal, key_mask)
    mod_fwd, mod_bwd = _module_grams(gram, causal, p, key_mask)
    for kind, sel in _pair_kinds(key_mask).items():
        for rule, mod in ((rule_fwd, mod_fwd), (rule_bwd, mod_bwd)):
            mean, se = mod[kind]
            assert abs(float(rule[sel].mean()) - mean) <= Z * se, (kind, float(rule[sel].mean()), mean, se)
    if causal:  # bidirectional uniform attention gives every query nearly the same output: the kinds coincide
        gaps = [abs(a - b) / math.hypot(sa, sb) for (a, sa) in mod_fwd.values() for (b, sb) in mod_fwd.values()]
        assert max(gaps) > Z


def test_uniform_rule_exact_cases():
    """Uncorrelated tokens under a causal mask: query j averages j + 1 independent values, so its variance is
    σ²_v d_in/(j + 1), and dropout p multiplies each query's own-value term by 1/(1 − p)."""
    L_ = 5
    g = torch.eye(L_, dtype=torch.float64)[None]
    j = torch.arange(L_, dtype=torch.float64)
    out = uniform_gram_attention(g, d_in=8, sigma_v2=0.5, causal=True)[0]
    torch.testing.assert_close(out.diagonal(), 4.0 / (j + 1))
    torch.testing.assert_close(out - torch.diag(out.diagonal()), torch.zeros(L_, L_, dtype=torch.float64) +
                               4.0 / (torch.maximum(j[:, None], j[None, :]) + 1) - torch.diag(4.0 / (j + 1)))
    dropped = uniform_gram_attention(g, d_in=8, sigma_v2=0.5, p=0.25, causal=True)[0]
    torch.testing.assert_close(dropped.diagonal(), 4.0 / (j + 1) / 0.75)


def _module(sigma: float, **kw) -> MultiHeadAttention:
    return MultiHeadAttention(D_IN, 4, 16, sigma_q=sigma, sigma_k=sigma, sigma_v=1 / math.sqrt(D_IN), causal=True,
                              **kw).double()


@pytest.mark.parametrize("kw,s2,rule", [({}, 0.5 * UNIFORM_MAX_S2, "uniform"), ({}, 2.0 * UNIFORM_MAX_S2, "sampled"),
                                        ({"rope": 10000.0}, 0.5 * UNIFORM_MAX_S2, "uniform"),
                                        ({"qk_norm_eps": 1e-6}, 0.5 * UNIFORM_MAX_S2, "sampled"),
                                        ({"approx": "sampled"}, 0.5 * UNIFORM_MAX_S2, "sampled")])
def test_which_rule_a_token_resolved_step_takes(kw, s2, rule):
    """"auto" takes the uniform rule up to UNIFORM_MAX_S2, rotary positions included, and never with QK-norm or when
    the sampled rule is asked for; the forward and backward steps agree, and the rule used is recorded."""
    gram = _token_gram()
    sigma = math.sqrt(math.sqrt(s2 / gram_score_variance(gram, D_IN, 1.0, 1.0)))
    mha = _module(sigma, **kw)
    out = mha.gram_forward(gram, attention_heads=4)
    assert mha.rule_used == f"token-resolved {rule}"
    mha.gram_backward(torch.eye(L, dtype=torch.float64).expand(B, L, L).clone(), gram, attention_heads=4)
    assert mha.rule_used == f"token-resolved {rule}"
    if rule == "uniform":
        torch.testing.assert_close(out, uniform_gram_attention(gram, D_IN, 1.0 / D_IN, causal=True))


def test_leading_padding_under_a_causal_mask_stays_finite_and_bad_masks_are_refused():
    """A padded query that sees no key (leading padding, causal) is left unblocked as the sampled rule leaves it, so
    every row of the output Gram is finite and every real token keeps a positive variance; a mask of the wrong shape
    is refused naming it."""
    gram = _token_gram()
    key_mask = torch.ones(B, L, dtype=torch.bool)
    key_mask[1, :3] = False
    out = uniform_gram_attention(gram, D_IN, 1.0 / D_IN, causal=True, key_mask=key_mask)
    grad = uniform_gram_attention_backward(torch.eye(L, dtype=torch.float64).expand(B, L, L), DK, 1.0 / D_IN,
                                           causal=True, key_mask=key_mask)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert (torch.diagonal(out, dim1=-2, dim2=-1) > 0).all()
    with pytest.raises(ValueError, match="key_mask"):
        uniform_gram_attention(gram, D_IN, 1.0 / D_IN, causal=True, key_mask=key_mask.T)
