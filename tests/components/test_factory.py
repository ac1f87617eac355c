"""Building activations and attention blocks by name (sigprop.components.factory, attention_block, ffn)."""

import math

import pytest
import torch

from sigprop.components.attention import MultiHeadAttention
from sigprop.components.attention_block import AttentionBlock
from sigprop.components.factory import ACTIVATIONS, ATTENTIONS, make_activation
from sigprop.components.ffn import FFNBlock
from sigprop.components.shaped_attention import ShapedAttention, shaped_temperature
from sigprop.components.shaped_relu import ShapedReLU


def test_names():
    assert ACTIVATIONS == ("relu", "gelu", "shaped_relu", "swiglu", "geglu")
    assert ATTENTIONS == ("standard", "shaped", "value_skipinit")


def test_gated_activations_are_built_by_the_ffn_block():
    from sigprop.components.glu import GLU

    with pytest.raises(ValueError, match="gated unit"):
        make_activation("swiglu")
    block = FFNBlock(16, 32, activation="geglu", norm="none", w1_std=0.2)
    assert isinstance(block.fc1, GLU) and block.fc1.gate == "geglu" and not hasattr(block, "act")
    assert block.fc1.gate_std == block.fc1.up_std == 0.2


def test_make_activation_keywords():
    act = make_activation("shaped_relu", n=64, c_minus=-2.0, normalize=True)
    assert isinstance(act, ShapedReLU) and act.normalize
    assert float(act.s_minus) == pytest.approx(1.0 - 2.0 / math.sqrt(64), rel=1e-7)  # s₋ = 1 + c₋/√n (Eq. 4)
    for name in ("relu", "gelu"):
        with pytest.raises(ValueError, match=f"{name}.*keyword.*n"):
            make_activation(name, n=4)
    with pytest.raises(ValueError, match="n="):
        make_activation("shaped_relu")
    with pytest.raises(ValueError, match="shaped_relu"):
        make_activation("swish")


def test_ffn_passes_activation_kwargs():
    ffn = FFNBlock(16, 64, activation="shaped_relu", norm="none", activation_kwargs={"n": 16, "mode": "learn"})
    assert isinstance(ffn.act, ShapedReLU) and isinstance(ffn.act.s_minus, torch.nn.Parameter)
    assert ffn(torch.randn(2, 5, 16)).shape == (2, 5, 16)


def test_attention_block_shaped_and_standard():
    blk = AttentionBlock(16, 2, norm="none", causal=True, attention="shaped",
                         attention_kwargs={"tau0": 2.0, "gamma_mode": "recover", "anneal_steps": 3})
    a = blk.attn
    assert isinstance(a, ShapedAttention) and a.causal and a.gamma_mode == "recover"
    assert a.tau == pytest.approx(float(shaped_temperature(16, 8, 2.0)), rel=1e-15)
    assert a.sigma_q == pytest.approx(1.0 / 4.0)  # the paper's 1/√n when no sigma is given (Eqs. 1-2)
    assert blk(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    assert isinstance(AttentionBlock(16, 2, norm="none").attn, MultiHeadAttention)
    with pytest.raises(ValueError, match="attn_dropout"):
        AttentionBlock(16, 2, attention="shaped", attn_dropout=0.1)
    with pytest.raises(ValueError, match="attention must be one of standard, shaped"):
        AttentionBlock(16, 2, attention="linear")
    with pytest.raises(ValueError, match="standard.*attention_kwargs"):
        AttentionBlock(16, 2, attention_kwargs={"tau0": 1.0})
