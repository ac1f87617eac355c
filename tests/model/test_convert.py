"""replace_norms (sigprop.model.convert): every norm replaced in place, positions and α, device/dtype/mode kept, and
a converted sigprop model is the model built directly with the converted config."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sigprop.components.derf import Derf
from sigprop.components.dyt import DyT
from sigprop.components.layernorm import LayerNorm
from sigprop.components.rmsnorm import RMSNorm
from sigprop.model import Transformer, TransformerConfig
from sigprop.model.convert import replace_norms
from sigprop.model.vit import vit_config

SMALL = dict(vocab_size=64, max_len=16, seq_len=16, n_layers=2, d_model=16, n_heads=2, dropout=0.0)


def norms_of(model):
    return [m for m in model.modules() if isinstance(m, (nn.LayerNorm, RMSNorm, DyT, Derf, nn.RMSNorm))]


@pytest.mark.parametrize("alpha_kw", [dict(alpha=1.0), dict(alpha=0.4, alpha_final=1.7),
                                      dict(alpha_attn=0.2, alpha_ffn=0.9)])
def test_converted_vit_equals_the_directly_built_model(alpha_kw):
    """Norms take no random numbers at initialisation, so a pre-LN model converted to Derf has the same weights
    as the Derf model built from the same seed, and the converted config is that model's config."""
    base = vit_config(3, 16, 2, image_size=8, patch_size=2)
    model = Transformer(base, generator=torch.Generator().manual_seed(4))
    assert replace_norms(model, "derf", **alpha_kw) == 2 * 3 + 1  # two per block + the final norm
    direct_cfg = vit_config(3, 16, 2, image_size=8, patch_size=2, norm="derf", **alpha_kw)
    assert model.config == direct_cfg
    direct = Transformer(direct_cfg, generator=torch.Generator().manual_seed(4))
    images = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(model(images), direct(images), rtol=0, atol=0)
    for index, pos, _, _, m in model.norms():
        assert isinstance(m, Derf)
        assert m.alpha.detach().item() == pytest.approx(direct_cfg.alpha_at(pos), rel=1e-7), (index, pos)


def test_round_trip_back_to_layernorm_restores_the_function():
    c = TransformerConfig(**SMALL)
    model = Transformer(c, generator=torch.Generator().manual_seed(1))
    ids = torch.randint(0, 64, (2, 16))
    before = model(ids)
    replace_norms(model, "dyt", alpha=0.5)
    assert not torch.allclose(model(ids), before)
    assert replace_norms(model, "layernorm") == 5
    torch.testing.assert_close(model(ids), before, rtol=0, atol=0)
    assert model.config.norm == "layernorm"


@pytest.mark.parametrize("kw, count", [
    (dict(norm_position="post"), 4),  # attn_norm, ffn_norm per layer, no final norm
    (dict(norm_position="post", final_norm=True), 5),
    (dict(arch="encoder_decoder", n_decoder_layers=1), 2 * 2 + 3 + 2),  # pre: enc 2×2, dec 3, enc_norm, final
    (dict(arch="encoder_decoder", n_decoder_layers=1, norm_position="post"), 2 * 2 + 3),
])
def test_every_norm_of_every_placement_is_found(kw, count):
    model = Transformer(TransformerConfig(**{**SMALL, **kw}))
    assert len(norms_of(model)) == count == len(model.norms())
    assert replace_norms(model, "rmsnorm", eps=1e-6) == count
    assert all(isinstance(m, RMSNorm) and m.eps == 1e-6 for m in norms_of(model))
    assert model.config.norm_eps == 1e-6


def test_alpha_by_position_in_an_encoder_decoder():
    c = TransformerConfig(**{**SMALL, "arch": "encoder_decoder", "n_decoder_layers": 1, "norm_position": "post",
                             "final_norm": True})
    model = Transformer(c)
    replace_norms(model, "dyt", alpha=0.3, alpha_attn=0.6, alpha_final=2.0)
    got = {(index, pos): m.alpha.detach().item() for index, pos, _, _, m in model.norms()}
    assert got == pytest.approx({(0, "attn"): 0.6, (0, "ffn"): 0.3, (1, "attn"): 0.6, (1, "ffn"): 0.3,
                                 (2, "attn"): 0.6, (2, "cross"): 0.6, (2, "ffn"): 0.3, (None, "final"): 2.0}, rel=1e-7)
    # the plan re-initialises the converted model the same way (config updated)
    model.plan.apply(model)
    assert {(i, p): m.alpha.detach().item() for i, p, _, _, m in model.norms()} == pytest.approx(got, rel=1e-7)


class UserModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)
        self.inner = nn.Sequential(nn.Linear(8, 8), nn.RMSNorm(8, eps=1e-3), nn.ReLU())
        self.final = nn.LayerNorm(8, eps=1e-4)

    def forward(self, x):
        return self.final(self.inner(self.ln(self.inp(x))))


def test_arbitrary_user_model_keeps_dtype_device_and_mode():
    model = UserModel().double()
    model.inner.eval()
    assert replace_norms(model, "derf", alpha=0.7) == 3
    for m in (model.ln, model.inner[1], model.final):
        assert isinstance(m, Derf) and m.alpha.dtype == torch.float64 and m.gamma.shape == (8,)
        assert m.alpha.detach().item() == pytest.approx(0.7)
    assert not model.inner[1].training and model.ln.training
    assert model(torch.randn(3, 8, dtype=torch.float64)).dtype == torch.float64
    # back to LayerNorm: eps defaults to 1e-5 (Derf has none); meta-device models work too
    assert replace_norms(model, "layernorm") == 3 and isinstance(model.final, LayerNorm)
    with torch.device("meta"):
        meta = UserModel()
    replace_norms(meta, "dyt")
    assert isinstance(meta.ln, DyT) and meta.ln.alpha.is_meta


def test_user_model_eps_kept_when_converting_between_norms():
    model = UserModel()
    replace_norms(model, "rmsnorm")
    assert model.final.eps == 1e-4 and model.inner[1].eps == 1e-3 and model.ln.eps == 1e-5


def test_errors():
    with pytest.raises(ValueError, match="norm must be one of"):
        replace_norms(UserModel(), "batchnorm")
    with pytest.raises(ValueError, match="alpha"):
        replace_norms(UserModel(), "layernorm", alpha=0.5)
    with pytest.raises(ValueError, match="alpha"):
        replace_norms(UserModel(), "derf", alpha=0.0)
    with pytest.raises(ValueError, match="alpha_ffn.*sigprop Transformer"):
        replace_norms(UserModel(), "derf", alpha_ffn=0.5)
    with pytest.raises(ValueError, match="eps"):
        replace_norms(UserModel(), "dyt", eps=1e-5)
    with pytest.raises(ValueError, match="no normalisation"):
        replace_norms(nn.Sequential(nn.Linear(2, 2)), "derf")
    with pytest.raises(ValueError, match="no normalisation"):
        replace_norms(Transformer(TransformerConfig(**{**SMALL, "norm_position": "none"})), "derf")
    with pytest.raises(ValueError, match="normalized_shape"):
        replace_norms(nn.Sequential(nn.LayerNorm((4, 4))), "derf")


def test_converted_torch_encoder_layer_never_takes_the_fused_layernorm_path():
    """torch's TransformerEncoderLayer has an inference fast path (eval, no grad) that applies LayerNorm itself; after
    replace_norms it must compute Derf: the eval/no-grad output equals the training-mode computation without
    dropout."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    replace_norms(layer, "derf", alpha=1.5)
    x = torch.randn(3, 5, 16)
    layer.train()
    reference = layer(x)
    layer.eval()
    with torch.no_grad():
        fast = layer(x)
    torch.testing.assert_close(fast, reference.detach())
