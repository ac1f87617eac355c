"""Noci et al. Fig. 2 machinery: gradient norms of W_V and W_Q per layer of real shaped / Pre-LN / Post-LN decoders."""

import numpy as np
import pytest
import torch

from sigprop.model.batches import token_batch
from sigprop.model.transformer import Transformer
from sigprop.sde.gradients import ARCHS, figure2, gradient_config, weight_gradient_norms

SMALL = dict(width=32, depth=4, heads=2, seq_len=16)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_weight_gradient_norms_are_the_autograd_norms(arch):
    config = gradient_config(arch, vocab_size=300, **SMALL)
    assert config.arch == "decoder" and config.dropout == 0.0
    batch = token_batch(config, batch_size=2, synthetic=True)
    model = Transformer(config, generator=torch.Generator().manual_seed(0))
    norms = weight_gradient_norms(model, batch)
    model.loss(batch).backward()
    for name in ("w_v", "w_q"):
        expected = [float(getattr(layer.attn.branch.attn, name).grad.double().norm()) for layer in model.layers]
        np.testing.assert_allclose(norms[name], expected, rtol=1e-10)
        assert np.all(norms[name] > 0)


def test_shaped_config_is_the_shaped_transformer():
    c = gradient_config("shaped", vocab_size=300, **SMALL)
    assert (c.attention, c.activation, c.norm, c.init) == ("shaped", "shaped_relu", "none", "shaped")
    with pytest.raises(ValueError, match="arch must be one of"):
        gradient_config("rezero", **SMALL)


def test_figure2_result_and_reproducibility(monkeypatch):
    # synthetic tokens keep the test off the corpus; the figure's own default is real code
    import sigprop.sde.gradients as g

    monkeypatch.setattr(g, "token_batch", lambda config, batch_size, data, seed: token_batch(
        config, batch_size=batch_size, seed=seed, synthetic=True))
    kw = dict(width=32, depth=3, heads=1, seq_len=16, batch_size=2, seeds=2)
    r = figure2(**kw)
    assert r.figure == 2 and set(r.data["curves"]) == set(ARCHS)
    for c in r.data["curves"].values():
        assert len(c["w_v"]["geo_mean"]) == 3 and len(c["w_q"]["log_se"]) == 3
    again = figure2(**kw)
    assert again.data["curves"] == r.data["curves"]
    assert r.to_json()["kind"] == "sde-figure"
    with pytest.raises(ValueError, match="depth must be an integer"):
        figure2(depth=0)
