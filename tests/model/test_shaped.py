"""The shaped Transformer selected from TransformerConfig (Noci et al. 2023, Eq. 11; Eqs. 4, 9, 33; App. D) and the
"recover" schedule helper (sigprop.model.shaped)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import sigprop
from sigprop.components.attention import MultiHeadAttention
from sigprop.components.shaped_attention import ShapedAttention
from sigprop.components.shaped_relu import ShapedReLU
from sigprop.model import Transformer, TransformerConfig
from sigprop.model.shaped import anneal_shaped, shaped_modules

SHAPED = dict(vocab_size=64, max_len=16, seq_len=16, n_layers=3, d_model=32, n_heads=4, dropout=0.0,
              attention="shaped", activation="shaped_relu", norm="none", norm_position="none", init="shaped")


def shaped(**kw) -> TransformerConfig:
    return TransformerConfig(**{**SHAPED, **kw})


def run(model, c, batch=2):
    ids = torch.randint(0, c.vocab_size, (batch, c.seq_len))
    kw = {"decoder_inputs": ids} if c.arch == "encoder_decoder" else {}
    return model(ids, **kw)


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
@pytest.mark.parametrize("mode", ["fixed", "learn", "recover"])
def test_shaped_transformer_builds_runs_forward_and_backward(arch, mode):
    c = shaped(arch=arch, shaped_mode=mode, shaped_anneal_steps=8 if mode == "recover" else None)
    model = Transformer(c, generator=torch.Generator().manual_seed(0))
    for layer in model.all_layers():
        attn = layer.attn.branch.attn
        assert isinstance(attn, ShapedAttention) and attn.gamma_mode == mode
        assert attn.causal is (arch == "decoder" or layer.index >= c.n_layers)
        assert attn.tau == pytest.approx(c.shaped_tau0 * math.sqrt(c.d_model * c.d_head), rel=1e-15)  # Eq. 9
        act = layer.ffn.branch.act
        assert isinstance(act, ShapedReLU) and act.mode == mode and act.n == c.d_model
        if hasattr(layer, "cross"):
            assert type(layer.cross.branch.attn) is not ShapedAttention  # cross-attention stays standard
            assert isinstance(layer.cross.branch.attn, MultiHeadAttention)
        assert not layer.norms()  # norm="none": no norm anywhere
    assert model.final_norm is None
    out = run(model, c)
    assert out.shape == (2, c.seq_len, c.vocab_size) and torch.isfinite(out).all()
    out.square().mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name  # every parameter is reached, the learnable γ₁, γ₂, s₋ included
    learned = {n.rsplit(".", 1)[-1] for n, _ in model.named_parameters() if n.endswith(("gamma1", "gamma2",
                                                                                         "s_minus"))}
    assert learned == ({"gamma1", "gamma2", "s_minus"} if mode == "learn" else set())


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_attention_rows_sum_to_one_at_unit_gammas(arch):
    """Every row of Softmax − W sums to 0 (W uniform over the visible keys, Sec. 4.2), so a row of A = γ₁I +
    Softmax − γ₂W sums to γ₁ + 1 − γ₂ = 1 at γ₁ = γ₂ = 1 (Eq. 33); causal rows see no future key."""
    c = shaped(arch=arch)
    model = Transformer(c, generator=torch.Generator().manual_seed(1))
    ids = torch.randint(0, c.vocab_size, (3, c.seq_len))
    x = model.embed(ids).double()
    for layer in model.layers:
        attn = copy.deepcopy(layer.attn.branch.attn).double()
        a = attn.attention_matrix(x)
        assert a.shape == (3, c.n_heads, c.seq_len, c.seq_len)
        torch.testing.assert_close(a.sum(-1), torch.ones_like(a[..., 0]), rtol=0, atol=1e-12)
        if arch == "decoder":
            assert torch.all(a.triu(1) == 0)
        x = layer(x.float()).double()


def test_attention_rows_sum_to_gamma1_plus_one_minus_gamma2():
    c = shaped(shaped_gamma1=0.7, shaped_gamma2=0.2)
    model = Transformer(c)
    attn = copy.deepcopy(model.layers[0].attn.branch.attn).double()
    a = attn.attention_matrix(model.embed(torch.randint(0, c.vocab_size, (2, c.seq_len))).double())
    g1, g2 = (torch.tensor(g, dtype=torch.float32).item() for g in (0.7, 0.2))  # the buffers hold float32 values
    torch.testing.assert_close(a.sum(-1), torch.full_like(a[..., 0], g1 + 1.0 - g2), rtol=0, atol=1e-12)


def test_anneal_shaped_follows_app_d_schedule():
    steps = 8
    c = shaped(arch="encoder_decoder", n_layers=2, n_decoder_layers=1, shaped_mode="recover",
               shaped_anneal_steps=steps, shaped_gamma1=0.9, shaped_c_minus=-2.0)
    model = Transformer(c)
    recover = shaped_modules(model, "recover")
    assert len(recover) == 2 * c.total_layers == len(shaped_modules(model))
    s_minus0 = 1.0 + c.shaped_c_minus / math.sqrt(c.d_model)
    for step in (0, 3, steps, 3 * steps):
        assert anneal_shaped(model, step) == len(recover)
        f = max(0.0, 1.0 - step / steps)  # linear to 0 over anneal_steps, then 0
        for _, m in recover:
            if isinstance(m, ShapedAttention):
                assert float(m.gamma1) == pytest.approx(0.9 * f, abs=1e-7)
                assert float(m.gamma2) == pytest.approx(1.0 * f, abs=1e-7)
            else:
                assert float(m.s_minus) == pytest.approx(s_minus0 * f, abs=1e-7)
    # at the end of the schedule: standard softmax attention (rows sum to 1 again, all entries ≥ 0) and a ReLU
    attn = copy.deepcopy(model.layers[0].attn.branch.attn).double()
    a = attn.attention_matrix(model.embed(torch.randint(0, c.vocab_size, (2, c.seq_len))).double())
    assert torch.all(a >= 0)
    torch.testing.assert_close(a.sum(-1), torch.ones_like(a[..., 0]), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="step"):
        anneal_shaped(model, -1)


def test_anneal_shaped_leaves_other_modes_alone():
    for kw in (dict(), dict(shaped_mode="learn"), dict(attention="standard", activation="relu")):
        model = Transformer(shaped(**kw))
        before = {k: v.clone() for k, v in model.state_dict().items()}
        assert anneal_shaped(model, 5) == 0
        for k, v in model.state_dict().items():
            assert torch.equal(v, before[k]), k


def test_predict_walks_a_shaped_encoder():
    """predict runs on the shaped rules (forward first order in κ, backward zeroth order in κ: the
    ShapedAttention docstring). Identities of the walk at γ₁ = γ₂ = 1, zero-mean input of variance q, correlation
    r, s = (1 − r)q: the attention branch has variance d σ_o² · d σ_v² · q(1 + κ s²(L−1)/L²) with κ = 1/(τ₀² d) at
    the plan's σ_q = σ_k = 1/√d; the FFN branch (W_1, W_2 at 1/fan_in, √c-normalised shaped ReLU, Eq. 4) has
    variance exactly the second moment of its input; each residual has λ² + γ² = 1."""
    c = shaped(n_layers=4, shaped_tau0=0.5)
    prof = sigprop.predict(c)
    rows = {(r.layer, r.site): r for r in prof.rows}
    L, d = c.seq_len, c.d_model
    kappa = 1.0 / (c.shaped_tau0**2 * d)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32).item()  # noqa: E731  (the residual buffers are float32)
    lam2, g2 = f32(math.sqrt(1.0 - c.shaped_gamma**2)) ** 2, f32(c.shaped_gamma) ** 2
    for layer in range(c.n_layers):
        x = rows[(layer - 1, "input" if layer == 0 else "layer")]
        q, s = x.fwd_var + x.fwd_mean**2, (1.0 - x.fwd_corr) * x.fwd_var
        attn = rows[(layer, "attn")]
        assert attn.fwd_var == pytest.approx(q * (1.0 + kappa * s**2 * (L - 1) / L**2), rel=1e-12)
        mid_var = lam2 * x.fwd_var + g2 * attn.fwd_var
        assert rows[(layer, "ffn")].fwd_var == pytest.approx(mid_var, rel=1e-12)
        assert rows[(layer, "layer")].fwd_var == pytest.approx((lam2 + g2) * mid_var, rel=1e-12)
        assert lam2 + g2 == pytest.approx(1.0, abs=1e-6)  # λ² + γ² = 1 up to float32 rounding
        for r in (attn, rows[(layer, "ffn")], rows[(layer, "layer")]):
            assert np.isfinite([r.fwd_corr, r.grad_var, r.grad_corr]).all() and r.grad_var > 0


def test_shaped_decoder_is_predicted_with_the_decoder_caveat():
    """The shaped rules average over a causal mask's positions (their docstring): a decoder is predicted, with the
    caveat every decoder prediction carries."""
    from sigprop.theory.predict import DECODER_CAVEAT

    p = sigprop.predict(shaped(arch="decoder"))
    assert p.meta["caveat"] == DECODER_CAVEAT
    rows = p.site("layer")
    assert all(np.isfinite([r.fwd_var, r.fwd_corr, r.grad_var]).all() and r.fwd_var > 0 for r in rows)
