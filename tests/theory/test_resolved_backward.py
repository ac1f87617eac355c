"""The token-resolved backward theory: the pairwise use of token-wise backward rules, the loss's gradient Gram matrix,
and a small causal decoder's gradients against measurement, where the exchangeable backward sweep is measurably off."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigprop.components.ffn import FFNBlock
from sigprop.components.layernorm import LayerNorm
from sigprop.core.moments import GradMoments, Moments
from sigprop.measurement.seeds import measure_seeds
from sigprop.model import Transformer, TransformerConfig
from sigprop.model.batches import token_batch
from sigprop.theory.boundaries import head_gradient_gram, head_gradient_moments
from sigprop.theory.predict import Prediction, predict, prediction_steps
from sigprop.theory.resolved import (
    gram_moments,
    pairwise_backward,
    pairwise_forward,
    pairwise_postnorm_backward,
    pairwise_postnorm_forward,
)
from sigprop.theory.sweep import backward_sweep, gram_forward_sweep
from tests.helpers import Z
from tests.theory.test_resolved import SMALL, site_z


def _equicorrelated(var, r, L=6):
    eye, ones = torch.eye(L, dtype=torch.float64), torch.ones(L, L, dtype=torch.float64)
    return (var * ((1 - r) * eye + r * ones))[None]


def test_pairwise_backward_reduces_to_the_exchangeable_rule():
    """Equicorrelated forward and gradient Gram matrices: the diagonal is the rule's gradient variance, every
    off-diagonal entry its covariance."""
    block = FFNBlock(16, 64, p=0.2)
    out = pairwise_backward(block.backward_moments, _equicorrelated(0.4, 0.2), _equicorrelated(1.7, 0.3))
    ref = block.backward_moments(GradMoments(0.4, 0.2), Moments(0.0, 1.7, 0.3))
    eye = torch.eye(6, dtype=torch.bool)
    assert torch.allclose(torch.diagonal(out[0]), torch.full((6,), ref.var, dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(out[0][~eye], torch.full((30,), ref.var * ref.corr, dtype=torch.float64), rtol=1e-12)


def test_pairwise_postnorm_rules_reduce_to_the_exchangeable_rules():
    """A Post-LN norm on equicorrelated Gram matrices, forward and backward: the exchangeable post-norm rules with the
    skip input a LayerNorm output, hidden correlation −1/(d − 1) included (the Gram matrix does not carry it; left
    out, the gradient variance is 0.4% off per norm at d = 256, which 384 norms compound)."""
    norm = LayerNorm(256)
    skip_in, branch, grad = _equicorrelated(1.3, 0.5), _equicorrelated(0.2, 0.3), _equicorrelated(0.4, 0.1)
    skip = pairwise_forward(norm.forward_moments, skip_in)  # a LayerNorm output
    skip_m = norm.forward_moments(Moments(0.0, 1.3, 0.5))
    assert float(skip_m.corr_hidden) == pytest.approx(-1.0 / 255)
    branch_m, eye = Moments(0.0, 0.2, 0.3), torch.eye(6, dtype=torch.bool)
    fwd = pairwise_postnorm_forward(norm, skip, branch, 0.97, 0.25)
    ref = norm.forward_moments_postnorm(skip_m, branch_m, 0.97, 0.25)
    assert torch.allclose(torch.diagonal(fwd[0]), torch.full((6,), float(ref.var), dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(fwd[0][~eye], torch.full((30,), float(ref.var * ref.corr), dtype=torch.float64), rtol=1e-12)
    phi = np.full((1, 6, 6), 0.8)
    bwd = pairwise_postnorm_backward(norm, grad, skip, branch, 0.97, 0.25, phi)
    ref = norm.backward_moments_postnorm(GradMoments(0.4, 0.1), skip_m, branch_m, 0.97, 0.25, skip_fraction=0.8)
    assert torch.allclose(torch.diagonal(bwd[0]), torch.full((6,), float(ref.var), dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(bwd[0][~eye], torch.full((30,), float(ref.var * ref.corr), dtype=torch.float64), rtol=1e-12)


def test_tokens_without_gradient_stay_at_zero():
    """A token with no gradient (no label) has a zero row and column after a token-wise rule; the others are as if
    it were absent."""
    block = FFNBlock(16, 64, p=0.2)
    grad = _equicorrelated(0.4, 0.2)
    grad[:, 2, :] = 0.0
    grad[:, :, 2] = 0.0
    out = pairwise_backward(block.backward_moments, grad, _equicorrelated(1.7, 0.3))
    assert torch.all(out[:, 2, :] == 0) and torch.all(out[:, :, 2] == 0)
    keep = [0, 1, 3, 4, 5]
    alone = pairwise_backward(block.backward_moments, _equicorrelated(0.4, 0.2, 5), _equicorrelated(1.7, 0.3, 5))
    assert torch.allclose(out[:, keep][:, :, keep], alone, rtol=1e-12)


def test_head_gradient_gram_pools_to_the_exchangeable_boundary():
    """Without a final norm, the loss's gradient Gram pooled over the batch is the exchangeable boundary
    :func:`head_gradient_moments` computes from the same labels: variance s²σ²_h/(M·n), correlation from the
    same-target pairs (identical formulas counted two ways)."""
    config = TransformerConfig(**{**SMALL, "n_layers": 2, "norm_position": "post"})
    model = Transformer(config, sample=False)
    batch = token_batch(config, batch_size=3, synthetic=True, seed=2)
    labels = batch.labels
    top = torch.eye(config.seq_len, dtype=torch.float64).expand(3, -1, -1).clone()
    assert model.final_norm is None
    pooled = gram_moments(head_gradient_gram(model, top, labels))
    ref, _ = head_gradient_moments(model, Moments(0.0, 1.0, 0.0), labels)
    assert pooled.var == pytest.approx(float(ref.var), rel=1e-12)
    assert pooled.corr == pytest.approx(float(ref.corr), rel=1e-12, abs=1e-15)
    grad = head_gradient_gram(model, top, labels)
    unlabelled = labels == -100
    assert torch.all(torch.diagonal(grad, dim1=-2, dim2=-1)[unlabelled] == 0)
    with pytest.raises(ValueError, match="no labelled position"):
        head_gradient_gram(model, top, torch.full_like(labels, -100))
    with pytest.raises(ValueError, match="labels must have shape"):
        head_gradient_gram(model, top, labels[:, :-1])


@pytest.mark.long
@pytest.mark.parametrize("fields", [{}, {"head_transform": True, "activation": "gelu", "final_norm": True}])
def test_head_gradient_gram_matches_autograd_pair_by_pair(fields):
    """The loss's gradient at the top of a one-layer decoder without a final norm, by autograd over 200 seeds: its
    per-element Gram averaged over the diagonal, the same-target pairs and the other labelled pairs, each within Z SE
    of :func:`head_gradient_gram`. The other pairs' covariance is the −(2 − e^C)/V term: small and negative, but
    over the many pairs of different targets it sets ~9% of the pooled correlation at V = 300. With BERT's head
    transform (dense, GELU, LayerNorm before the head), read as in BERT from a norm's output (rows of fixed length:
    :mod:`sigprop.components.head_transform`, "Assumes"), the boundary goes back through it."""
    config = TransformerConfig(**{**SMALL, "arch": "decoder", "n_layers": 1, "final_norm": False, "vocab_size": 300,
                                  **fields})
    batch = token_batch(config, batch_size=4, synthetic=True, seed=1)
    lab = batch.labels
    labelled = lab != -100
    eye = torch.eye(config.seq_len, dtype=torch.bool)
    same = (lab[:, :, None] == lab[:, None, :]) & labelled[:, :, None] & labelled[:, None, :] & ~eye
    kinds = {"diag": eye & labelled[:, :, None], "same": same,
             "other": labelled[:, :, None] & labelled[:, None, :] & ~same & ~eye}
    vals, store = [], {}
    for seed in range(200):
        model = Transformer(config, generator=torch.Generator().manual_seed(seed))
        model.train()
        torch.manual_seed(10_000 + seed)
        hook = model.layers[0].register_forward_hook(lambda mod, inputs, out: store.update(h=out))
        (grad,) = torch.autograd.grad(model.loss(batch), store["h"])
        hook.remove()
        gram = (grad @ grad.transpose(-1, -2)).double() / config.d_model
        vals.append([float(gram[sel].mean()) for sel in kinds.values()])
    v = torch.tensor(vals, dtype=torch.float64)
    mean, se = v.mean(0), v.std(0) / len(v) ** 0.5
    model = Transformer(config, sample=False)
    pred = head_gradient_gram(model, gram_forward_sweep(model, batch.inputs).output, lab)
    for i, (kind, sel) in enumerate(kinds.items()):
        assert abs(float(pred[sel].mean()) - mean[i]) <= Z * se[i], (kind, float(pred[sel].mean()), mean[i], se[i])
    if not fields:  # the other pairs' covariance is resolved, so leaving it out would fail
        assert -mean[2] > Z * se[2]


def _gradient_z(config, token_resolved, seeds=24):
    """(pred − meas)/SE of the gradient variance and correlation at every site (:func:`site_z`)."""
    return site_z(config, ("grad_var", "grad_corr"), seeds, token_resolved)


DECODER = {**SMALL, "arch": "decoder", "norm_position": "pre", "init": "xavier"}


def test_resolved_decoder_gradients_within_measurement_noise():
    """A causal decoder: every site's gradient variance and token correlation within Z SE of the measurement."""
    z, pred = _gradient_z(TransformerConfig(**DECODER), token_resolved=None)
    assert pred.meta["backward_state"].startswith("token-resolved")
    bad = {k: round(v, 1) for k, v in z.items() if not abs(v) <= Z}
    assert not bad, bad


@pytest.mark.long
@pytest.mark.parametrize("overrides", [dict(norm_position="pre", init="dslm"),
                                       dict(norm_position="post", init="xavier")])
def test_resolved_encoder_gradients_within_measurement_noise(overrides):
    """An encoder's opt-in token-resolved backward sweep (``token_resolved=True`` with masked-LM labels: gradient at
    the 15% labelled positions only, most of them [MASK]): every site's gradient variance and correlation within
    Z SE."""
    z, pred = _gradient_z(TransformerConfig(**{**SMALL, **overrides}), token_resolved=True)
    assert pred.meta["backward_state"].startswith("token-resolved")
    bad = {k: round(v, 1) for k, v in z.items() if not abs(v) <= Z}
    assert not bad, bad


def test_exchangeable_backward_is_off_for_the_decoder():
    """The same decoder with the exchangeable sweeps: the gradient's token correlation near the input is outside
    Z SE (here by 10–35 SE): averaging over positions overstates how much gradient the tokens share. So the test
    above can fail."""
    z, pred = _gradient_z(TransformerConfig(**DECODER), token_resolved=False)
    assert pred.meta["backward_state"].startswith("exchangeable")
    assert max(v for (layer, site, q), v in z.items() if q == "grad_corr") > Z


@pytest.mark.xfail(strict=True, reason="known gap: the LayerNorm backward rule's E[1/σ̂²] takes the χ² spread of "
                   "a Gaussian input's squared norm; an attention output's norm spreads more (the score pattern of a "
                   "few heads), so where the stream is mostly attention output the gradient into the branch is low")
def test_first_layer_norm_fluctuation_gap():
    """One Pre-LN decoder layer with one head, 200 seeds: the gradient at the attention output (the stream that the
    FFN branch's LayerNorm reads) reads 15% above the prediction (−9.5% with 2 heads, −5.5% with 8, −4.4% at d = 256
    with 4; the 192-layer preset is unaffected within its noise). Needs a per-token norm-spread state."""
    config = TransformerConfig(**{**DECODER, "n_layers": 1, "n_heads": 1, "vocab_size": 300})
    batch = token_batch(config, batch_size=4, synthetic=True, seed=1)
    meas = measure_seeds(config, batch, seeds=200)
    pred = predict(config, token_ids=batch.inputs, labels=batch.labels).lookup()[(0, "attn")]
    m, se = meas.lookup()[(0, "attn")], meas.meta["stderr"]["0:attn"]
    assert abs(pred.grad_var - m.grad_var) <= Z * se["grad_var"], (pred.grad_var, m.grad_var, se["grad_var"])


def test_resolved_backward_switch_scaling_and_progress():
    """A decoder's labels follow from its ids; an encoder keeps the exchangeable backward sweep unless it opts in with
    its labels; a given top gradient rescales the sweep (it is linear),
    exactly; the progress count matches the sweeps run."""
    config = TransformerConfig(**{**DECODER, "n_layers": 3})
    batch = token_batch(config, batch_size=2, synthetic=True)
    steps = []
    pred = predict(config, token_ids=batch.inputs, progress=steps.append)
    assert pred.meta["backward_state"].startswith("token-resolved") and "caveat" not in pred.meta
    assert sum(steps) == prediction_steps(config, token_ids_given=True) == 2 * config.n_layers
    top = pred.lookup()[(2, "layer")]
    given = predict(config, token_ids=batch.inputs, grad_top=GradMoments(var=3.0 * top.grad_var, corr=0.9))
    assert given.meta["grad_source"].startswith("given")
    for a, b in zip(pred.rows, given.rows, strict=True):
        assert b.grad_var == pytest.approx(3.0 * a.grad_var, rel=1e-12)
        assert b.grad_corr == a.grad_corr
    encoder = TransformerConfig(**{**SMALL, "n_layers": 2})
    enc_batch = token_batch(encoder, batch_size=2, synthetic=True)
    ids, labels = enc_batch.inputs, enc_batch.labels
    for kw, state, n_steps in [({}, "exchangeable", 3), ({"labels": labels}, "exchangeable", 3),
                               ({"labels": labels, "token_resolved": True}, "token-resolved", 2)]:
        steps = []
        enc = predict(encoder, token_ids=ids, progress=steps.append, **kw)
        assert enc.meta["forward_state"].startswith("token-resolved")
        assert enc.meta["backward_state"].startswith(state), kw
        expected = prediction_steps(encoder, True, kw.get("token_resolved"), labels_given="labels" in kw)
        assert sum(steps) == expected == n_steps * encoder.n_layers, kw


def test_resolved_backward_rejects_a_mismatched_boundary():
    config = TransformerConfig(**{**DECODER, "n_layers": 2})
    model = Transformer(config, sample=False)
    ids = token_batch(config, batch_size=2, synthetic=True).inputs
    sweep = gram_forward_sweep(model, ids)
    with pytest.raises(ValueError, match="must have shape"):
        backward_sweep(model, sweep, torch.eye(3, dtype=torch.float64)[None])


def test_each_layer_draws_its_own_heads(monkeypatch):
    """Both sweeps draw each layer's sampled heads from a seed of its own (a sampling error shared by every layer
    would compound over depth; :func:`sigprop.components.draws.layer_seed`), no two alike."""
    from sigprop.components.attention import MultiHeadAttention

    seeds = {"forward": [], "backward": []}
    fwd, bwd = MultiHeadAttention.gram_forward, MultiHeadAttention.gram_backward

    def spy_forward(self, gram, key_mask=None, attention_heads=32, attention_seed=0, fixed_norm=False):
        seeds["forward"].append(attention_seed)
        return fwd(self, gram, key_mask, attention_heads, attention_seed, fixed_norm)

    def spy_backward(self, grad_gram, gram, key_mask=None, attention_heads=32, attention_seed=0, fixed_norm=False):
        seeds["backward"].append(attention_seed)
        return bwd(self, grad_gram, gram, key_mask, attention_heads, attention_seed, fixed_norm)

    monkeypatch.setattr(MultiHeadAttention, "gram_forward", spy_forward)
    monkeypatch.setattr(MultiHeadAttention, "gram_backward", spy_backward)
    config = TransformerConfig(**{**DECODER, "n_layers": 4})
    ids = token_batch(config, batch_size=2, synthetic=True).inputs
    predict(config, token_ids=ids, attention_seed=5)
    assert len(seeds["forward"]) == len(seeds["backward"]) == config.n_layers
    assert len(set(seeds["forward"] + seeds["backward"])) == 2 * config.n_layers


def test_forward_only_prediction_skips_the_backward_sweeps():
    """``gradients=False``: the forward rows of the full prediction, no gradient, a forward sweep's worth of
    progress."""
    config = TransformerConfig(**{**DECODER, "n_layers": 2})
    batch = token_batch(config, batch_size=2, synthetic=True)
    full = predict(config, token_ids=batch.inputs)
    steps = []
    fwd = predict(config, token_ids=batch.inputs, gradients=False, progress=steps.append)
    assert sum(steps) == prediction_steps(config, True, gradients=False) == config.n_layers
    assert fwd.meta["grad_source"].startswith("not computed")
    for a, b in zip(full.rows, fwd.rows, strict=True):
        assert (b.fwd_var, b.fwd_corr) == (a.fwd_var, a.fwd_corr) and b.grad_var == 0.0


def test_a_held_prediction_runs_each_sweep_once_frees_the_grams_and_stays_exact():
    """compare's order on one held :class:`Prediction` (forward only, then a measured boundary, then the loss's
    boundary again) gives the rows of fresh predictions, runs each sweep once (one token-resolved backward sweep
    serves both boundaries), and keeps no layer Gram matrices once the backward sweep has used them."""
    config = TransformerConfig(**{**SMALL, "n_layers": 2})
    batch = token_batch(config, batch_size=2, synthetic=True)
    kw = {"token_ids": batch.inputs, "labels": batch.labels, "token_resolved": True}
    fresh = predict(config, **kw)
    held = Prediction(config, **kw)
    steps = []
    assert held.steps() == 2 * config.n_layers
    held.profile(gradients=False, progress=steps.append)
    assert sum(steps) == config.n_layers and held.steps() == config.n_layers
    top = fresh.lookup()[(1, "layer")]
    given = held.profile(GradMoments(var=2.0 * top.grad_var, corr=0.5), progress=steps.append)
    assert sum(steps) == 2 * config.n_layers and held.steps() == 0 and held._gram is None
    for a, b in zip(fresh.rows, given.rows, strict=True):
        assert b.fwd_var == a.fwd_var and b.grad_corr == a.grad_corr
        assert b.grad_var == pytest.approx(2.0 * a.grad_var, rel=1e-12) or b.grad_var == a.grad_var == 0.0
    again = held.profile(progress=steps.append)
    assert again.rows == fresh.rows and sum(steps) == 2 * config.n_layers


@pytest.mark.parametrize("arch,grad_boundary,token_resolved,spread", [("encoder", "measured", None, False),
                                                                       ("encoder", "measured", True, False),
                                                                       ("decoder", "measured", None, False),
                                                                       ("encoder", "theory", None, False),
                                                                       ("decoder", "measured", None, True)])
def test_compare_reports_the_progress_it_announces(arch, grad_boundary, token_resolved, spread):
    """``compare_config``'s prediction progress adds up to what its prediction announced before any sweep
    (``Prediction.steps``) on every route (forward sweeps before measuring, the prediction after, the spread's
    anchors), so the CLI's bar ends full."""
    from sigprop.analysis.experiment import batch_prediction, compare_config

    config = TransformerConfig(**{**(DECODER if arch == "decoder" else SMALL), "n_layers": 2})
    batch = token_batch(config, batch_size=2, synthetic=True)
    prediction = batch_prediction(config, batch, token_resolved=token_resolved)
    announced = prediction.steps(spread=spread)
    steps = []
    compare_config(config, batch, seeds=2, grad_boundary=grad_boundary, predict_progress=steps.append,
                   prediction=prediction, spread=spread)
    assert sum(steps) == announced
