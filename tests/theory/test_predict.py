"""Tier 4: the whole model's predicted profile against its measured one (small deep models), and the theory's
boundaries and bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.analysis.experiment import config_batch, measured_boundary, predict_for_batch
from sigprop.core.moments import GradMoments
from sigprop.measurement.seeds import measure_seeds
from sigprop.model import TransformerConfig
from sigprop.model.batches import token_batch
from sigprop.theory.predict import predict
from tests.helpers import Z, draws_mean_se

SMALL = dict(n_layers=10, d_model=64, n_heads=2, vocab_size=300, seq_len=32, max_len=32, dropout=0.1)
QUANTITIES = ("fwd_var", "fwd_corr", "grad_var", "grad_corr")
PATCHES = dict(input="patches", image_size=16, patch_size=4, seq_len=16, max_len=16)
#: The relative resolution of a float32 model's statistics: 8 units in the last place of float32 (2^-23 each), for
#: the rounding a LayerNorm accumulates (a mean of squares over d features, a reciprocal square root). A Post-LN
#: layer output's variance is v/(v + eps) ≈ 1 − 1e-5 with a seed spread of ~1e-8, so its standard error alone
#: would call a rounding difference of 1e-7 a failure.
FLOAT32_RESOLUTION = 8 * 2.0**-23


def _within_noise(config, seeds=24, batch_size=4, quantities=QUANTITIES, checked=None, attention_seeds=4):
    """Every layer's predicted quantity within Z standard errors of the measured mean (over ``seeds`` models), at
    the sites "layer", "attn", "ffn" and "cross"; ``checked(layer, site, quantity)`` narrows that down. The gradient
    boundary is measured at the top layer, as ``compare`` does. The sampled attention rules give the prediction a
    sampling error of its own (as large as the measurement's at some sites of these small models): it is averaged
    over ``attention_seeds`` draws, and SE combines both, √(SE_meas² + SE_pred²); the tolerance adds the float32
    resolution of the measured value (FLOAT32_RESOLUTION)."""
    if config.input == "tokens":
        batch = token_batch(config, batch_size=batch_size, synthetic=True, seed=1)
    else:  # a patch model: real images (digits); a DSLM one takes its input correlation from them
        config, batch = config_batch(config, batch_size=batch_size, seed=1)
    meas = measure_seeds(config, batch, seeds=seeds)
    grad_top = measured_boundary(meas)
    looks = [predict_for_batch(config, batch, grad_top, attention_seed=s).lookup() for s in range(attention_seeds)]
    ml, se = meas.lookup(), meas.meta["stderr"]
    bad = []
    for (layer, site), rm in ml.items():
        if site not in ("layer", "attn", "ffn", "cross"):
            continue
        for q in quantities:
            if checked is not None and not checked(layer, site, q):
                continue
            mean, se_pred = draws_mean_se(looks, (layer, site), q)
            err = abs(mean - getattr(rm, q))
            tol = Z * math.hypot(se[f"{layer}:{site}"][q], se_pred) + FLOAT32_RESOLUTION * abs(getattr(rm, q))
            if not err <= tol:
                bad.append(f"{layer}:{site} {q} pred {mean:.5g} meas {getattr(rm, q):.5g} "
                           f"({err / tol * Z:.1f} SE)")
    return bad


@pytest.mark.parametrize("overrides", [
    dict(norm_position="pre", init="xavier"),
    dict(norm_position="post", init="xavier"),
    dict(norm_position="pre", init="dslm"),
    dict(norm_position="pre", init="xavier", qk_gain=2.0),  # large scores: the sampled attention rule
    dict(PATCHES, norm_position="pre", init="dslm"),  # a ViT on digits: token-resolved forward from the images
    # the other schemes `sigprop inits` compares
    dict(norm_position="post", init="dslm"),
    dict(norm_position="pre", init="dslm_simple"),
    dict(norm_position="pre", init="dsinit"),
    dict(norm_position="post", init="dsinit"),
    dict(norm_position="pre", init="layerscale"),  # β = 0.1 at 10 layers (CaiT): the blocks do contribute
    dict(norm_position="post", init="deepnorm"),
    dict(norm_position="pre", init="bert"),
])
@pytest.mark.long
def test_small_deep_model_prediction_within_measurement_noise(overrides):
    bad = _within_noise(TransformerConfig(**{**SMALL, **overrides}))
    assert not bad, "\n".join(bad)


@pytest.mark.long
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_decoder_within_measurement_noise(norm_position):
    """A decoder (causal attention; token-resolved sweeps both ways, :mod:`sigprop.theory.resolved`): every
    quantity layer by layer, with two exceptions. A Post-LN layer output's variance, a LayerNorm output's 1 − O(eps)
    that the measurement pins to ~1e-7 (24 seeds), where a second-order eps term of the post-norm rule (~2.5e-7 here)
    is resolved; it is asserted at the same seeds in the encoder test above and by the norm's own tests. And the
    gradient at layer 0's attention output in Pre-LN, the known norm-fluctuation gap
    (``test_first_layer_norm_fluctuation_gap`` in ``tests/theory/test_resolved_backward.py``)."""
    config = TransformerConfig(**{**SMALL, "arch": "decoder", "norm_position": norm_position})

    def checked(layer, site, q):
        if norm_position == "post" and site == "layer" and q == "fwd_var":
            return False
        return not (norm_position == "pre" and (layer, site) == (0, "attn") and q.startswith("grad"))

    bad = _within_noise(config, checked=checked)
    assert not bad, "\n".join(bad)


@pytest.mark.long
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_encoder_decoder_within_measurement_noise(norm_position):
    """An encoder–decoder (cross-attention, sampled rule). The encoder's every quantity: its gradient arrives only
    through the decoder's cross-attentions, summed over them, so it tests the memory-gradient rule and the sum.
    The cross-attention outputs' forward moments. Pre-LN: the decoder's variances too (an encoder–decoder's sweeps
    are exchangeable, so its decoder's correlations and Post-LN gradients carry the decoder caveat)."""
    config = TransformerConfig(**{**SMALL, "arch": "encoder_decoder", "n_decoder_layers": 6,
                                  "norm_position": norm_position})

    def checked(layer, site, q):
        if layer < config.n_layers or (site == "cross" and q.startswith("fwd")):
            return True
        return norm_position == "pre" and q.endswith("var")

    bad = _within_noise(config, checked=checked)
    assert not bad, "\n".join(bad)


def test_input_boundary_from_token_ids_is_their_repetition_correlation():
    c = TransformerConfig(**SMALL)
    ids = torch.tensor([[5, 5, 6, 7] * 8])
    p = predict(c, token_ids=ids, grad_top=GradMoments(1.0, 0.0))
    row = p.lookup()[(-1, "input")]
    # token embedding var σ_t², position σ_p², each through dropout: corr = σ_t² r / (σ_t² + σ_p²)
    plan = p.meta  # noqa: F841 (the boundary source is recorded)
    from sigprop.components.embedding import repetition_correlation
    from sigprop.model import make_plan

    pl = make_plan(c)
    st, sp = pl.std("token") ** 2, pl.std("position") ** 2
    r = repetition_correlation(ids)
    assert row.fwd_corr == pytest.approx((1 - c.dropout) * st * r / (st + sp), rel=1e-9)
    assert row.fwd_var == pytest.approx((st + sp) / (1 - c.dropout), rel=1e-9)
    assert p.meta["input_source"].startswith("token ids")


def test_given_gradient_boundary_is_the_top_layer_gradient():
    c = TransformerConfig(**SMALL)
    g = GradMoments(var=2.5e-3, corr=0.2)
    p = predict(c, grad_top=g)
    top = p.site("layer")[-1]
    assert top.grad_var == pytest.approx(2.5e-3) and top.grad_corr == pytest.approx(0.2)
    assert p.meta["grad_source"] == "given"


def test_theory_gradient_boundary_matches_measurement_at_the_top():
    """The loss-derived gradient at the last layer's output (head_gradient_moments) against measurement."""
    c = TransformerConfig(**{**SMALL, "n_layers": 2})
    batch = token_batch(c, batch_size=8, synthetic=True, seed=2)
    meas = measure_seeds(c, batch, seeds=16)
    pred = predict_for_batch(c, batch)
    top_m, top_p = meas.site("layer")[-1], pred.site("layer")[-1]
    se = meas.meta["stderr"][f"{top_m.layer}:layer"]
    # the neglected Σp² of the softmax and the tied head's O(1/d) dependence are below the noise here
    assert abs(top_p.grad_var - top_m.grad_var) <= Z * se["grad_var"] + 0.01 * top_m.grad_var
    assert abs(top_p.grad_corr - top_m.grad_corr) <= Z * se["grad_corr"] + 0.01


def test_predict_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match="attention_heads"):
        predict(TransformerConfig(**SMALL), attention_heads=1)
    with pytest.raises(ValueError, match="patch"):
        predict(TransformerConfig(input="patches", image_size=8, patch_size=2, seq_len=16, n_layers=2,
                                  d_model=32, n_heads=2))


def test_skipinit_zero_beta_predicts_identity_stream():
    c = TransformerConfig(**{**SMALL, "init": "skipinit"})
    p = predict(c, grad_top=GradMoments(1.0, 0.1))
    rows = p.site("layer")
    first = p.lookup()[(-1, "input")]
    assert all(math.isclose(r.fwd_var, first.fwd_var, rel_tol=1e-12) for r in rows)
    assert all(r.grad_var == pytest.approx(1.0) for r in rows)
    assert np.all([p.lookup()[(r.layer, "attn")].grad_var == 0.0 for r in rows])


def test_encoder_decoder_with_zero_cross_beta_sends_no_gradient_to_the_encoder():
    """With β = 0 on every cross-attention the loss does not depend on the encoder: no encoder gradient is
    predicted (variance 0, correlation undefined), and the meta says why; the decoder's is unaffected."""
    c = TransformerConfig(**{**SMALL, "arch": "encoder_decoder", "n_layers": 2, "n_decoder_layers": 2,
                             "init": "skipinit"})
    p = predict(c, grad_top=GradMoments(1.0, 0.1), attention_heads=8)
    enc = [r for r in p.rows if r.layer < c.n_layers]
    assert all(r.grad_var == 0.0 and math.isnan(r.grad_corr) for r in enc)
    assert "beta = 0" in p.meta["encoder_gradient"]
    assert p.lookup()[(c.n_layers, "dec_input")].grad_var == pytest.approx(1.0)
    assert p.meta["memory_gradient"] == []  # a branch scaled by 0 sends no gradient


def test_encoder_decoder_meta_lists_each_decoder_layer_s_memory_gradient():
    """One share per decoder layer, bottom first; without an encoder-output norm (norm_position "none") their sum
    (variances and covariances add) is the encoder's top-layer gradient."""
    c = TransformerConfig(**{**SMALL, "arch": "encoder_decoder", "n_layers": 2, "n_decoder_layers": 3,
                             "norm_position": "none"})
    p = predict(c, grad_top=GradMoments(1.0, 0.1), attention_heads=8)
    shares = p.meta["memory_gradient"]
    assert [s["layer"] for s in shares] == [2, 3, 4]
    assert all(s["var"] > 0 for s in shares)
    top = p.lookup()[(c.n_layers - 1, "layer")]
    var = sum(s["var"] for s in shares)
    assert top.grad_var == pytest.approx(var, rel=1e-12)
    assert top.grad_corr == pytest.approx(sum(s["var"] * s["corr"] for s in shares) / var, rel=1e-12)


def test_the_exchangeable_sweeps_draw_each_layers_attention_from_a_seed_of_its_own(monkeypatch):
    """A sampling error shared by every layer compounds over depth (:mod:`sigprop.components.draws`): in the
    exchangeable sweeps every layer's sampled attention rule gets a seed of its own, and its backward rule the
    forward's (it reuses that draw). Scores at 3× Xavier put every layer outside the closed forms' domain."""
    from sigprop.components import attention_sampled

    seeds = []
    real = attention_sampled._sample

    def spy(*args):
        seeds.append(args[12])  # _sample(var, corr, mean, d_in, d_k, L, sq, sk, sv, p, causal, heads, seed, rope)
        return real(*args)

    monkeypatch.setattr(attention_sampled, "_sample", spy)
    config = TransformerConfig(**{**SMALL, "n_layers": 4, "arch": "decoder", "norm_position": "pre", "qk_gain": 3.0})
    predict(config, attention_heads=4, attention_seed=3)
    forward, backward = seeds[:config.n_layers], seeds[config.n_layers:]
    assert len(set(forward)) == config.n_layers
    assert set(backward) == set(forward)
    assert backward == sorted(backward, key=forward.index, reverse=True)  # walked from the top layer down


@pytest.mark.parametrize(("pad_id", "arch"), [(0, "encoder"), (7, "encoder"), (7, "encoder_decoder")])
def test_padding_is_left_out_of_the_loss_gradient_as_the_measurement_leaves_it(pad_id, arch):
    """The exchangeable backward sweep on a padded batch: the loss gradient's variance at the top layer is over the
    real tokens (an encoder–decoder's: its decoder's), as measured (a third of the positions padded moved it by a
    third before); the batch's padding mask is read whatever id the padding holds. Within Z standard errors of 32
    seeds."""
    import sigprop
    from sigprop.analysis.experiment import batch_prediction

    extra = {"n_decoder_layers": 2} if arch == "encoder_decoder" else {}
    config = TransformerConfig(arch=arch, n_layers=2, d_model=64, n_heads=2, vocab_size=256, seq_len=32, dropout=0.0,
                               **extra)
    ids = torch.randint(5, 256, (4, 32), generator=torch.Generator().manual_seed(0))
    real = torch.ones(4, 32, dtype=torch.bool)
    real[0, 20:], real[1, 10:], real[2, 28:] = False, False, False
    batch = sigprop.make_batch(config, ids.masked_fill(~real, pad_id), torch.Generator().manual_seed(1),
                               padding_mask=real)
    predicted = batch_prediction(config, batch, token_resolved=False).profile()
    measured = measure_seeds(config, batch, seeds=32)
    top = measured.site("layer")[-1]
    se = measured.meta["stderr"][f"{top.layer}:layer"]["grad_var"]
    assert abs(predicted.lookup()[(top.layer, "layer")].grad_var - top.grad_var) <= Z * se


def test_a_batch_whose_real_tokens_take_every_id_cannot_mark_its_padding():
    import sigprop
    from sigprop.analysis.experiment import batch_prediction

    config = TransformerConfig(arch="decoder", n_layers=1, d_model=16, n_heads=2, vocab_size=8, seq_len=10)
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 7, 7]])
    batch = sigprop.make_batch(config, ids, padding_mask=torch.tensor([[True] * 8 + [False] * 2]))
    with pytest.raises(ValueError, match="none is left to mark its padding"):
        batch_prediction(config, batch)


def test_a_padded_batch_in_an_exchangeable_sweep_carries_a_caveat():
    """The exchangeable sweeps read every sequence at its padded length: a padded batch predicted through one (an
    encoder's default backward, or both sweeps with token_resolved=False) says so; an unpadded batch does not."""
    import sigprop

    config = TransformerConfig(arch="encoder", n_layers=2, d_model=32, n_heads=2, vocab_size=60, seq_len=12,
                               max_len=12, dropout=0.0)
    ids = torch.randint(5, 60, (4, 12), generator=torch.Generator().manual_seed(0))
    padded = ids.clone()
    padded[1, 6:] = 0
    for token_resolved in (None, False):
        caveat = sigprop.predict(config, token_ids=padded, pad_id=0, token_resolved=token_resolved).meta.get("caveat")
        assert caveat is not None and "padded" in caveat
        assert "caveat" not in sigprop.predict(config, token_ids=ids, pad_id=0, token_resolved=token_resolved).meta
