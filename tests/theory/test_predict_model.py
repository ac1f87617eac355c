"""``predict(model)``: a model predicted as it is, its standard deviations read from its weights (``InitPlan.
from_model``), against the measurement of those very models; plans from a scheme or from explicit standard
deviations; the plan a profile records, which the diagnosis reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop import InitPlan, Transformer, TransformerConfig, diagnose, measure, predict
from sigprop.measurement.average import average_profiles
from sigprop.model.batches import token_batch
from sigprop.model.transformer import seeded_model
from tests.helpers import Z

SMALL = dict(n_layers=6, d_model=64, n_heads=2, vocab_size=300, seq_len=32, max_len=32, dropout=0.1)
SEEDS = 24
#: The hand-made schedule: block role r of layer l gets std SCALE[r]·(1 + l)^-½ / √d (DSInit-like depth decay, the
#: queries and keys larger, the values smaller than Xavier)
SCALE = {"q": 1.6, "k": 1.6, "v": 0.7, "o": 1.0, "w1": 1.4, "w2": 0.9}


def reinitialise(model: Transformer, generator: torch.Generator) -> None:
    """Draw every layer's attention and FFN weights afresh with the hand-made schedule (a user's own init)."""
    d = model.config.d_model
    with torch.no_grad():
        for layer in model.layers:
            attn, ffn = layer.attn.branch, layer.ffn.branch
            std = {r: s / math.sqrt(d * (1 + layer.index)) for r, s in SCALE.items()}
            for role, w in (("q", attn.attn.w_q), ("k", attn.attn.w_k), ("v", attn.attn.w_v), ("o", attn.proj.weight),
                            ("w1", ffn.fc1.weight), ("w2", ffn.fc2.weight)):
                w.normal_(0.0, std[role], generator=generator)


@pytest.fixture(scope="module")
def reinitialised():
    config = TransformerConfig(**SMALL)
    batch = token_batch(config, batch_size=4, synthetic=True, seed=1)
    predicted, measured = [], []
    for s in range(SEEDS):
        model = seeded_model(config, s)
        reinitialise(model, torch.Generator().manual_seed(1000 + s))
        predicted.append(predict(model, token_ids=batch.inputs, labels=batch.labels))
        torch.manual_seed(10_000 + s)
        measured.append(measure(model, batch))
    return config, batch, predicted, average_profiles(measured, config.to_dict(), {})


@pytest.mark.long
def test_a_reinitialised_model_is_predicted_as_it_is(reinitialised):
    """The seeds' mean prediction (each model's plan read from its own weights) within Z standard errors of the
    seeds' mean measurement at every layer output (forward and gradient variance, token correlations)."""
    _, _, predicted, meas = reinitialised
    looks, ml, se = [p.lookup() for p in predicted], meas.lookup(), meas.meta["stderr"]
    bad = []
    for (layer, site), rm in ml.items():
        if site != "layer":
            continue
        for q in ("fwd_var", "fwd_corr", "grad_var", "grad_corr"):
            values = np.array([getattr(lk[(layer, site)], q) for lk in looks])
            tol = Z * math.hypot(se[f"{layer}:{site}"][q], values.std(ddof=1) / math.sqrt(len(values)))
            if abs(values.mean() - getattr(rm, q)) > tol:
                bad.append((layer, q, values.mean(), getattr(rm, q), tol))
    assert not bad, bad


@pytest.mark.long
def test_the_schemes_plan_would_have_been_wrong(reinitialised):
    """The check above can fail: the config's own (Xavier) plan misses the re-initialised models' gradient by far."""
    config, batch, _, meas = reinitialised
    xavier = predict(config, token_ids=batch.inputs, labels=batch.labels).lookup()
    ml, se = meas.lookup(), meas.meta["stderr"]
    assert abs(xavier[(0, "layer")].grad_var - ml[(0, "layer")].grad_var) > 10 * Z * se["0:layer"]["grad_var"]


@pytest.mark.long
def test_the_plan_read_from_the_weights_is_the_hand_made_one(reinitialised):
    """Each role's read std is the root mean square of its weights: within the Monte Carlo error of an RMS of
    n Gaussian entries (relative SE 1/√(2n)) of the std they were drawn with."""
    config = TransformerConfig(**SMALL)
    model = seeded_model(config, 0)
    reinitialise(model, torch.Generator().manual_seed(7))
    plan = InitPlan.from_model(model)
    d = config.d_model
    for role, scale in SCALE.items():
        n = model.layers[0].attn.branch.attn.w_q.numel() if role in "qkv" else (4 * d * d)
        for layer in range(config.n_layers):
            want = scale / math.sqrt(d * (1 + layer))
            assert abs(plan.std(role, layer) / want - 1) <= Z / math.sqrt(2 * n), (role, layer)
    assert plan.summary()["source"] == "read from the model's weights"


def test_explicit_plans_and_the_recorded_plan():
    """``InitPlan.from_stds`` and ``from_scheme`` give the plans ``predict`` reads (to the bit, for the same values),
    a model on the meta device is predicted from its own plan, and the diagnosis reads the plan the profile records
    (a SkipInit plan given explicitly makes the stack the identity, whatever the config's scheme)."""
    config = TransformerConfig(**{**SMALL, "dropout": 0.0})
    n = config.n_layers
    stds = {r: np.array([s / math.sqrt(config.d_model * (1 + i)) for i in range(n)]) for r, s in SCALE.items()}
    explicit = InitPlan.from_stds(config, stds)
    assert predict(config, plan=explicit).rows == predict(Transformer(config, plan=explicit, sample=False)).rows
    assert predict(config, plan=InitPlan.from_scheme(config, "dslm")).rows == predict(config.replace(init="dslm")).rows
    skip = InitPlan.from_stds(config, {}, beta={"attn": 0.0, "ffn": 0.0})
    profile = predict(config, plan=skip)
    assert profile.meta["plan"]["beta"] == {"attn": 0.0, "cross": 1.0, "ffn": 0.0}
    assert any(f.verdict == "identity" for f in diagnose(profile).findings)
    assert not any(f.verdict == "identity" for f in diagnose(predict(config)).findings)


@pytest.mark.parametrize("stds,match", [({"x": 0.1}, "unknown role"), ({"q": -0.1}, "> 0"),
                                        ({"q": [0.1, 0.2]}, "one per layer"), ({"token": [0.1] * 6}, "one value"),
                                        ({"q": float("nan")}, "finite")])
def test_from_stds_rejects_bad_values(stds, match):
    with pytest.raises(ValueError, match=match):
        InitPlan.from_stds(TransformerConfig(**SMALL), stds)


def test_from_model_refuses_what_the_theory_does_not_cover():
    config = TransformerConfig(**SMALL)
    model = seeded_model(config, 0)
    with torch.no_grad():
        model.layers[2].ffn.branch.norm.weight.fill_(2.0)
    with pytest.raises(ValueError, match="affine"):
        predict(model)
    with pytest.raises(ValueError, match="TransformerConfig or a sigprop Transformer"):
        predict(torch.nn.Linear(2, 2))
