"""The token-resolved attention backward rule: it reduces to the exchangeable sampled rule for equicorrelated Gram
matrices, and against autograd through the real :class:`MultiHeadAttention` module (fresh weights per draw) it gives
each kind of token pair its own input-gradient covariance, with a causal mask, padding, dropout, fixed-length rows and
an output gradient that only some positions carry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention_gram import gram_attention_backward, gram_sqrt
from sigprop.components.attention_sampled import sample_attention
from tests.components.test_attention_gram import (
    DK,
    IDS,
    B,
    D,
    L,
    _pair_kinds,
    _sigma_qk,
    _token_gram,
    fresh_module_and_input,
)
from tests.helpers import Z


def _grad_gram(every: int = 1) -> torch.Tensor:
    """An output-gradient Gram like a loss's: gradient at every ``every``-th position only, unit variance there, and
    a shared component between positions whose next ids agree (same target)."""
    labels = torch.roll(IDS, -1, dims=1)
    live = torch.zeros(B, L, dtype=torch.bool)
    live[:, ::every] = True
    same = (labels[:, :, None] == labels[:, None, :]) & live[:, :, None] & live[:, None, :]
    return 0.5 * same.double() + 0.5 * torch.diag_embed(live.double())


def _module_means(gram, grad_gram, s2, causal, p, key_mask=None, draws=160, seed=0, fixed_norm=False, heads=2):
    """Monte Carlo of autograd through the module: per draw fresh weights, X = G^{1/2}Z (rows of fixed length with
    ``fixed_norm``) and an output gradient with per-element Gram ``grad_gram`` independent of X; the input gradient's
    per-element Gram averaged over each kind of pair. {kind: (mean, se)} over draws."""
    gen = torch.Generator().manual_seed(seed)
    sq = _sigma_qk(s2)
    root, groot = gram_sqrt(gram), gram_sqrt(grad_gram)
    kinds = _pair_kinds(key_mask)
    out = {k: [] for k in kinds}
    for _ in range(draws):
        mha, x = fresh_module_and_input(gram, root, sq, causal, p, gen, fixed_norm, heads)
        x.requires_grad_(True)
        y = mha(x, key_padding_mask=key_mask)
        g_out = groot @ torch.randn(B, L, heads * DK, generator=gen, dtype=torch.float64)
        (dx,) = torch.autograd.grad(y, x, g_out)
        g = dx @ dx.transpose(-1, -2) / D
        for k, sel in kinds.items():
            out[k].append(float(g[sel].mean()))
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in out.items()}


def _rule_means(gram, grad_gram, s2, causal, p, key_mask=None, seeds=6, heads=32, fixed_norm=False, n_heads=2):
    """The rule (``n_heads`` heads, as the module's ``gram_backward`` adds them) averaged over each kind of pair; the
    standard error from ``seeds`` independent draws."""
    sq = _sigma_qk(s2)
    kinds = _pair_kinds(key_mask)
    vals = {k: [] for k in kinds}
    for s in range(seeds):
        g = n_heads * gram_attention_backward(gram, grad_gram, D, DK, sq, sq, 1.0 / D, p, causal, key_mask,
                                              heads=heads, seed=200 + s, fixed_norm=fixed_norm)
        for k, sel in kinds.items():
            vals[k].append(float(g[sel].mean()))
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in vals.items()}


@pytest.mark.parametrize("s2,r,rg,causal,p", [(1.0, 0.3, 0.2, False, 0.1), (4.0, 0.1, 0.5, True, 0.0)])
def test_equicorrelated_grams_give_the_exchangeable_expectation(s2, r, rg, causal, p):
    """For G = σ²[(1 − r)I + r11ᵀ] and H = σ²_g[(1 − r_g)I + r_g 11ᵀ] the pooled diagonal and off-diagonal means are
    σ²_g[r_g V_sh + (1 − r_g)V_in] and the same with C: the exchangeable sampled rule's (independent draws)."""
    var, gvar = 1.3, 0.7
    eye, ones = torch.eye(L, dtype=torch.float64), torch.ones(L, L, dtype=torch.float64)
    gram = (var * ((1 - r) * eye + r * ones)).expand(B, L, L).clone()
    grad_gram = (gvar * ((1 - rg) * eye + rg * ones)).expand(B, L, L).clone()
    sq = math.sqrt(s2 / ((1 - r) * var**2 * D * D))
    vals = []
    for s in range(6):
        g = gram_attention_backward(gram, grad_gram, D, DK, sq, sq, 1.0 / D, p, causal, heads=64, seed=10 + s)
        diag = torch.diagonal(g, dim1=-2, dim2=-1)
        vals.append((float(diag.mean()), float((g.sum(dim=(-1, -2)) - diag.sum(-1)).sum() / (B * L * (L - 1)))))
    v = np.array(vals)
    mean, se = v.mean(0), v.std(0, ddof=1) / math.sqrt(len(v))
    ref = sample_attention(var, r, D, DK, L, sq, sq, 1.0 / D, p, causal, heads=512, seed=3)
    ref_var = gvar * (rg * ref.sh_var + (1 - rg) * ref.in_var)
    ref_cov = gvar * (rg * ref.sh_cov + (1 - rg) * ref.in_cov)
    ref_var_se = gvar * math.hypot(rg * ref.sh_var_se, (1 - rg) * ref.in_var_se)
    ref_cov_se = gvar * math.hypot(rg * ref.sh_cov_se, (1 - rg) * ref.in_cov_se)
    assert abs(mean[0] - ref_var) <= Z * math.hypot(se[0], ref_var_se), (mean[0], ref_var)
    assert abs(mean[1] - ref_cov) <= Z * math.hypot(se[1], ref_cov_se), (mean[1], ref_cov)


@pytest.mark.parametrize("s2,causal,p,padded,every,fixed", [(2.0, False, 0.1, False, 1, False),
                                                             (2.0, True, 0.0, False, 2, False),
                                                             (1.0, False, 0.0, True, 1, False),
                                                             (4.0, True, 0.0, False, 1, True)])
def test_backward_rule_matches_autograd_through_the_module(s2, causal, p, padded, every, fixed):
    """Repeated tokens and a loss-like output gradient: the input gradient's covariance of repeated-id pairs, other
    pairs and the diagonal, each within Z combined standard errors of the module's (two heads: they add)."""
    gram, grad_gram = _token_gram(), _grad_gram(every)
    key_mask = None
    if padded:
        key_mask = torch.ones(B, L, dtype=torch.bool)
        key_mask[0, -5:] = False
        key_mask[2, -9:] = False
        grad_gram = grad_gram * (key_mask[:, :, None] & key_mask[:, None, :])
    rule = _rule_means(gram, grad_gram, s2, causal, p, key_mask, fixed_norm=fixed)
    mod = _module_means(gram, grad_gram, s2, causal, p, key_mask, fixed_norm=fixed)
    for kind in ("diag", "same", "other"):
        (a, sa), (b, sb) = rule[kind], mod[kind]
        assert abs(a - b) <= Z * math.hypot(sa, sb), (kind, a, b, sa, sb)
    (same, s_same), (other, s_other) = mod["same"], mod["other"]
    assert same - other > Z * math.hypot(s_same, s_other)  # the kinds differ: the check above can fail


def test_identical_tokens_give_the_value_path_exactly():
    """Rank collapse: identical rows (G and H all ones). The scores are equal, so A is uniform and only the value path
    carries gradient: H_in = σ²_v d_k H exactly. The orthonormal gradient draws make every draw exact, so 8 heads
    give it to rounding (Gaussian draws were 2.4% off with 32 heads; the same draws serve every layer of a sweep,
    where such an error compounds)."""
    ones = torch.ones(B, L, L, dtype=torch.float64)
    for fixed in (False, True):
        got = gram_attention_backward(ones, ones, D, DK, 1e-3, 1e-3, 1.0 / D, heads=8, seed=3, fixed_norm=fixed)
        assert torch.allclose(got, torch.full_like(got, DK / D), rtol=1e-10)


def test_causal_mask_sends_more_gradient_to_early_positions():
    """Under a causal mask position 0 is read by every query, the last only by itself: with independent tokens and
    gradients the rule's input-gradient variance in the first quarter of the sequence is more than twice the last
    quarter's (the value path alone gives Σ_{i≥j} E[A_ij²] ≈ Σ_{i≥j} 1/(i + 1)²). Autograd agreement for a causal
    mask is checked above; this is the effect the exchangeable state averages away."""
    eye = torch.eye(L, dtype=torch.float64).expand(B, L, L).clone()
    vals = []
    for s in range(6):
        g = gram_attention_backward(eye, eye, D, DK, _sigma_qk(1.0), _sigma_qk(1.0), 1.0 / D, causal=True, heads=32,
                                    seed=s)
        d = torch.diagonal(g, dim1=-2, dim2=-1)
        vals.append((float(d[:, : L // 4].mean()), float(d[:, -L // 4:].mean())))
    n_early, n_late = np.array(vals).mean(0)
    assert n_early > 2 * n_late
    with pytest.raises(ValueError, match="grad_gram must have the shape"):
        gram_attention_backward(eye, eye[:, :-1, :-1], D, DK, 1e-3, 1e-3, 1.0 / D)
