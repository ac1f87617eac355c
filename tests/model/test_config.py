"""TransformerConfig: validation (one ValueError per bad field, naming it), dict/override parsing, derived values."""

import dataclasses
import json

import pytest

from sigprop.model import SCHEMES, TransformerConfig, apply_overrides, config_from_dict

SMALL = dict(vocab_size=64, max_len=16, seq_len=16, n_layers=2, d_model=32, n_heads=4)


def cfg(**kw):
    return TransformerConfig(**{**SMALL, **kw})


def test_defaults_and_small_config_are_valid():
    TransformerConfig()
    for scheme in SCHEMES:
        cfg(init=scheme)


@pytest.mark.parametrize("field, value", [
    ("arch", "seq2seq"), ("input", "audio"), ("norm", "batchnorm"), ("activation", "tanh"),
    ("norm_position", "sandwich"), ("init", "kaiming"), ("v_init", "xavier"), ("attention", "linear"),
    ("shaped_mode", "anneal"),
])
def test_bad_choice_names_field_and_allowed_values(field, value):
    with pytest.raises(ValueError, match=field) as e:
        cfg(**{field: value})
    assert repr(value) in str(e.value)  # the message says what was given ...
    allowed = {"arch": "encoder_decoder", "input": "patches", "norm": "rmsnorm", "activation": "shaped_relu",
               "norm_position": "post", "init": "shaped", "v_init": "noci", "attention": "shaped",
               "shaped_mode": "recover"}[field]
    assert allowed in str(e.value)  # ... and what is allowed


INT_FIELDS = ("vocab_size", "max_len", "n_layers", "d_model", "n_heads", "seq_len", "image_size", "patch_size",
              "channels", "n_classes")


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [0, -3, 2.0, True, "8", None])
def test_non_integer_or_small_sizes_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        cfg(**{field: value})


@pytest.mark.parametrize("field, value", [("n_segments", -1), ("n_segments", 1.5), ("n_decoder_layers", 0),
                                          ("n_decoder_layers", 1.0), ("d_ff", 0), ("d_ff", "64")])
def test_other_integer_fields(field, value):
    with pytest.raises(ValueError, match=field):
        cfg(**{field: value})


@pytest.mark.parametrize("field, value", [
    ("dropout", -0.1), ("dropout", 1.0), ("dropout", float("nan")), ("dropout", True), ("dropout", "0.1"),
    ("attn_dropout", 1.0), ("attn_dropout", -1e-9), ("norm_eps", -1e-6), ("norm_alpha", 0.0),
    ("head_scale", 0.0), ("head_scale", float("inf")), ("beta_k", 0.0), ("beta_alpha", -0.5), ("lam", -1.0),
    ("beta", -0.1), ("qk_gain", 0.0), ("mask_prob", 0.0), ("mask_prob", 1.0),
    ("norm_alpha_attn", 0.0), ("norm_alpha_ffn", -1.0), ("norm_alpha_final", float("nan")), ("norm_alpha_final", "1"),
    ("sigma_ov", 0.0), ("sigma_ov", None), ("sigma_21", -0.5), ("sigma_21", float("inf")),
    ("shaped_tau0", 0.0), ("shaped_tau0", None), ("shaped_gamma1", float("nan")), ("shaped_gamma2", "1"),
    ("shaped_c_plus", float("inf")), ("shaped_c_minus", None), ("shaped_gamma", 0.0), ("shaped_gamma", 1.5),
    ("shaped_anneal_steps", 0), ("shaped_anneal_steps", 2.0), ("shaped_normalize", 1), ("shaped_normalize", "yes"),
])
def test_numbers_out_of_range(field, value):
    with pytest.raises(ValueError, match=field):
        cfg(**{field: value})


def test_numpy_numbers_are_taken_as_the_python_numbers_they_are():
    """A size or rate read from an array validates, and is stored (so serialised and hashed) as a plain number."""
    import numpy as np

    c = cfg(n_layers=np.int64(4), d_model=np.int32(64), dropout=np.float32(0.25), lam=np.float64(0.5),
            tie_head=np.False_)
    assert c.tie_head is False
    assert (c.n_layers, c.d_model, c.dropout, c.lam) == (4, 64, 0.25, 0.5)
    assert [type(v) for v in (c.n_layers, c.d_model, c.dropout, c.lam)] == [int, int, float, float]
    json.dumps(dataclasses.asdict(c))
    for field, value in (("n_layers", np.bool_(True)), ("n_layers", np.int64(0)), ("dropout", np.float64("nan")),
                         ("n_layers", np.float64(4.0))):
        with pytest.raises(ValueError, match=field):
            cfg(**{field: value})


def test_long_context_rotary_bases_are_accepted():
    """Yi-200K's rotary base is 5e6 and Qwen2.5-1M's 1e7: a base only sets frequencies, so it has no upper bound."""
    assert cfg(position="rope", rope_theta=1e7).rope_theta == 1e7
    with pytest.raises(ValueError, match="rope_theta"):
        cfg(position="rope", rope_theta=1.0)


def test_range_edges_accepted():
    cfg(dropout=0.0, attn_dropout=0.0, norm_eps=0.0, beta_alpha=0.0, lam=0.0)
    cfg(beta=0.0)
    cfg(dropout=0.9, attn_dropout=0.9, mask_prob=0.999)


def test_alpha_at_positions():
    c = cfg(norm="derf", norm_alpha=0.5, norm_alpha_attn=0.2, norm_alpha_final=3.0)
    assert (c.alpha_at("attn"), c.alpha_at("cross"), c.alpha_at("ffn"), c.alpha_at("final")) == (0.2, 0.2, 0.5, 3.0)
    assert cfg().alpha_at("final") == cfg().norm_alpha  # None falls back to norm_alpha
    with pytest.raises(ValueError, match="position"):
        c.alpha_at("head")


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="d_model.*n_heads"):
        cfg(d_model=30, n_heads=4)


def test_seq_len_within_max_len():
    with pytest.raises(ValueError, match="seq_len.*max_len"):
        cfg(seq_len=17)
    cfg(seq_len=16)


def test_patch_sizes():
    ok = dict(input="patches", image_size=8, patch_size=2, seq_len=16)
    cfg(**ok)
    with pytest.raises(ValueError, match="image_size.*patch_size"):
        cfg(**{**ok, "patch_size": 3})
    with pytest.raises(ValueError, match="seq_len"):
        cfg(**{**ok, "seq_len": 15})  # must equal the number of patches, (8/2)² = 16
    with pytest.raises(ValueError, match="encoder"):
        cfg(**ok, arch="decoder")
    with pytest.raises(ValueError, match="n_segments"):
        cfg(**ok, n_segments=2)
    # a patch model's seq_len may exceed max_len (max_len is a token-input field)
    cfg(input="patches", image_size=16, patch_size=2, seq_len=64, max_len=16)


def test_dslm_beta_squared_above_one_rejected():
    # β² = k/N^α with k = 2, α = 1: N = 1 gives β² = 2 > 1, i.e. λ² = 1 − β² < 0 (Kedia et al. Sec. 3.5)
    for scheme in ("dslm", "dslm_simple"):
        with pytest.raises(ValueError, match="beta_k"):
            cfg(init=scheme, n_layers=1)
        cfg(init=scheme, n_layers=2)  # β² = 1 exactly is allowed (λ = 0)
        cfg(init=scheme, n_layers=1, lam=1.0)  # an explicit λ lifts the check
        cfg(init=scheme, n_layers=1, beta_k=1.0)
    # N counts the decoder too: an encoder-decoder of 1 + 1 layers has β² = 1
    cfg(init="dslm", n_layers=1, arch="encoder_decoder")
    cfg(init="xavier", n_layers=1)  # other schemes do not use β² = k/N^α


def test_config_is_frozen():
    c = cfg()
    with pytest.raises(AttributeError):
        c.d_model = 64  # type: ignore[misc]


def test_config_from_dict():
    c = cfg(init="dslm", n_layers=3)
    assert config_from_dict(json.loads(c.to_json())) == c
    assert config_from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="d_modle"):
        config_from_dict({**c.to_dict(), "d_modle": 3})
    with pytest.raises(ValueError, match="JSON object"):
        config_from_dict([("d_model", 32)])
    with pytest.raises(ValueError, match="n_heads"):
        config_from_dict({**c.to_dict(), "n_heads": 5})  # validation runs on the way in


def test_apply_overrides_parses_by_field_type():
    c = cfg()
    out = apply_overrides(c, ["n_layers=3", "dropout=0.25", "tie_head=false", "final_norm=none", "lam=0.5",
                              "norm=rmsnorm", " attn-dropout = 0 ", "head_scale=2", "learnable_beta=yes"])
    assert out.n_layers == 3 and isinstance(out.n_layers, int)
    assert out.dropout == 0.25
    assert out.tie_head is False and out.learnable_beta is True
    assert out.final_norm is None
    assert out.lam == 0.5 and out.norm == "rmsnorm"
    assert out.attn_dropout == 0.0 and isinstance(out.attn_dropout, float)
    assert out.head_scale == 2.0 and isinstance(out.head_scale, float)
    assert out.d_ff is None and apply_overrides(c, ["d_ff=null"]).d_ff is None
    assert apply_overrides(c, ["final_norm=1"]).final_norm is True
    assert apply_overrides(c, []) == c


@pytest.mark.parametrize("item, match", [
    ("d_modle=3", "d_modle"), ("n_layers", "key=value"), ("n_layers=2.5", "n_layers"), ("n_layers=abc", "n_layers"),
    ("dropout=high", "dropout"), ("tie_head=maybe", "tie_head"), ("n_heads=5", "n_heads"),
    ("n_layers=none", "n_layers"), ("dropout=1.5", "dropout"),
])
def test_apply_overrides_rejects(item, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(cfg(), [item])


def test_derived_properties():
    c = cfg(dropout=0.2)
    assert c.ffn_width == 4 * 32 and cfg(d_ff=48).ffn_width == 48
    assert c.d_head == 8
    assert c.p_attn == 0.2 and cfg(dropout=0.2, attn_dropout=0.0).p_attn == 0.0
    assert c.has_final_norm is True  # pre-norm default
    assert cfg(norm_position="post").has_final_norm is False
    assert cfg(norm_position="post", final_norm=True).has_final_norm is True
    assert cfg(final_norm=False).has_final_norm is False
    assert cfg(norm_position="none").has_final_norm is False  # no norm anywhere
    with pytest.raises(ValueError, match="final_norm=True needs norms"):  # asked for and ignored, once
        cfg(norm_position="none", final_norm=True)
    with pytest.raises(ValueError, match="n_decoder_layers applies to arch='encoder_decoder' only"):
        cfg(arch="encoder", n_decoder_layers=6)
    assert c.total_layers == 2 and cfg(arch="decoder").total_layers == 2
    assert cfg(arch="encoder_decoder").total_layers == 4
    assert cfg(arch="encoder_decoder", n_decoder_layers=1).total_layers == 3
    assert c.n_embedding_types == 2 and cfg(n_segments=2).n_embedding_types == 3
    p = cfg(input="patches", image_size=8, patch_size=2, seq_len=16)
    assert p.n_patches == 16 and p.n_embedding_types == 2


# ----------------------------------------------------------------------------------------------------------------
# the shaped Transformer's fields (Noci et al. 2023, Eqs. 4, 9, 33, App. D)
# ----------------------------------------------------------------------------------------------------------------

SHAPED = dict(attention="shaped", activation="shaped_relu", attn_dropout=0.0)


def test_shaped_defaults_are_the_papers():
    c = cfg(**SHAPED)
    # App. D: γ₁ = γ₂ = 1 at init, s₋ = 1 − 1/√n (c₊ = 0, c₋ = −1); Fig. 1: τ₀ = 1, γ = 1/√8
    assert (c.shaped_gamma1, c.shaped_gamma2, c.shaped_c_plus, c.shaped_c_minus) == (1.0, 1.0, 0.0, -1.0)
    assert c.shaped_tau0 == 1.0 and c.shaped_gamma ** 2 == pytest.approx(1.0 / 8.0, rel=1e-15)
    assert c.shaped_mode == "fixed" and c.shaped_anneal_steps is None and c.shaped_normalize is True
    assert TransformerConfig().attention == "standard"


def test_shaped_attention_refuses_attention_dropout():
    with pytest.raises(ValueError, match="attn_dropout") as e:
        cfg(attention="shaped", dropout=0.1)  # attn_dropout None → dropout
    assert "dropout (attn_dropout is None)" in str(e.value)
    with pytest.raises(ValueError, match="attn_dropout=0"):
        cfg(attention="shaped", attn_dropout=0.2, dropout=0.0)
    cfg(attention="shaped", dropout=0.1, attn_dropout=0.0)  # dropout elsewhere is fine
    cfg(attention="shaped", dropout=0.0)


def test_recover_needs_anneal_steps_and_only_recover_takes_them():
    with pytest.raises(ValueError, match="shaped_anneal_steps"):
        cfg(**SHAPED, shaped_mode="recover")
    for mode in ("fixed", "learn"):
        with pytest.raises(ValueError, match="shaped_anneal_steps.*recover") as e:
            cfg(**SHAPED, shaped_mode=mode, shaped_anneal_steps=10)
        assert repr(mode) in str(e.value)
    cfg(**SHAPED, shaped_mode="recover", shaped_anneal_steps=1)


def test_shaped_relu_slopes_must_not_both_vanish():
    # s± = 1 + c±/√d: c± = −√d makes both zero (the activation would be identically 0)
    with pytest.raises(ValueError, match="shaped_c_plus and shaped_c_minus"):
        cfg(activation="shaped_relu", d_model=16, n_heads=4, shaped_c_plus=-4.0, shaped_c_minus=-4.0)
    cfg(activation="shaped_relu", d_model=16, n_heads=4, shaped_c_plus=-4.0)  # one zero slope: a scaled ReLU
    cfg(activation="relu", d_model=16, n_heads=4, shaped_c_plus=-4.0, shaped_c_minus=-4.0)  # unused there


def test_norm_none_allowed_except_post():
    for position in ("pre", "none"):
        c = cfg(norm="none", norm_position=position)
        assert not c.has_final_norm  # there is no norm to put at the end
    with pytest.raises(ValueError, match="norm='none' with norm_position='post'") as e:
        cfg(norm="none", norm_position="post")
    assert "layernorm" in str(e.value)  # says what is allowed


def test_shaped_fields_round_trip_and_override():
    c = cfg(**SHAPED, shaped_mode="recover", shaped_anneal_steps=4000, shaped_gamma=0.2)
    assert config_from_dict(json.loads(c.to_json())) == c
    d = apply_overrides(c, ["shaped_normalize=false", "shaped_tau0=2", "shaped_mode=learn",
                            "shaped_anneal_steps=none", "attention=standard"])
    assert (d.shaped_normalize, d.shaped_tau0, d.shaped_mode, d.shaped_anneal_steps, d.attention) == (
        False, 2.0, "learn", None, "standard")


def test_query_key_and_parallel_block_fields_check_what_they_need():
    rope = dict(arch="decoder", position="rope", d_model=64, n_heads=4)
    c = TransformerConfig(**rope, qk_norm=True, rotary_fraction=0.25, parallel_block=True, norm_eps=1e-6)
    assert (c.qk_norm_eps, c.rotary_fraction) == (1e-6, 0.25)
    with pytest.raises(ValueError, match="rotary_fraction applies to position='rope'"):
        TransformerConfig(rotary_fraction=0.5)
    with pytest.raises(ValueError, match="rotary_fraction = 0.1 rotates 1"):
        TransformerConfig(**rope, rotary_fraction=0.1)
    with pytest.raises(ValueError, match="parallel_block"):
        TransformerConfig(parallel_block=True, norm_position="post")
    with pytest.raises(ValueError, match="qk_norm apply to standard attention"):
        TransformerConfig(qk_norm=True, attention="value_skipinit")
    assert TransformerConfig(qk_norm=False).qk_norm_eps is None
