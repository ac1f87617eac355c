"""The forward rules at the real model's own input (:mod:`sigprop.theory.in_situ`): a 24-layer DeepScaleLM Pre-LN
encoder at
d = 64 (one head), 32 seeds, on real tokens; layers 6, 9 and 12."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.model import Transformer, TransformerConfig
from sigprop.model.batches import token_batch
from sigprop.model.presets import preset_config
from sigprop.theory.in_situ import (
    attention_delta,
    check_supported,
    collect_seed_inputs,
    exact_attention_gram,
    ffn_delta,
    jackknife,
    layernorm_delta,
    pooled,
)
from sigprop.theory.resolved import pairwise_forward
from tests.helpers import Z

LAYERS = (6, 9, 12)
HEADS = 16


@pytest.fixture(scope="module")
def setup():
    config = preset_config("fig4-dslm-pre").replace(d_model=64, n_heads=1, n_layers=24)
    batch = token_batch(config, batch_size=4)
    keep = torch.ones(batch.inputs.shape, dtype=torch.bool)
    seeds = collect_seed_inputs(config, batch, list(LAYERS), seeds=32, heads=HEADS)
    theory = Transformer(config, sample=False)
    attention = {layer: attention_delta(theory.layers[layer].attn.branch.attn, seeds[(layer, "attn_norm")],
                                        seeds[(layer, "attn_exact")], keep, HEADS) for layer in LAYERS}
    return config, theory, keep, seeds, attention


def test_jackknife_of_a_plain_mean_is_the_standard_error():
    """With a rule that ignores the seeds, Δ is the mean and the jackknife SE is the textbook sd/√n."""
    stats = np.random.default_rng(0).normal(size=(40, 2))
    delta, se = jackknife(stats, lambda s: np.zeros(2))
    assert np.allclose(delta, stats.mean(0))
    assert np.allclose(se, stats.std(0, ddof=1) / math.sqrt(len(stats)))


def test_exact_attention_gram_averages_over_the_weights():
    """On Gaussian rows the exact conditional expectation, averaged over inputs, is the rule's value (the rule draws
    the rows itself): pooled variance and covariance within Z combined standard errors."""
    from sigprop.components.attention_gram import gram_attention

    config = TransformerConfig(arch="encoder", n_layers=1, d_model=64, n_heads=1, seq_len=24, max_len=24,
                               vocab_size=300, norm_position="pre", init="xavier")
    mha = Transformer(config).layers[0].attn.branch.attn
    gen = torch.Generator().manual_seed(3)
    gram = 0.4 + 0.6 * torch.eye(24, dtype=torch.float64).expand(2, 24, 24)
    keep = torch.ones(2, 24, dtype=torch.bool)
    root = torch.linalg.cholesky(gram)
    per = np.array([pooled(exact_attention_gram(mha, root @ torch.randn(2, 24, 64, generator=gen,
                                                                          dtype=torch.float64), keep, 16, seed=s),
                           keep) for s in range(64)])
    sq, sk, sv = (float(np.asarray(v)) for v in mha._declared())
    res = gram_attention(gram, 64, mha.d_head, sq, sk, sv, float(mha.dropout_p), heads=512, seed=9)
    ref = pooled(res.gram, keep)
    se = per.std(0, ddof=1) / math.sqrt(len(per))
    for i, rule_se in enumerate((res.var_se, res.cov_se)):
        assert abs(per[:, i].mean() - ref[i]) <= Z * math.hypot(se[i], rule_se), (i, per[:, i].mean(), ref[i])


@pytest.mark.long
def test_attention_rule_variance_holds_at_the_models_own_input(setup):
    """The attention rule's output variance at the seeds' mean input equals the seeds' exact expectation (within Z
    jackknife standard errors) at every layer; and the FFN's Jensen term has the sign of a convex kernel (the ReLU
    kernel is convex in the correlation, so the seeds' spread raises the mean output covariance)."""
    config, theory, keep, seeds, attention = setup
    for layer in LAYERS:
        delta, se, _ = attention[layer]
        assert abs(delta[0]) <= Z * se[0], (layer, delta[0], se[0])
    layer = LAYERS[0]
    delta, se, _ = ffn_delta(theory.layers[layer].ffn.branch, seeds[(layer, "ffn_norm")], keep)
    assert delta[1] > Z * se[1], (layer, delta[1], se[1])


@pytest.mark.xfail(strict=True, reason="known gap: the seeds' spread of the attention input beyond Gaussian rows "
                   "lowers the output correlation by O(1/d) (docs/results/accuracy.md, "
                   "'Each rule at the model's own input'); "
                   "the state carries expectations only")
@pytest.mark.long
def test_attention_rule_correlation_at_the_models_own_input(setup):
    """At d = 64 the rule's output correlation reads ~0.002–0.006 high at these layers (z ≈ 6 each)."""
    attention = setup[-1]
    for layer in LAYERS:
        delta, se, _ = attention[layer]
        assert abs(delta[2]) <= Z * se[2], (layer, delta[2], se[2])


def test_layernorm_delta_on_equicorrelated_gaussian_input():
    """Seeds whose LayerNorm input Gram is exactly equicorrelated (variance 1.3, correlation r) and whose output
    Gram is what the rule says: Δ is 0, and the rule's own lowering is r − E[cos θ] (Olkin–Pratt, n = d − 1)."""
    from sigprop.components.layernorm import expected_cosine

    config = preset_config("fig4-dslm-pre").replace(d_model=64, n_heads=1, n_layers=2)
    norm = Transformer(config, sample=False).layers[0].attn.branch.norm
    L, r = 16, 0.35
    gram = 1.3 * (r + (1 - r) * torch.eye(L, dtype=torch.float64)).expand(3, 2, L, L).clone()
    out = torch.stack([pairwise_forward(norm.forward_moments, g) for g in gram])
    keep = torch.ones(2, L, dtype=torch.bool)
    delta, se, lowering = layernorm_delta(norm, gram, out, keep)
    assert np.allclose(delta, 0.0, atol=1e-12) and np.allclose(se, 0.0, atol=1e-12)
    assert lowering == pytest.approx(r - float(expected_cosine(63, r)), rel=1e-6)


def test_unsupported_models_are_refused():
    with pytest.raises(ValueError, match="Pre-LN LayerNorm encoder"):
        check_supported(preset_config("fig3-postln"))
    config = preset_config("fig4-dslm-pre").replace(d_model=64, n_heads=1, n_layers=4)
    with pytest.raises(ValueError, match="seeds >= 3"):
        collect_seed_inputs(config, token_batch(config, batch_size=2), [7], seeds=4)
