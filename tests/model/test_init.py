"""Init plans (sigprop.model.init): every parameter of every scheme is sampled from, and declared with, its plan.

The role of each parameter is derived here from its path in the documented module tree (independently of
sigprop.model.roles), and each scheme's standard deviations are recomputed here from the parameter's shape and the
config (independently of sigprop.model.init), so that a wrong role, a wrong plan or a wrong sampler each fail a test.

Sampled statistics: for n i.i.d. N(0, σ²) entries the root mean square has standard error σ/√(2n) and the mean
σ/√n; both are asserted within Z standard errors (tests/helpers.py). Constants are asserted exactly.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from sigprop.components.linear import Linear
from sigprop.components.shaped_attention import ShapedAttention
from sigprop.model import SCHEMES, Transformer, TransformerConfig, make_plan
from tests.helpers import Z

BASE = dict(vocab_size=128, max_len=16, seq_len=16, n_layers=3, d_model=32, n_heads=4, dropout=0.1)

CONFIGS = {
    "pre_layernorm": {},
    "post_rmsnorm": dict(norm_position="post", norm="rmsnorm"),
    "no_norm": dict(norm_position="none"),
    "pre_dyt": dict(norm="dyt", norm_alpha=0.7),
    "post_derf": dict(norm="derf", norm_position="post", norm_alpha=0.3, final_norm=True),
    "segments": dict(n_segments=2),
    "patches": dict(input="patches", image_size=8, patch_size=2, channels=3, seq_len=16, n_classes=5,
                    input_corr=0.46),
    "decoder_untied": dict(arch="decoder", tie_head=False, d_ff=48, activation="gelu"),
    "encoder_decoder_post": dict(arch="encoder_decoder", n_decoder_layers=1, norm_position="post"),
    "encoder_decoder_pre": dict(arch="encoder_decoder", n_layers=2),
    "qk_gain": dict(qk_gain=2.0),
    "noci": dict(v_init="noci", n_heads=8),
    "overrides": dict(lam=0.8, beta=0.6, head_scale=0.5),
    "learnable_beta": dict(learnable_beta=True),
    "no_dropout_k_alpha": dict(dropout=0.0, attn_dropout=0.3, beta_k=1.5, beta_alpha=0.5),
    # DyT/Derf α set per position (attention, FFN, final), pre and post (with cross-attention norms)
    "pre_dyt_positions": dict(norm="dyt", norm_alpha=0.7, norm_alpha_attn=0.4, norm_alpha_final=1.9),
    "post_derf_positions": dict(arch="encoder_decoder", n_layers=2, n_decoder_layers=1, norm="derf",
                                norm_position="post", final_norm=True, norm_alpha_ffn=0.2, norm_alpha_final=2.5),
    "alekseev_sigmas": dict(sigma_ov=1.2, sigma_21=0.15, d_ff=48, dropout=0.0),
    # the shaped Transformer (Noci et al.): shaped attention and shaped ReLU, unnormalised, in each shaping mode
    "shaped_fixed": dict(attention="shaped", activation="shaped_relu", norm="none", norm_position="none",
                         attn_dropout=0.0),
    "shaped_learn_decoder": dict(arch="decoder", attention="shaped", activation="shaped_relu", attn_dropout=0.0,
                                 shaped_mode="learn", shaped_gamma1=0.9, shaped_gamma2=0.8, shaped_c_minus=-2.0),
    "shaped_recover_encdec": dict(arch="encoder_decoder", n_layers=2, n_decoder_layers=1, attention="shaped",
                                  activation="shaped_relu", dropout=0.0, shaped_mode="recover",
                                  shaped_anneal_steps=5, norm_position="post", shaped_gamma=0.2),
    # wide matrices (n = 65 536 entries: a sampled std within 1.2 % of its plan) for the sampler's accuracy
    "wide": dict(d_model=128, vocab_size=512, n_layers=2, beta_k=1.0),
    # a Llama-style FFN: SwiGLU (gate w1, up w3, stored (d_in, d_ff)) after RMSNorm, and GeGLU
    "swiglu_rmsnorm": dict(arch="decoder", activation="swiglu", norm="rmsnorm", tie_head=False),
    "geglu": dict(activation="geglu"),
    # a Llama-style block whole: rotary positions (no position table), 4 query heads of 12 sharing 2 key/value heads
    # (head_dim != d_model / n_heads), an untied head, another initializer_range for init="bert"
    "llama_gqa_rope": dict(arch="decoder", activation="swiglu", norm="rmsnorm", position="rope", n_heads=4,
                           n_kv_heads=2, head_dim=12, tie_head=False, initializer_range=0.05),
    # Gemma's token scale √d (embed_scale) with the head tied to the table, and with an untied head
    "gemma_embed_scale": dict(arch="decoder", activation="geglu", norm="rmsnorm", position="rope",
                              embed_scale=math.sqrt(32)),
    "embed_scale_untied": dict(embed_scale=3.0, tie_head=False),
}

BLOCK_ROLES = ("q", "k", "v", "o", "w1", "w2")
#: The schemes whose token table is drawn for a unit-variance embedding output (DSLM, µP, shaped), not at a fixed std.
UNIT_EMBEDDING_SCHEMES = ("dslm", "dslm_simple", "auto", "mup", "shaped")
LEARNABLE_SCHEMES = ("layerscale", "skipinit", "rezero")


def make_config(name: str, scheme: str) -> TransformerConfig:
    return TransformerConfig(**{**BASE, **CONFIGS[name], "init": scheme})


# ----------------------------------------------------------------------------------------------------------------
# the expectations, written from the schemes' definitions (Kedia et al. Table 3, Sec. 3.5, App. M; module docstring)
# ----------------------------------------------------------------------------------------------------------------

def n_total(c) -> int:
    """N: every layer of the model (encoder and decoder)."""
    if c.arch == "encoder_decoder":
        return c.n_layers + (c.n_decoder_layers if c.n_decoder_layers is not None else c.n_layers)
    return c.n_layers


def embedding_tables(c) -> int:
    """Tables summed at the input: token (or patch), a learned position table unless rotary / none, segments."""
    positions = c.input == "patches" or c.position == "learned"
    return 1 + int(positions) + int(bool(c.n_segments))


def xavier(shape) -> float:
    """Xavier-normal on the parameter's full 2-D shape: √(2/(fan_in + fan_out))."""
    assert len(shape) == 2, shape
    return math.sqrt(2.0 / (shape[0] + shape[1]))


def expected_std(c, plan, role: str, layer: int | None, shape) -> float | None:
    if role == "w3":  # a gated FFN's up projection: w1's std (same shape), in the (d_in, d_ff) layout of the gate
        role = "w1"
    if role == "w1" and c.activation in ("swiglu", "geglu"):
        shape = tuple(reversed(shape))  # the gate is stored (d_in, d_ff): as nn.Linear's (d_out, d_in) below
    d, p, N = c.d_model, c.dropout, n_total(c)
    d_ff = c.d_ff if c.d_ff is not None else 4 * d
    if c.init == "bert":
        std = c.initializer_range
    elif c.init == "alekseev":
        # Alekseev Sec. 2.1 / App. A: W_V, W_O variance σ²/d with σ_O = σ_V = √σ_OV; W_1 variance σ_1²/d and W_2
        # σ_2²/d_ff with σ_1 = σ_2 = √σ_21; Q, K, embeddings and head N(0, 0.02²) (timm's ViT)
        if role in ("v", "o"):
            std = math.sqrt(c.sigma_ov / d)
        elif role == "w1":
            std = math.sqrt(c.sigma_21 / d)
        elif role == "w2":
            std = math.sqrt(c.sigma_21 / d_ff)
        elif role == "patch":  # PyTorch's Conv2d default (timm's patch embedding): 1/√(3·fan_in)
            std = 1.0 / math.sqrt(3.0 * c.channels * c.patch_size**2)
        else:
            std = 0.02
    elif c.init == "shaped":
        # Noci et al. Eqs. 1, 2, 4 (W/√n with W ~ N(0, 1)): every matrix N(0, 1/fan_in), the (d_in, d_out) Q/K/V
        # matrices and the (d_out, d_in) Linear weights alike; embeddings σ²_e = (1−p)/n_emb (unit output)
        n_emb = embedding_tables(c)
        emb = math.sqrt((1.0 - p) / n_emb)
        if role in ("token", "position", "segment"):
            std = emb
        elif role == "patch":
            std = emb / math.sqrt(c.channels * c.patch_size**2)
        elif role in ("q", "k", "v"):
            std = 1.0 / math.sqrt(shape[0])  # stored (d_in, H·d_head)
        else:
            std = 1.0 / math.sqrt(shape[1])  # nn.Linear layout (d_out, d_in)
    elif c.init == "noci2022":
        # Kedia et al. App. F: Q, K, V of each head N(0, 1/fan_out) = 1/d_head; the rest Xavier
        std = 1.0 / math.sqrt(c.d_head) if role in ("q", "k", "v") else xavier(shape)
    elif c.init == "mup":
        # Yang et al. 2021 Table 3: hidden matrices 1/fan_in, unit-variance embeddings, readout std 1/d
        n_emb = embedding_tables(c)
        if role in ("token", "position", "segment"):
            std = math.sqrt(1.0 / n_emb)
        elif role == "patch":
            std = math.sqrt(1.0 / n_emb) / math.sqrt(c.channels * c.patch_size**2)
        elif role == "head":
            std = 1.0 / d
        elif role in ("q", "k", "v"):
            std = 1.0 / math.sqrt(shape[0])  # stored (d_in, H·d_head)
        else:
            std = 1.0 / math.sqrt(shape[1])  # nn.Linear layout (d_out, d_in)
    elif c.init in ("dslm", "dslm_simple", "auto"):
        n_emb = embedding_tables(c)
        emb = math.sqrt((1.0 - p) / n_emb)  # σ²_e = (1−p)/n_emb (Fig. 15: (1−p)/3 for token+position+segment)
        ffn = (2.0 * (1.0 - p) / (d * d_ff)) ** 0.25  # σ² = √(2(1−p)/(d·d_ff)) = (1/d)√((1−p)/2) at d_ff = 4d
        if role in ("token", "position", "segment"):
            std = emb
        elif role == "patch":
            std = emb / math.sqrt(c.channels * c.patch_size**2)
        elif role in ("q", "k"):
            std = 1.0 / math.sqrt(d)
        elif role in ("w1", "w2") or (role in ("v", "o") and c.init == "dslm_simple"):
            std = ffn
        elif role in ("v", "o"):
            r = plan.notes["corr_schedule"][layer]  # checked separately against Fig. 15's recurrence
            if r <= 0.0:  # σ² → ∞: no finite expectation (not reachable: the plan raises)
                return None
            std = ((1.0 - p) / r) ** 0.25 / math.sqrt(d)  # σ²_{v,o} = (1/d)√((1−p)/r_n)
        else:
            assert role == "head"
            std = xavier(shape)
        if c.init == "auto" and role in ("o", "w2"):  # DSLM's, times the calibration (tests/model/test_auto_init.py)
            std *= math.sqrt(plan.notes["attn_factor" if role == "o" else "ffn_factor"][layer])
    else:
        std = xavier(shape)
        if c.init == "dsinit" and role in BLOCK_ROLES:
            std /= math.sqrt(layer + 1)  # layers numbered l = 1..N
        if c.init == "deepnorm" and role in ("v", "o", "w1", "w2"):
            std *= (8.0 * N) ** -0.25
    if role == "token" and c.init in UNIT_EMBEDDING_SCHEMES:
        std /= c.embed_scale  # the token scale multiplies the table back to the scheme's embedding variance
    if role in ("q", "k"):
        std *= c.qk_gain
    if role == "v" and c.v_init == "noci":
        std = 1.0 / math.sqrt(c.d_model // c.n_heads)
    return std


def expected_scales(c) -> tuple[float, float, bool, float]:
    """(λ, β, β learnable, head scale)."""
    N = n_total(c)
    lam, beta = 1.0, 1.0
    if c.init in ("dslm", "dslm_simple", "auto"):
        b2 = c.beta_k / N**c.beta_alpha
        lam, beta = math.sqrt(1.0 - b2), math.sqrt(b2)
    elif c.init == "deepnorm":
        lam = (2.0 * N) ** 0.25
    elif c.init == "layerscale":
        beta = 0.1 if N <= 18 else (1e-5 if N <= 24 else 1e-6)
    elif c.init in ("skipinit", "rezero"):
        beta = 0.0
    elif c.init == "shaped":  # λ² + γ² = 1 (Noci et al. Sec. 2, Thm. 4.2)
        lam, beta = math.sqrt(1.0 - c.shaped_gamma**2), c.shaped_gamma
    elif c.init == "noci2022":  # branches scaled 1/√N (Kedia et al. Sec. 3.4)
        beta = 1.0 / math.sqrt(N)
    lam = lam if c.lam is None else c.lam
    beta = beta if c.beta is None else c.beta
    learnable = c.init in LEARNABLE_SCHEMES or c.learnable_beta
    head = 1.0 / math.sqrt(c.d_model) if c.init in ("dslm", "dslm_simple", "auto") else 1.0
    if c.init == "shaped" and c.input == "tokens" and c.tie_head:
        head = 1.0 / math.sqrt(c.d_model)  # the tied table's logits kept O(1)
    if c.init == "mup" and c.input == "tokens" and c.tie_head:
        head = 1.0 / c.d_model  # µP's 1/width readout multiplier on the tied table
    if c.init in UNIT_EMBEDDING_SCHEMES and c.input == "tokens" and c.tie_head:
        head *= c.embed_scale  # the tied table is 1/embed_scale of the scheme's: the logits keep their variance
    head = head if c.head_scale is None else c.head_scale
    return lam, beta, learnable, head


def test_every_scheme_has_an_expectation():
    covered = {"xavier", "bert", "dslm", "dslm_simple", "deepnorm", "dsinit", "layerscale", "skipinit", "rezero",
               "alekseev", "shaped", "noci2022", "mup", "auto"}
    assert set(SCHEMES) == covered, "a new scheme needs its expectation in this file"


# ----------------------------------------------------------------------------------------------------------------
# roles from paths (the documented tree: embed.*, layers.i / dec_layers.j . attn|cross|ffn . branch.*, *_norm, head)
# ----------------------------------------------------------------------------------------------------------------

_LAYER = r"(?P<stack>layers|dec_layers)\.(?P<i>\d+)"
_PATTERNS = [
    (re.compile(r"^embed\.token\.weight$"), "token"),
    (re.compile(r"^embed\.position\.weight$"), "position"),
    (re.compile(r"^embed\.segment\.weight$"), "segment"),
    (re.compile(r"^embed\.proj\.weight$"), "patch"),
    (re.compile(r"^embed\.proj\.bias$"), "zero"),
    (re.compile(r"^head\.weight$"), "head"),
    (re.compile(_LAYER + r"\.(?P<site>attn|cross|ffn)\.beta$"), "beta"),
    (re.compile(_LAYER + r"\.(?:attn|cross)\.branch\.attn\.w_(?P<qkv>[qkv])$"), "qkv"),
    (re.compile(_LAYER + r"\.(?:attn|cross)\.branch\.proj\.weight$"), "o"),
    (re.compile(_LAYER + r"\.ffn\.branch\.fc1\.weight$"), "w1"),
    (re.compile(_LAYER + r"\.ffn\.branch\.fc1\.w_gate$"), "w1"),  # a gated FFN (SwiGLU / GeGLU)
    (re.compile(_LAYER + r"\.ffn\.branch\.fc1\.w_up$"), "w3"),
    (re.compile(_LAYER + r"\.ffn\.branch\.fc2\.weight$"), "w2"),
    (re.compile(_LAYER + r"\.attn\.branch\.attn\.gamma(?P<g>[12])$"), "gamma"),  # shaped attention, "learn"
    (re.compile(_LAYER + r"\.ffn\.branch\.act\.s_minus$"), "s_minus"),  # shaped ReLU, "learn"
    (re.compile(r"(?:^|\.)(?:norm|attn_norm|cross_norm|ffn_norm|final_norm|enc_norm)\.(?P<p>\w+)$"), "norm"),
]

#: Initial value of every parameter of each norm (weight/gain 1, bias/shift 0, DyT/Derf α = the config's α at the
#: norm's position, see norm_position_alpha).
NORM_INIT = {"layernorm": {"weight": 1.0, "bias": 0.0}, "rmsnorm": {"weight": 1.0},
             "dyt": {"alpha": "alpha", "gamma": 1.0, "beta": 0.0},
             "derf": {"alpha": "alpha", "shift": 0.0, "gamma": 1.0, "beta": 0.0}}


def norm_position_alpha(name: str, c) -> float:
    """DyT/Derf α of the norm at path ``name``: the final / encoder-output norm reads norm_alpha_final, a norm of an
    attention or cross-attention sub-layer (pre: ``<site>.branch.norm``, post: ``<site>_norm``) norm_alpha_attn,
    of an FFN sub-layer norm_alpha_ffn; None falls back to norm_alpha."""
    if re.search(r"(?:^|\.)(?:final_norm|enc_norm)\.", name):
        v = c.norm_alpha_final
    elif re.search(r"\.(?:attn|cross)(?:_norm|\.branch\.norm)\.", name):
        v = c.norm_alpha_attn
    elif re.search(r"\.ffn(?:_norm|\.branch\.norm)\.", name):
        v = c.norm_alpha_ffn
    else:
        raise AssertionError(f"norm parameter {name} at no known position")
    return c.norm_alpha if v is None else v


def classify(name: str, c) -> tuple:
    """("normal", role, layer) or ("const", value) or ("beta", site, layer) for the parameter at path ``name``."""
    for pattern, kind in _PATTERNS:
        m = pattern.search(name)
        if m is None:
            continue
        layer = None
        if "i" in m.groupdict() and m.group("i") is not None:
            layer = int(m.group("i")) + (c.n_layers if m.group("stack") == "dec_layers" else 0)
        if kind == "zero":
            return ("const", 0.0)
        if kind == "beta":
            return ("beta", m.group("site"), layer)
        if kind == "qkv":
            return ("normal", m.group("qkv"), layer)
        if kind == "gamma":  # App. D: γ₁, γ₂ start at the config's values (1 in the paper)
            return ("const", c.shaped_gamma1 if m.group("g") == "1" else c.shaped_gamma2)
        if kind == "s_minus":  # Eq. 4: s₋ = 1 + c₋/√n, n = d_model
            return ("const", 1.0 + c.shaped_c_minus / math.sqrt(c.d_model))
        if kind == "norm":
            table = NORM_INIT[c.norm]
            assert m.group("p") in table, f"{name}: unexpected parameter of a {c.norm}"
            v = table[m.group("p")]
            return ("const", norm_position_alpha(name, c) if v == "alpha" else v)
        return ("normal", kind, layer)
    raise AssertionError(f"parameter {name} has no role in the documented structure")


def assert_sampled(t: torch.Tensor, std: float, what: str) -> None:
    """Root mean square within Z·σ/√(2n) of σ and mean within Z·σ/√n of 0 (n i.i.d. N(0, σ²) entries)."""
    x = t.detach().double().reshape(-1)
    n = x.numel()
    rms, mean = float(x.pow(2).mean().sqrt()), float(x.mean())
    assert abs(rms - std) <= Z * std / math.sqrt(2 * n), f"{what}: sampled std {rms:.5g}, planned {std:.5g} (n={n})"
    assert abs(mean) <= Z * std / math.sqrt(n), f"{what}: sampled mean {mean:.3g}, std {std:.5g} (n={n})"


def f32(v: float) -> torch.Tensor:
    return torch.tensor(float(v), dtype=torch.float32)


# ----------------------------------------------------------------------------------------------------------------
# the acceptance test: every parameter's sampled std against its plan, for every scheme
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.long
@pytest.mark.parametrize("config_name", list(CONFIGS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_parameter_sampled_and_declared_from_plan(scheme, config_name):
    c = make_config(config_name, scheme)
    model = Transformer(c, generator=torch.Generator().manual_seed(1234))
    plan = model.plan
    lam, beta, learnable, head_scale = expected_scales(c)
    seen_roles = set()
    for name, prm in model.named_parameters():
        kind = classify(name, c)
        if kind[0] == "normal":
            _, role, layer = kind
            planned, expected = plan.std(role, layer), expected_std(c, plan, role, layer, prm.shape)
            if expected is not None:
                assert planned == pytest.approx(expected, rel=1e-12), f"{scheme}: plan std of {name} ({role}, {layer})"
            assert_sampled(prm, planned, f"{scheme}/{config_name}: {name}")
            seen_roles.add(role)
        elif kind[0] == "beta":
            _, site, layer = kind
            b = beta * math.sqrt(plan.notes["cross_factor"][layer]) if c.init == "auto" and site == "cross" else beta
            assert plan.scales(site, layer) == pytest.approx((lam, b), rel=1e-12)
            assert torch.equal(prm.detach(), f32(b)), f"{name}: β = {float(prm)}, expected {b}"
        else:
            assert torch.all(prm.detach() == f32(kind[1])), f"{name}: expected the constant {kind[1]}"

    # the declared values that the moment rules read equal the plan (and the expectation)
    tokens = c.input == "tokens"
    emb = model.embed
    if tokens:
        assert emb.token_std == plan.std("token")
        if c.position == "learned":
            assert emb.position_std == plan.std("position")
        else:  # rotary or no positions: no table at all
            assert emb.position is None and "embed.position.weight" not in dict(model.named_parameters())
        if c.n_segments:
            assert emb.segment_std == plan.std("segment")
        if c.tie_head:
            assert model.head.weight is emb.token.weight  # the tied head is the token table
            assert "head.weight" not in dict(model.named_parameters())
    else:
        assert emb.patch_std == plan.std("patch") and emb.position_std == plan.std("position")
    if not (tokens and c.tie_head):
        assert "head.weight" in dict(model.named_parameters())
    assert torch.equal(model.head_scale, f32(head_scale)) and plan.head_scale == pytest.approx(head_scale, rel=1e-12)
    assert plan.learnable_beta is learnable

    stacks = [(i, lyr) for i, lyr in enumerate(model.layers)]
    stacks += [(c.n_layers + j, lyr) for j, lyr in enumerate(getattr(model, "dec_layers", []))]
    assert len(stacks) == n_total(c)
    for index, lyr in stacks:
        assert lyr.index == index
        sites = ["attn", "cross", "ffn"] if index >= c.n_layers else ["attn", "ffn"]
        for site in sites:
            res = getattr(lyr, site)
            b = beta * math.sqrt(plan.notes["cross_factor"][index]) if c.init == "auto" and site == "cross" else beta
            assert torch.equal(res.lam, f32(lam)) and torch.equal(res.beta.detach(), f32(b))
            assert isinstance(res.beta, nn.Parameter) is learnable
            br = res.branch
            if site == "ffn":
                if c.activation == "shaped_relu":  # s± = 1 + c±/√d (Eq. 4), buffers included
                    root = math.sqrt(c.d_model)
                    assert float(br.act.s_plus) == float(f32(1.0 + c.shaped_c_plus / root))
                    assert float(br.act.s_minus.detach()) == float(f32(1.0 + c.shaped_c_minus / root))
                if c.activation in ("swiglu", "geglu"):  # the gate and up projections of a GLU
                    assert br.fc1.gate_std == plan.std("w1", index) and br.fc1.up_std == plan.std("w3", index)
                    seen_roles.update(("w1", "w3"))
                else:
                    assert br.fc1.weight_std == plan.std("w1", index)
                assert br.fc2.weight_std == plan.std("w2", index)
                seen_roles.update(("w1", "w2"))
            else:
                shaped = site == "attn" and c.attention == "shaped"  # cross-attention stays standard
                assert isinstance(br.attn, ShapedAttention) is shaped
                for role in ("q", "k", "v"):
                    declared, planned = getattr(br.attn, f"sigma_{role}"), plan.std(role, index)
                    if shaped:  # float attributes
                        assert declared == planned, role
                    else:
                        assert torch.equal(declared, f32(planned)), role
                if shaped:  # the buffers of the fixed/recover modes are set too (the model comes from meta)
                    assert torch.equal(br.attn.gamma1.detach(), f32(c.shaped_gamma1))
                    assert torch.equal(br.attn.gamma2.detach(), f32(c.shaped_gamma2))
                assert br.proj.weight_std == plan.std("o", index)
    expected_roles = set(BLOCK_ROLES) | ({"token"} if tokens else {"patch", "position"})
    expected_roles |= {"position"} if tokens and c.position == "learned" else set()
    expected_roles |= {"w3"} if c.activation in ("swiglu", "geglu") else set()
    expected_roles |= {"segment"} if c.n_segments else set()
    expected_roles |= set() if (tokens and c.tie_head) else {"head"}
    assert seen_roles == expected_roles


# ----------------------------------------------------------------------------------------------------------------
# scheme-specific identities (Kedia et al. App. M, Fig. 14/15; Wang et al. 2022; Zhang et al. 2019; Touvron et al.)
# ----------------------------------------------------------------------------------------------------------------

DSLM_CASES = [dict(d_model=32, dropout=0.1, n_layers=4), dict(d_model=64, dropout=0.0, n_layers=6, d_ff=96),
              dict(d_model=48, dropout=0.3, n_layers=3, n_segments=2, n_heads=4),
              dict(arch="encoder_decoder", n_layers=2, n_decoder_layers=3, dropout=0.2)]


def dslm_config(scheme="dslm", **kw):
    return TransformerConfig(**{**BASE, "init": scheme, **kw})


@pytest.mark.parametrize("scheme", ["dslm", "dslm_simple"])
@pytest.mark.parametrize("case", DSLM_CASES)
def test_dslm_unit_ffn_embedding_and_residual(scheme, case):
    c = dslm_config(scheme, **case)
    plan, d, p, N = make_plan(c), c.d_model, c.dropout, n_total(c)
    for layer in range(N):
        # FFN output variance gain C2 = d·d_ff·σ²_w1·σ²_w2/(2(1−p)) = 1 (App. M, Fig. 15; Table 2 at d_ff = 4d)
        c2 = d * c.ffn_width * plan.std("w1", layer) ** 2 * plan.std("w2", layer) ** 2 / (2.0 * (1.0 - p))
        assert c2 == pytest.approx(1.0, rel=1e-12)
        # σ²_q = σ²_k = 1/d
        assert plan.std("q", layer) ** 2 * d == pytest.approx(1.0, rel=1e-12)
        assert plan.std("k", layer) ** 2 * d == pytest.approx(1.0, rel=1e-12)
        for site in ("attn", "cross", "ffn"):
            lam, beta = plan.scales(site, layer)
            assert lam**2 + beta**2 == pytest.approx(1.0, rel=1e-12)  # λ² + β² = 1 (Sec. 3.5)
            assert beta**2 == pytest.approx(c.beta_k / N**c.beta_alpha, rel=1e-12)  # β² = k/N^α
    # embeddings: the summed tables have variance 1 − p, i.e. unit variance after the embedding dropout
    n_emb = embedding_tables(c)
    total = plan.std("token") ** 2 + plan.std("position") ** 2 + (plan.std("segment") ** 2 if c.n_segments else 0.0)
    assert total == pytest.approx(1.0 - p, rel=1e-12)
    assert n_emb * plan.std("token") ** 2 == pytest.approx(1.0 - p, rel=1e-12)
    assert plan.head_scale == pytest.approx(1.0 / math.sqrt(d), rel=1e-12)  # Sec. 4.1
    assert not plan.learnable_beta


@pytest.mark.parametrize("case", DSLM_CASES)
def test_dslm_value_output_gain(case):
    """d²σ²_vσ²_o r_n/(1−p) = 1 with r_n the input correlation of layer n (App. M, Fig. 15)."""
    c = dslm_config(**case)
    plan, d, p = make_plan(c), c.d_model, c.dropout
    r = plan.notes["corr_schedule"]
    assert len(r) == n_total(c)
    for layer, r_n in enumerate(r):
        gain = d**2 * plan.std("v", layer) ** 2 * plan.std("o", layer) ** 2 * r_n / (1.0 - p)
        assert gain == pytest.approx(1.0, rel=1e-12), f"layer {layer}"
    # dslm_simple: V and O share the FFN's σ² (Fig. 14)
    simple = make_plan(c.replace(init="dslm_simple"))
    for layer in range(n_total(c)):
        assert simple.std("v", layer) == simple.std("o", layer) == simple.std("w1", layer)


def _zipf_sum_p2(v: int) -> float:
    """Σ p_i² for p_i ∝ 1/i, i = 1..V: the expected repetition correlation of i.i.d. Zipf tokens (App. A.1)."""
    i = np.arange(1, v + 1, dtype=np.float64)
    return float((1.0 / i**2).sum() / (1.0 / i).sum() ** 2)


@pytest.mark.parametrize("case", DSLM_CASES)
def test_dslm_correlation_schedule_is_fig15(case):
    """r_0 = the embedding output's correlation under Zipf tokens (App. A.1: position rows contribute none, the
    segment table 2/3), then per layer Fig. 15's r ← λ²r + β²(1−p), r ← λ²r + β²(1−p)F(r) with the ReLU map
    F(r) = r + √(1−r²)/π − r·acos(r)/π."""
    c = dslm_config(**case)
    plan, p = make_plan(c), c.dropout
    b2 = c.beta_k / n_total(c) ** c.beta_alpha
    l2 = 1.0 - b2
    r = (_zipf_sum_p2(c.vocab_size) + (2.0 / 3.0 if c.n_segments else 0.0)) / (3 if c.n_segments else 2)
    r *= 1.0 - p  # the embedding dropout scales the correlation (App. A.3): r at the first layer's input
    expected = []
    for _ in range(n_total(c)):
        expected.append(r)
        r = l2 * r + b2 * (1.0 - p)
        r = l2 * r + b2 * (1.0 - p) * (r + math.sqrt(1.0 - r * r) / math.pi - r * math.acos(r) / math.pi)
    assert plan.notes["corr_schedule"] == pytest.approx(expected, rel=1e-9)


def test_dslm_patch_model_value_output_gain_is_finite_and_unit():
    c = TransformerConfig(**{**BASE, **CONFIGS["patches"], "init": "dslm"})
    plan, d, p = make_plan(c), c.d_model, c.dropout
    r = plan.notes["corr_schedule"]
    for layer in range(n_total(c)):
        assert r[layer] > 0.0, f"layer {layer}: input correlation {r[layer]}"
        gain = d**2 * plan.std("v", layer) ** 2 * plan.std("o", layer) ** 2 * r[layer] / (1.0 - p)
        assert gain == pytest.approx(1.0, rel=1e-12)


def test_dslm_patch_embedding_has_unit_output_for_unit_pixels():
    # patch_dim·σ²_patch (the projection's output variance for unit-variance pixels) + σ²_position = 1 − p
    c = TransformerConfig(**{**BASE, **CONFIGS["patches"], "init": "dslm"})
    plan = make_plan(c)
    patch_dim = c.channels * c.patch_size**2
    assert patch_dim * plan.std("patch") ** 2 + plan.std("position") ** 2 == pytest.approx(1.0 - c.dropout, rel=1e-12)


@pytest.mark.parametrize("case", [dict(n_layers=3), dict(n_layers=12, d_ff=48),
                                  dict(arch="encoder_decoder", n_layers=2, n_decoder_layers=4)])
def test_deepnorm(case):
    """Wang et al. 2022 (encoder form): λ = (2N)^{1/4}, β = 1, V/O/W1/W2 Xavier·(8N)^{−1/4}, Q/K Xavier."""
    c = TransformerConfig(**{**BASE, "init": "deepnorm", **case})
    plan, xav, N, d = make_plan(c), make_plan(c.replace(init="xavier")), n_total(c), c.d_model
    for layer in range(N):
        for site in ("attn", "cross", "ffn"):
            lam, beta = plan.scales(site, layer)
            assert lam == pytest.approx((2.0 * N) ** 0.25, rel=1e-12) and beta == 1.0
        for role in ("v", "o", "w1", "w2"):
            assert plan.std(role, layer) == pytest.approx(xav.std(role, layer) * (8.0 * N) ** -0.25, rel=1e-12)
        for role in ("q", "k"):
            assert plan.std(role, layer) == pytest.approx(1.0 / math.sqrt(d), rel=1e-12)  # Xavier of d × d
    assert plan.std("w1", 0) == pytest.approx(math.sqrt(2.0 / (d + c.ffn_width)) * (8.0 * N) ** -0.25, rel=1e-12)


def test_dsinit_depth_scaling():
    """Zhang et al. 2019: Xavier·1/√l in layer l = 1..N for every block matrix; embeddings and head untouched."""
    c = TransformerConfig(**{**BASE, "init": "dsinit", "n_layers": 4})
    plan, xav = make_plan(c), make_plan(c.replace(init="xavier"))
    for layer in range(4):
        for role in BLOCK_ROLES:
            assert plan.std(role, layer) * math.sqrt(layer + 1) == pytest.approx(xav.std(role, layer), rel=1e-12)
        assert plan.scales("attn", layer) == (1.0, 1.0)
    for role in ("token", "position", "head"):
        assert plan.std(role) == xav.std(role)


@pytest.mark.parametrize("n_layers, eps", [(3, 0.1), (18, 0.1), (19, 1e-5), (24, 1e-5), (25, 1e-6), (40, 1e-6)])
def test_layerscale_epsilon_by_depth(n_layers, eps):
    """Touvron et al. 2021 (CaiT): ε = 0.1 up to depth 18, 10⁻⁵ up to 24, 10⁻⁶ beyond; β learnable."""
    plan = make_plan(TransformerConfig(**{**BASE, "init": "layerscale", "n_layers": n_layers}))
    for layer in range(n_layers):
        assert plan.scales("attn", layer) == (1.0, eps) and plan.scales("ffn", layer) == (1.0, eps)
    assert plan.learnable_beta and plan.notes["epsilon"] == eps


def test_layerscale_counts_decoder_layers():
    # N = 10 + 10 = 20 layers in all: ε = 10⁻⁵, although each stack alone is ≤ 18 deep
    plan = make_plan(TransformerConfig(**{**BASE, "init": "layerscale", "n_layers": 10, "arch": "encoder_decoder"}))
    assert plan.scales("cross", 15) == (1.0, 1e-5)


@pytest.mark.parametrize("scheme", ["skipinit", "rezero"])
def test_zero_beta_schemes(scheme):
    """De & Smith 2020 / Bachlechner et al. 2021: β = 0, learnable, so every block starts as the identity."""
    c = TransformerConfig(**{**BASE, "init": scheme, "norm_position": "none", "dropout": 0.0})
    model = Transformer(c)
    plan = model.plan
    assert plan.learnable_beta
    for layer in range(c.n_layers):
        assert plan.scales("attn", layer) == (1.0, 0.0) and plan.scales("ffn", layer) == (1.0, 0.0)
    ids = torch.randint(0, c.vocab_size, (2, c.seq_len))
    # every residual is the identity: the last layer's output is the embedding output, exactly
    assert torch.equal(model.hidden_states(ids), model.embed(ids))
    model.loss({"inputs": ids, "labels": ids}).backward()
    for lyr in model.layers:
        for site in ("attn", "ffn"):
            g = getattr(lyr, site).beta.grad
            assert g is not None and float(g) != 0.0  # β can move away from 0


def test_overrides_apply_to_every_scheme():
    for scheme in SCHEMES:
        c = TransformerConfig(**{**BASE, "init": scheme, "qk_gain": 2.0, "v_init": "noci", "n_heads": 8,
                                 "lam": 0.9, "beta": 0.3, "learnable_beta": True, "head_scale": 3.0})
        base = make_plan(c.replace(qk_gain=1.0, v_init="scheme", lam=None, beta=None, learnable_beta=False,
                                   head_scale=None))
        plan = make_plan(c)
        for layer in range(c.n_layers):
            assert plan.std("q", layer) == pytest.approx(2.0 * base.std("q", layer), rel=1e-12)  # Sec. 3.3's 2×
            assert plan.std("k", layer) == pytest.approx(2.0 * base.std("k", layer), rel=1e-12)
            assert plan.std("v", layer) ** 2 == pytest.approx(1.0 / c.d_head, rel=1e-12)  # Noci et al.: 1/d_head
            assert plan.std("o", layer) == base.std("o", layer)
            assert plan.scales("ffn", layer) == (0.9, 0.3)
        assert plan.learnable_beta and plan.head_scale == 3.0


def test_alekseev_products_are_the_papers_sigmas():
    """σ_OV = σ_Oσ_V and σ_21 = σ_2σ_1 with σ_O = std_O·√d, σ_V = std_V·√d, σ_1 = std_1·√d, σ_2 = std_2·√d_ff
    (Alekseev Sec. 2.1: variances σ²_O/d, σ²_V/d, σ²_1/d, σ²_2/(4d)); Q/K std 0.02 (σ_Q = 0.02√d, App. A)."""
    from sigprop.model.vit import timm_sigmas

    for kw in (dict(), dict(sigma_ov=1.2, sigma_21=0.6, d_ff=48), dict(n_heads=8, qk_gain=2.0)):
        c = TransformerConfig(**{**BASE, "init": "alekseev", **kw})
        plan, d = make_plan(c), c.d_model
        for layer in range(c.n_layers):
            s_o, s_v = plan.std("o", layer) * math.sqrt(d), plan.std("v", layer) * math.sqrt(d)
            s_1, s_2 = plan.std("w1", layer) * math.sqrt(d), plan.std("w2", layer) * math.sqrt(c.ffn_width)
            assert s_o * s_v == pytest.approx(c.sigma_ov, rel=1e-12) and s_o == pytest.approx(s_v, rel=1e-12)
            assert s_2 * s_1 == pytest.approx(c.sigma_21, rel=1e-12) and s_1 == pytest.approx(s_2, rel=1e-12)
            assert plan.std("q", layer) == pytest.approx(0.02 * c.qk_gain, rel=1e-12) == plan.std("k", layer)
            assert plan.scales("attn", layer) == (1.0, 1.0) and plan.scales("ffn", layer) == (1.0, 1.0)
        assert plan.head_scale == 1.0 and not plan.learnable_beta
    # the defaults are the paper's stated ViT values (App. A: "σ_OV ≈ 0.31 and σ_21 ≈ 0.61"), which timm's std 0.02
    # gives at the paper's d = 768
    c = TransformerConfig(init="alekseev")
    assert (c.sigma_ov, c.sigma_21) == (0.31, 0.61)
    ov, ff = timm_sigmas(768)
    assert round(ov, 2) == 0.31 and round(ff, 2) == 0.61


def test_position_alphas_survive_resampling():
    c = TransformerConfig(**{**BASE, "norm": "derf", "norm_alpha": 0.3, "norm_alpha_ffn": 1.1,
                             "norm_alpha_final": 2.0})
    model = Transformer(c)
    model.plan.apply(model, generator=torch.Generator().manual_seed(5))
    got = {(index, pos): m.alpha.detach().item() for index, pos, _, _, m in model.norms()}
    expected = {**{(i, "attn"): 0.3 for i in range(c.n_layers)}, **{(i, "ffn"): 1.1 for i in range(c.n_layers)},
                (None, "final"): 2.0}
    assert got == pytest.approx(expected, rel=1e-7)  # float32 parameters


# ----------------------------------------------------------------------------------------------------------------
# the plan API
# ----------------------------------------------------------------------------------------------------------------

def small(**kw) -> TransformerConfig:
    return TransformerConfig(**{**BASE, "n_layers": 2, **kw})


def test_apply_raises_on_parameter_without_plan():
    model = Transformer(small())
    model.extra = nn.Parameter(torch.zeros(3))
    with pytest.raises(RuntimeError, match="extra"):
        model.plan.apply(model)


def test_apply_raises_on_unknown_linear_or_norm():
    model = Transformer(small())
    model.layers[0].ffn.branch.add_module("gate", Linear(4, 4))
    with pytest.raises(TypeError, match="gate"):
        model.plan.apply(model)
    model = Transformer(small())
    model.layers[1].add_module("extra_norm", nn.BatchNorm1d(4))
    with pytest.raises(TypeError, match="BatchNorm1d"):
        model.plan.apply(model)


def test_plan_apply_resamples_in_place():
    model = Transformer(small(init="bert"), generator=torch.Generator().manual_seed(0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.plan.apply(model, generator=torch.Generator().manual_seed(0))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # same generator seed: same weights
    model.plan.apply(model, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(model.layers[0].attn.branch.attn.w_q, before["layers.0.attn.branch.attn.w_q"])


def test_custom_plan_is_used():
    c = small(init="xavier")
    model = Transformer(c, plan=make_plan(c.replace(init="bert")), generator=torch.Generator().manual_seed(3))
    assert model.plan.scheme == "bert"
    assert_sampled(model.layers[0].ffn.branch.fc1.weight, 0.02, "fc1 under a bert plan")


def test_plan_lookup_errors_and_json():
    plan = make_plan(small(init="dslm", n_layers=3))
    with pytest.raises(KeyError, match="nope"):
        plan.std("nope")
    with pytest.raises(ValueError, match="layer"):
        plan.std("q")
    assert isinstance(plan.std("token"), float) and isinstance(plan.std("q", 1), float)
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["scheme"] == "dslm" and len(d["stds"]["v"]) == 3 and len(d["lam"]["ffn"]) == 3
    assert d["head_scale"] == plan.head_scale


@pytest.mark.parametrize("scheme", ["dslm", "auto", "mup", "shaped"])
def test_a_token_scale_keeps_the_embedding_output_and_the_tied_logits_of_a_unit_embedding_scheme(scheme):
    """Gemma multiplies the token rows by √d: a scheme drawn for a unit-variance embedding output keeps it on the
    real model (the scaled table's second moment over its V·d i.i.d. entries, relative standard error √(2/(V·d))),
    and its tied head's logits keep their variance (the logit variance is proportional to (head scale × table
    std)², which the token scale leaves unchanged)."""
    base = dict(BASE, arch="decoder", norm="rmsnorm", position="rope", d_model=64, vocab_size=512, init=scheme,
                dropout=0.0)
    plain, scaled = TransformerConfig(**base), TransformerConfig(**base, embed_scale=8.0)
    for name, c in (("plain", plain), ("scaled", scaled)):
        model = Transformer(c, generator=torch.Generator().manual_seed(7))
        table = model.embed.token.weight.detach().double() * c.embed_scale
        n = table.numel()
        target = make_plan(plain).std("token") ** 2
        assert abs(float(table.pow(2).mean()) / target - 1.0) <= Z * math.sqrt(2.0 / n), name
    # the tied logits: head scale × table, the same product in both (the table's draw scaled by 1/embed_scale)
    p0, p1 = make_plan(plain), make_plan(scaled)
    assert p1.head_scale * p1.std("token") == pytest.approx(p0.head_scale * p0.std("token"), rel=1e-12)
    assert p1.std("token") == pytest.approx(p0.std("token") / 8.0, rel=1e-12)


def test_a_token_scale_leaves_a_fixed_std_scheme_and_an_untied_head_alone():
    """Xavier draws its table at a fixed std (Gemma's own init does too): the token scale is the model's, not the
    plan's; DSLM's untied head is its own matrix, so its head scale stays 1/√d."""
    xavier_plain = make_plan(TransformerConfig(**BASE))
    xavier_scaled = make_plan(TransformerConfig(**BASE, embed_scale=8.0))
    assert xavier_scaled.std("token") == xavier_plain.std("token") and xavier_scaled.head_scale == 1.0
    dslm = make_plan(TransformerConfig(**BASE, init="dslm", tie_head=False, embed_scale=8.0))
    assert dslm.head_scale == pytest.approx(1.0 / math.sqrt(BASE["d_model"]), rel=1e-12)
