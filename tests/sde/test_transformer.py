"""Tests for sigprop.sde.transformer (Noci et al. Cor. 4.3, Eq. 12): sums of the two layers' coefficients."""

import pytest
import torch

from sigprop.sde.residual_mlp import resnet_relu_diffusion, resnet_relu_drift
from sigprop.sde.shaped_attention import attention_a_term, shaped_attention_diffusion, shaped_attention_drift
from sigprop.sde.transformer import covariance_sde, shaped_transformer_diffusion, shaped_transformer_drift
from sigprop.sde.triu import sigma_lin
from tests.sde.sde_helpers import random_cov


def test_sum_of_layers():
    v = random_cov(3, torch.Generator().manual_seed(0))
    g, t0, cp, cm = 0.5, 1.2, 0.3, -1.0
    assert torch.allclose(shaped_transformer_drift(v, g, t0, cp, cm),
                          shaped_attention_drift(v, g, t0) + resnet_relu_drift(v, g, cp, cm))
    assert torch.allclose(shaped_transformer_diffusion(v, g, t0),
                          g**2 * (4 - g**2) * sigma_lin(v) + g**4 / t0**2 * attention_a_term(v))
    assert torch.allclose(shaped_transformer_diffusion(v, g, t0),
                          shaped_attention_diffusion(v, g, t0) + resnet_relu_diffusion(v, g))
    c = covariance_sde("shaped_transformer", g, t0, cp, cm)
    assert torch.allclose(c.drift(v), shaped_transformer_drift(v, g, t0, cp, cm))
    assert torch.count_nonzero(covariance_sde("shaped_transformer", 0.0, 1.0, 1.0, -1.0).diffusion(v)) == 0
    with pytest.raises(ValueError, match="kind"):
        covariance_sde("mlp", 0.5)
