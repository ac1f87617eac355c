"""vit_config (sigprop.model.vit): the paper's ViT form (Alekseev Sec. 2.1, App. A), and its error messages."""

from __future__ import annotations

import pytest
import torch

from sigprop.model import Transformer
from sigprop.model.vit import timm_sigmas, vit_config


def test_vit_form():
    c = vit_config(5, 32, 4, norm="derf", alpha=1.0, sigma_ov=0.5, sigma_21=0.7, activation="gelu",
                   image_size=16, patch_size=4, channels=3)
    assert (c.arch, c.input, c.n_layers, c.d_model, c.n_heads) == ("encoder", "patches", 5, 32, 4)
    assert c.ffn_width == 4 * 32 and c.activation == "gelu"
    assert c.dropout == 0.0 and c.p_attn == 0.0
    assert c.norm == "derf" and c.norm_position == "pre" and c.has_final_norm
    assert c.init == "alekseev" and (c.sigma_ov, c.sigma_21) == (0.5, 0.7)
    assert c.alpha_at("attn") == c.alpha_at("ffn") == c.alpha_at("final") == 1.0
    assert c.seq_len == c.n_patches == 16 and c.channels == 3
    m = Transformer(c)
    assert len(m.layers) == 5 and m.final_norm is not None
    assert m(torch.randn(2, 3, 16, 16)).shape == (2, c.n_classes)


def test_defaults_and_overrides():
    c = vit_config(2, 16, 2)
    assert c.norm == "layernorm" and (c.sigma_ov, c.sigma_21) == (0.31, 0.61) and c.activation == "relu"
    assert c.image_size == 32 and c.patch_size == 4 and c.seq_len == 64
    c = vit_config(2, 16, 2, norm="dyt", alpha_final=0.1, n_classes=7)
    assert c.alpha_at("final") == 0.1 and c.alpha_at("attn") == c.norm_alpha and c.n_classes == 7
    c = vit_config(2, 16, 2, pool="cls")  # the [CLS] token joins the 64 patches
    assert c.pool == "cls" and c.seq_len == 65
    assert Transformer(c)(torch.randn(2, 1, 32, 32)).shape == (2, c.n_classes)


def test_timm_sigmas():
    assert timm_sigmas(256) == pytest.approx((0.02**2 * 256, 2 * 0.02**2 * 256), rel=1e-15)
    with pytest.raises(ValueError, match="d_model"):
        timm_sigmas(0)


def test_errors():
    with pytest.raises(ValueError, match="alpha"):
        vit_config(2, 16, 2, norm="layernorm", alpha=1.0)
    with pytest.raises(ValueError, match="sigma_ov"):
        vit_config(2, 16, 2, sigma_ov=0.0)
    with pytest.raises(ValueError, match="norm_alpha_ffn"):
        vit_config(2, 16, 2, norm="derf", alpha_ffn=-1.0)
    with pytest.raises(ValueError, match="d_model"):
        vit_config(2, 18, 4)


def test_timm_sigmas_are_named_and_the_apjn_takes_them_by_name():
    """The trap the APJN paper's own code showed: (σ_OV, σ_21) unpacked into a function taking (σ_21, σ_OV) swaps
    them silently. timm_sigmas names them, and the APJN functions refuse them by position."""
    from sigprop.apjn.asymptotics import zeta
    from sigprop.apjn.recurrence import apjn_profile

    sigmas = timm_sigmas(768)
    assert sigmas.sigma_ov == pytest.approx(0.307, abs=1e-3) and sigmas.sigma_21 == pytest.approx(0.614, abs=1e-3)
    with pytest.raises(TypeError):
        apjn_profile(*sigmas, blocks=12)
    with pytest.raises(TypeError):
        zeta(*sigmas)
    named = apjn_profile(**sigmas._asdict(), blocks=12, norm="layernorm")
    swapped = apjn_profile(sigma_21=sigmas.sigma_ov, sigma_ov=sigmas.sigma_21, blocks=12, norm="layernorm")
    assert named.backward("full")[0] != pytest.approx(swapped.backward("full")[0], rel=1e-3)
