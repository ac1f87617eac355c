"""The token-resolved attention rule: it reduces to the exchangeable sampled rule for an equicorrelated Gram matrix,
and against the real :class:`MultiHeadAttention` module (fresh weights per draw, SDPA) on Gaussian input with a
heterogeneous Gram matrix (repeated tokens), with and without a causal mask and padding, it gives each kind of token
pair its own covariance."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention import MultiHeadAttention
from sigprop.components.attention_gram import (
    _input_maps,
    _sampled_input,
    _value_free_gram,
    gram_attention,
    gram_sqrt,
    head_draws,
    value_free_output,
)
from sigprop.components.attention_sampled import sample_attention
from tests.helpers import Z

D, DK, L, B = 64, 16, 24, 3
IDS = torch.tensor([[1, 2, 1, 3, 4, 1, 5, 6, 1, 7, 8, 9, 1, 10, 11, 12, 1, 13, 14, 15, 1, 16, 17, 18],
                    [2, 2, 3, 2, 4, 5, 2, 6, 7, 8, 2, 9, 10, 11, 2, 12, 13, 14, 2, 15, 16, 17, 2, 19],
                    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])


def _token_gram(shared=0.6):
    """A normalised Gram matrix with repeated ids: G_jl = shared·[t_j = t_l] + (1 − shared)·[j = l]."""
    same = (IDS[:, :, None] == IDS[:, None, :]).double()
    return shared * same + (1.0 - shared) * torch.eye(L, dtype=torch.float64)


def _sigma_qk(s2):
    """σ²_q = σ²_k for a mean score variance of about s² at unit input variance."""
    return math.sqrt(s2 / (D * D))


def _pair_kinds(key_mask=None):
    """Boolean masks (B, L, L) of the diagonal, the repeated-id pairs and the other pairs (real tokens only)."""
    eye = torch.eye(L, dtype=torch.bool).expand(B, L, L)
    same = (IDS[:, :, None] == IDS[:, None, :]) & ~eye
    kinds = {"diag": eye, "same": same, "other": ~same & ~eye}
    if key_mask is not None:
        real = key_mask[:, :, None] & key_mask[:, None, :]
        kinds = {k: v & real for k, v in kinds.items()}
    return kinds


def fresh_module_and_input(gram, root, sq, causal, p, gen, fixed_norm, heads=1):
    """One Monte Carlo draw: a :class:`MultiHeadAttention` of ``heads`` heads with fresh weights (σ²_q = σ²_k = ``sq``,
    σ_v = 1/√D) and the input X = ``root`` Z, its rows rescaled to length √(D·G_jj) with ``fixed_norm`` (as a norm's
    output has). SDPA's dropout uses the global RNG, which is seeded from ``gen``."""
    mha = MultiHeadAttention(D, heads, DK, sigma_q=math.sqrt(sq), sigma_k=math.sqrt(sq), sigma_v=1 / math.sqrt(D),
                             dropout_p=p, causal=causal).double()
    mha.reset_parameters(generator=gen)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    x = root @ torch.randn(B, L, D, generator=gen, dtype=torch.float64)
    if fixed_norm:
        x = x * (D * torch.diagonal(gram, dim1=-2, dim2=-1)[..., None]).sqrt() / x.norm(dim=-1, keepdim=True)
    return mha, x


def _module_means(gram, s2, causal, p, key_mask=None, draws=96, seed=0, fixed_norm=False):
    """Monte Carlo of the module: per draw fresh weights and input X = G^{1/2} Z (rows rescaled to length
    √(D·G_jj) with ``fixed_norm``, as a norm's output has); the per-element output Gram's mean over each kind of pair
    (real queries and keys only). Returns {kind: (mean, se)} over draws."""
    gen = torch.Generator().manual_seed(seed)
    sq = _sigma_qk(s2)
    root = gram_sqrt(gram)
    kinds = _pair_kinds(key_mask)
    out = {k: [] for k in kinds}
    for _ in range(draws):
        mha, x = fresh_module_and_input(gram, root, sq, causal, p, gen, fixed_norm)
        with torch.no_grad():
            y = mha(x, key_padding_mask=key_mask)
        g = y @ y.transpose(-1, -2) / DK
        for k, sel in kinds.items():
            out[k].append(float(g[sel].mean()))
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in out.items()}


def _rule_means(gram, s2, causal, p, key_mask=None, seeds=6, heads=32, fixed_norm=False):
    """The rule's mean over each kind of pair, and its standard error from ``seeds`` independent draws."""
    sq = _sigma_qk(s2)
    kinds = _pair_kinds(key_mask)
    vals = {k: [] for k in kinds}
    for s in range(seeds):
        g = gram_attention(gram, D, DK, sq, sq, 1.0 / D, p, causal, key_mask, heads=heads, seed=100 + s,
                           fixed_norm=fixed_norm).gram
        for k, sel in kinds.items():
            vals[k].append(float(g[sel].mean()))
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in vals.items()}


@pytest.mark.parametrize("s2,r,causal,p", [(1.0, 0.3, False, 0.1), (4.0, 0.1, True, 0.0)])
def test_equicorrelated_gram_is_the_exchangeable_expectation(s2, r, causal, p):
    """For G = σ²[(1 − r)I + r11ᵀ] the pooled diagonal and off-diagonal means are the variance and token covariance
    the exchangeable sampled rule estimates (independent draws: the SEs add)."""
    var = 1.3
    gram = var * ((1 - r) * torch.eye(L, dtype=torch.float64) + r * torch.ones(L, L, dtype=torch.float64))
    gram = gram.expand(B, L, L).clone()
    sq = math.sqrt(s2 / ((1 - r) * var**2 * D * D))
    res = gram_attention(gram, D, DK, sq, sq, 1.0 / D, p, causal, heads=128, seed=1)
    ref = sample_attention(var, r, D, DK, L, sq, sq, 1.0 / D, p, causal, heads=256, seed=2)
    g = res.gram
    diag = float(torch.diagonal(g, dim1=-2, dim2=-1).mean())
    off = float((g.sum(dim=(-1, -2)) - torch.diagonal(g, dim1=-2, dim2=-1).sum(-1)).sum() / (B * L * (L - 1)))
    assert abs(diag - ref.fwd_var) <= Z * math.hypot(res.var_se, ref.fwd_var_se), (diag, ref.fwd_var)
    assert abs(off - ref.fwd_cov) <= Z * math.hypot(res.cov_se, ref.fwd_cov_se), (off, ref.fwd_cov)


@pytest.mark.parametrize("s2,causal,p,padded", [(2.0, False, 0.1, False), (2.0, True, 0.0, False),
                                                 (1.0, False, 0.0, True)])
def test_gram_rule_matches_the_module_pair_by_pair(s2, causal, p, padded):
    """Repeated tokens: the module's output covariance differs between repeated-id pairs and other pairs, and the
    rule gives each kind its own value (within Z combined standard errors), with a causal mask and with padded
    keys too."""
    gram = _token_gram()
    key_mask = None
    if padded:
        key_mask = torch.ones(B, L, dtype=torch.bool)
        key_mask[0, -5:] = False
        key_mask[2, -9:] = False
    rule = _rule_means(gram, s2, causal, p, key_mask)
    mod = _module_means(gram, s2, causal, p, key_mask)
    for kind in ("diag", "same", "other"):
        (a, sa), (b, sb) = rule[kind], mod[kind]
        assert abs(a - b) <= Z * math.hypot(sa, sb), (kind, a, b, sa, sb)
    # the kinds really differ, so the check above has resolving power
    (same, s_same), (other, s_other) = mod["same"], mod["other"]
    assert same - other > Z * math.hypot(s_same, s_other)


@pytest.mark.long
@pytest.mark.parametrize("causal", [False, True])
def test_fixed_length_rows_match_a_norm_output(causal):
    """Input rows of fixed length (a norm's output): the rule with ``fixed_norm`` matches the module pair by pair.
    Bidirectional, the Gaussian-row rule does not: its output variance is ~5% larger at this score scale (0.316 against
    0.300 with 64 seeds and 1,600 module draws), ~10 combined SE at these sample sizes."""
    gram = _token_gram()
    s2 = 4.0
    mod = _module_means(gram, s2, causal, 0.0, draws=1600, fixed_norm=True)
    fixed = _rule_means(gram, s2, causal, 0.0, seeds=64, fixed_norm=True)
    for kind in ("diag", "same", "other"):
        (a, sa), (b, sb) = fixed[kind], mod[kind]
        assert abs(a - b) <= Z * math.hypot(sa, sb), (kind, a, b, sa, sb)
    if not causal:
        (a, sa), (b, sb) = _rule_means(gram, s2, causal, 0.0, seeds=64)["diag"], mod["diag"]
        assert a - b > Z * math.hypot(sa, sb), (a, b, sa, sb)


@pytest.mark.parametrize("fixed_norm,causal,p,padded", [(True, False, 0.1, False), (False, True, 0.0, False),
                                                        (True, True, 0.2, True)])
def test_the_gram_path_equals_the_row_path_on_the_same_draws(fixed_norm, causal, p, padded):
    """For L < d_in the forward rule carries X Xᵀ instead of the rows X; on the same draws both give the same O Oᵀ to
    rounding (so the Monte Carlo tests of the rule, which run at L < d_in, cover the row path too)."""
    gram = _token_gram()
    key_mask = torch.ones(B, L, dtype=torch.bool)
    if padded:
        key_mask[1, -6:] = False
    blocked = ~key_mask[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(L, L, dtype=torch.bool).triu(1)
    maps = _input_maps(gram, D)
    sq, sk = _sigma_qk(2.0), 0.7 * _sigma_qk(2.0)
    z, zq, zk, u = head_draws(8, L, D, DK, p > 0.0, 5)[0]
    o = value_free_output(_sampled_input(maps, z, fixed_norm), zq, zk, u, sq, sk, DK, p, blocked)
    rows = o @ o.transpose(-1, -2)
    grams = _value_free_gram(maps, z, zq, zk, u, sq, sk, DK, p, blocked, fixed_norm)
    assert grams.shape == rows.shape == (B, 8, L, L)
    assert torch.allclose(grams, rows, rtol=1e-10, atol=1e-12 * float(rows.abs().max()))


def test_gram_sqrt_handles_a_singular_gram():
    ids = torch.tensor([[3, 3, 5, 3]])
    gram = (ids[:, :, None] == ids[:, None, :]).double()  # three identical tokens: rank 2
    root = gram_sqrt(gram)
    assert torch.allclose(root @ root.transpose(-1, -2), gram, atol=1e-12)


def test_gram_attention_is_reproducible_and_rejects_bad_input():
    gram = _token_gram()
    a = gram_attention(gram, D, DK, 1e-3, 1e-3, 1.0 / D, heads=8, seed=4).gram
    b = gram_attention(gram, D, DK, 1e-3, 1e-3, 1.0 / D, heads=8, seed=4).gram
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="gram must have shape"):
        gram_attention(gram[0], D, DK, 1e-3, 1e-3, 1.0 / D)
    with pytest.raises(ValueError, match="sigma_q2"):
        gram_attention(gram, D, DK, 0.0, 1e-3, 1.0 / D)
    with pytest.raises(ValueError, match="key_mask must have shape"):
        gram_attention(gram, D, DK, 1e-3, 1e-3, 1.0 / D, key_mask=torch.ones(B, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least one real token"):
        gram_attention(gram, D, DK, 1e-3, 1e-3, 1.0 / D, key_mask=torch.zeros(B, L, dtype=torch.bool))


def test_gram_sqrt_is_unique_so_samples_do_not_depend_on_the_eigensolver():
    """Repeated tokens make repeated eigenvalues, where the eigenvectors are not unique; the root (hence every
    sample drawn with a given seed) must not depend on which basis the solver returns. A perturbation of G far below
    any sampling error (1e-13) changes the basis of the eigenspace but must leave the root and the rule's output
    unchanged to the same order."""
    ids = torch.tensor([[3, 3, 5, 3, 7, 7, 3, 9]])
    gram = 0.3 + 0.7 * (ids[:, :, None] == ids[:, None, :]).double()
    noise = torch.randn(8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    nudged = gram + 1e-13 * (noise + noise.T)
    root = gram_sqrt(gram)
    assert torch.allclose(root, root.transpose(-1, -2), atol=1e-14)
    assert torch.allclose(root @ root, gram, atol=1e-12)
    assert torch.allclose(gram_sqrt(nudged), root, atol=1e-9)
    args = (16, 8, 0.05, 0.05, 1.0 / 16)
    a = gram_attention(gram, *args, heads=8, seed=3).gram
    b = gram_attention(nudged, *args, heads=8, seed=3).gram
    assert torch.allclose(a, b, rtol=1e-7, atol=0.0)
