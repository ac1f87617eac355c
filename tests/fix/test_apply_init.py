"""apply_init on a sigprop model: the re-initialised model is the scheme's model, its β's kind (learned or fixed)
included."""

from __future__ import annotations

import pytest
import torch

import sigprop
from sigprop.model.transformer import Transformer

CONFIG = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)


def _trainable(model) -> list[str]:
    return sorted(name for name, p in model.named_parameters() if p.requires_grad)


@pytest.mark.parametrize(("before", "after"), [("xavier", "skipinit"), ("xavier", "rezero"),
                                               ("xavier", "layerscale"), ("layerscale", "xavier"),
                                               ("skipinit", "dslm")])
def test_the_residual_scales_become_learned_or_fixed_as_the_scheme_has_them(before, after):
    model = sigprop.apply_init(Transformer(CONFIG.replace(init=before)), after, torch.Generator().manual_seed(0))
    fresh = Transformer(CONFIG.replace(init=after))
    assert _trainable(model) == _trainable(fresh)
    assert model.plan.learnable_beta == any(name.endswith(".beta") for name in _trainable(model))
    if model.plan.learnable_beta:  # a branch switched off at β = 0 gets a gradient on β and can switch on
        ids = torch.randint(5, 64, (2, 8), generator=torch.Generator().manual_seed(1))
        model(ids).square().mean().backward()
        assert all(p.grad is not None and float(p.grad.abs().sum()) > 0
                   for name, p in model.named_parameters() if name.endswith(".beta"))


def test_a_new_scheme_brings_its_own_residual_scales():
    """A model built with an explicit β (GPT-2's 1/√(2N), as from_hf maps it) re-initialised as DSLM: the scheme's
    λ and β, λ² + β² = 1, not GPT-2's β beside DSLM's λ."""
    config = sigprop.TransformerConfig(n_layers=8, d_model=16, n_heads=2, vocab_size=64, seq_len=8, init="bert",
                                       beta=0.25)
    model = sigprop.apply_init(Transformer(config), "dslm", torch.Generator().manual_seed(0))
    lam, beta = float(model.plan.lam["attn"][0]), float(model.plan.beta["attn"][0])
    assert lam**2 + beta**2 == pytest.approx(1.0) and beta**2 == pytest.approx(2 / 8)
    assert model.config.beta is None and model.config.init == "dslm"
