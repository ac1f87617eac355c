"""The Transformer (sigprop.model.transformer, sigprop.model.layer): shapes, tying, masking, sites, construction."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sigprop.components.residual import Residual
from sigprop.model import Transformer, TransformerConfig

BASE = dict(vocab_size=64, max_len=16, seq_len=16, n_layers=2, d_model=32, n_heads=4, d_ff=48)
PATCH = dict(input="patches", image_size=8, patch_size=2, channels=3, seq_len=16, n_classes=5)


def cfg(**kw) -> TransformerConfig:
    return TransformerConfig(**{**BASE, **kw})


def build(c: TransformerConfig, seed: int = 0, dtype=torch.float64) -> Transformer:
    """A model in eval mode (dropout off) in float64."""
    return Transformer(c, generator=torch.Generator().manual_seed(seed)).to(dtype).eval()


def ids(b=3, n=12, vocab=64, seed=1):
    return torch.randint(2, vocab, (b, n), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------------------------
# shapes
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_token_model_shapes(arch):
    m = build(cfg(arch=arch))
    x = ids(3, 11)
    assert m(x).shape == (3, 11, 64)
    assert m.hidden_states(x).shape == (3, 11, 32)


def test_encoder_decoder_shapes():
    m = build(cfg(arch="encoder_decoder", n_decoder_layers=3))
    assert len(m.layers) == 2 and len(m.dec_layers) == 3
    assert m(ids(2, 10), decoder_inputs=ids(2, 7, seed=2)).shape == (2, 7, 64)
    with pytest.raises(ValueError, match="decoder_inputs"):
        m(ids(2, 10))


def test_patch_model_shapes():
    c = cfg(**PATCH)
    m = build(c)
    images = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    assert m(images).shape == (4, 5)
    assert m.hidden_states(images).shape == (4, 16, 32)
    with pytest.raises(ValueError, match="images"):
        m(torch.randn(4, 1, 8, 8, dtype=torch.float64))
    assert m.head.weight.shape == (5, 32)


def test_segments_are_used():
    m = build(cfg(n_segments=2))
    x = ids(2, 8)
    s0, s1 = torch.zeros_like(x), torch.ones_like(x)
    assert m(x, segment_ids=s0).shape == (2, 8, 64)
    assert not torch.equal(m(x, segment_ids=s0), m(x, segment_ids=s1))


def test_encoder_decoder_with_segments_is_rejected_or_works():
    try:
        c = cfg(arch="encoder_decoder", n_segments=2)
    except ValueError as e:  # rejecting the combination at construction is a valid fix
        assert "n_segments" in str(e)
        return
    m = build(c)
    x = ids(2, 8)
    assert m(x, segment_ids=torch.zeros_like(x), decoder_inputs=x).shape == (2, 8, 64)


def test_not_a_config():
    with pytest.raises(TypeError, match="TransformerConfig"):
        Transformer(BASE)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------------
# head: tying, scale, final norm
# ----------------------------------------------------------------------------------------------------------------

def test_tied_head_shares_the_token_parameter():
    c = cfg()
    m = Transformer(c)  # built on the meta device, materialised with to_empty, then tied
    assert m.head.weight is m.embed.token.weight
    names = [n for n, _ in m.named_parameters()]
    assert "embed.token.weight" in names and "head.weight" not in names
    assert m.to(torch.float64).head.weight is m.embed.token.weight  # survives dtype conversion
    with torch.no_grad():
        m.embed.token.weight[5].zero_()
    assert torch.all(m.head.weight[5] == 0)  # one storage
    # construction inside a meta-device context: materialised on the CPU, still tied and still after to_empty
    with torch.device("meta"):
        mm = Transformer(c)
    assert mm.head.weight is mm.embed.token.weight and mm.head.weight.device.type == "cpu"
    mm.to_empty(device="cpu")
    assert mm.head.weight is mm.embed.token.weight


def test_untied_heads():
    m = Transformer(cfg(tie_head=False))
    assert m.head.weight is not m.embed.token.weight
    assert "head.weight" in dict(m.named_parameters())
    p = Transformer(cfg(**PATCH))
    assert "head.weight" in dict(p.named_parameters())


@pytest.mark.parametrize("position, has_norm", [("pre", True), ("post", False), ("none", False)])
def test_head_is_scaled_final_norm_of_hidden_states(position, has_norm):
    c = cfg(norm_position=position, head_scale=0.25)
    m = build(c)
    assert (m.final_norm is not None) is has_norm is c.has_final_norm
    x = ids()
    h = m.hidden_states(x)
    if m.final_norm is not None:
        h = m.final_norm(h)
    torch.testing.assert_close(m(x), m.head(h * 0.25), rtol=0, atol=0)
    assert float(m.head_scale) == 0.25


def test_final_norm_override():
    assert Transformer(cfg(norm_position="post", final_norm=True)).final_norm is not None
    assert Transformer(cfg(final_norm=False)).final_norm is None
    ed = Transformer(cfg(arch="encoder_decoder"))
    assert ed.enc_norm is not None and ed.final_norm is not None  # pre-norm: the memory is normalised too
    assert Transformer(cfg(arch="encoder_decoder", norm_position="post")).enc_norm is None


# ----------------------------------------------------------------------------------------------------------------
# masking (eval mode, float64). A masked key gets exactly zero attention weight, so the outputs that must not
# depend on it are computed from identical numbers: they are asserted bitwise equal.
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("position", ["pre", "post", "none"])
def test_decoder_is_causal_and_encoder_is_not(position):
    x = ids(3, 12)
    t = 7
    y = x.clone()
    y[:, t] = (x[:, t] + 1 - 2) % 62 + 2  # a different real token
    dec = build(cfg(arch="decoder", norm_position=position))
    a, b = dec(x), dec(y)
    assert torch.equal(a[:, :t], b[:, :t])  # the past does not see the future
    assert not torch.allclose(a[:, t:], b[:, t:])  # the changed position and later ones do see it
    enc = build(cfg(arch="encoder", norm_position=position))
    a, b = enc(x), enc(y)
    assert not torch.allclose(a[:, :t], b[:, :t])  # bidirectional


def test_encoder_decoder_decoder_side_is_causal():
    m = build(cfg(arch="encoder_decoder"))
    src, tgt = ids(2, 10), ids(2, 9, seed=5)
    tgt2 = tgt.clone()
    tgt2[:, 4] = (tgt[:, 4] - 2 + 1) % 62 + 2
    a, b = m(src, decoder_inputs=tgt), m(src, decoder_inputs=tgt2)
    assert torch.equal(a[:, :4], b[:, :4]) and not torch.allclose(a[:, 4:], b[:, 4:])
    src2 = src.clone()
    src2[:, 9] = (src[:, 9] - 2 + 1) % 62 + 2
    assert not torch.allclose(m(src2, decoder_inputs=tgt)[:, :1], a[:, :1])  # every target sees all the source


@pytest.mark.parametrize("arch, position", [("encoder", "pre"), ("encoder", "post"), ("decoder", "pre")])
def test_key_padding_mask_hides_padded_tokens(arch, position):
    m = build(cfg(arch=arch, norm_position=position))
    x = ids(3, 12)
    mask = torch.ones(3, 12, dtype=torch.bool)
    if arch == "decoder":  # left padding: causality alone would hide right padding
        mask[0, :3] = False
        mask[1, :7] = False
    else:
        mask[0, 9:] = False
        mask[1, 5:] = False
    y = x.clone()
    y[~mask] = (x[~mask] - 2 + 7) % 62 + 2  # change every padded token
    a, b = m(x, padding_mask=mask), m(y, padding_mask=mask)
    assert torch.equal(a[mask], b[mask])
    assert not torch.allclose(m(x)[mask], m(y)[mask])  # without the mask the real tokens would see them


def test_memory_padding_mask_hides_padded_source_tokens():
    m = build(cfg(arch="encoder_decoder"))
    src, tgt = ids(2, 10), ids(2, 6, seed=3)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[:, 7:] = False
    src2 = src.clone()
    src2[:, 7:] = (src[:, 7:] - 2 + 3) % 62 + 2
    a = m(src, padding_mask=mask, decoder_inputs=tgt)
    assert torch.equal(a, m(src2, padding_mask=mask, decoder_inputs=tgt))
    assert not torch.allclose(m(src, decoder_inputs=tgt), m(src2, decoder_inputs=tgt))


def test_dropout_only_in_training():
    c = cfg(dropout=0.3)
    m = Transformer(c)
    x = ids()
    m.train()
    assert not torch.equal(m(x), m(x))
    m.eval()
    assert torch.equal(m(x), m(x))


# ----------------------------------------------------------------------------------------------------------------
# sites
# ----------------------------------------------------------------------------------------------------------------

def documented_sites(c: TransformerConfig) -> list[tuple[int, str]]:
    """Layer −1 "input"; per layer "attn" ["cross"] "ffn" "layer"; (n_layers, "dec_input") before the decoder."""
    out = [(-1, "input")]
    for i in range(c.n_layers):
        out += [(i, "attn"), (i, "ffn"), (i, "layer")]
    if c.arch == "encoder_decoder":
        n_dec = c.n_decoder_layers if c.n_decoder_layers is not None else c.n_layers
        out.append((c.n_layers, "dec_input"))
        for j in range(n_dec):
            out += [(c.n_layers + j, s) for s in ("attn", "cross", "ffn", "layer")]
    return out


SITE_CASES = {"encoder": cfg(), "decoder_post": cfg(arch="decoder", norm_position="post"),
              "encoder_decoder": cfg(arch="encoder_decoder", n_decoder_layers=3), "patches": cfg(**PATCH)}


@pytest.mark.parametrize("name", list(SITE_CASES))
def test_sites_fire_once_per_forward(name):
    c = SITE_CASES[name]
    m = build(c)
    sites = m.sites()
    keys = [(layer, site) for layer, site, _ in sites]
    assert keys == documented_sites(c)
    assert len(set(keys)) == len(keys)
    assert len({id(mod) for _, _, mod in sites}) == len(sites)  # distinct modules
    counts = dict.fromkeys(keys, 0)
    outputs = {}

    def hook(key):
        def fn(module, args, output):
            counts[key] += 1
            outputs[key] = output
        return fn

    handles = [mod.register_forward_hook(hook((layer, site))) for layer, site, mod in sites]
    if c.input == "patches":
        inputs, kw = torch.randn(2, 3, 8, 8, dtype=torch.float64), {}
    else:
        inputs, kw = ids(2, 9), ({"decoder_inputs": ids(2, 6, seed=4)} if c.arch == "encoder_decoder" else {})
    h = m.hidden_states(inputs, **kw)
    for hd in handles:
        hd.remove()
    assert counts == dict.fromkeys(keys, 1)
    # "layer" is the hidden stream after the layer; "input" the embedding output; "dec_input" the decoder's
    last = keys[-1]
    assert last[1] == "layer" and torch.equal(outputs[last], h)
    if c.input == "tokens":
        assert torch.equal(outputs[(-1, "input")], m.embed(inputs))
    if c.arch == "encoder_decoder":
        assert torch.equal(outputs[(c.n_layers, "dec_input")], m.embed(kw["decoder_inputs"]))
    # a branch site is the residual's branch output before β: y = λx + β·branch
    for layer, site, mod in sites:
        if site in ("attn", "cross", "ffn"):
            lyr = m.all_layers()[layer]
            assert getattr(lyr, site).branch is mod


# ----------------------------------------------------------------------------------------------------------------
# structure
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("position", ["pre", "post", "none"])
def test_norm_position_children(position):
    c = cfg(arch="encoder_decoder", norm_position=position, norm="rmsnorm")
    m = Transformer(c)
    enc_children = ["attn", "ffn"]
    dec_children = ["attn", "cross", "ffn"]
    if position == "post":
        enc_children = ["attn", "attn_norm", "ffn", "ffn_norm"]
        dec_children = ["attn", "attn_norm", "cross", "cross_norm", "ffn", "ffn_norm"]
    for lyr in m.layers:
        assert [n for n, _ in lyr.named_children()] == enc_children
    for lyr in m.dec_layers:
        assert [n for n, _ in lyr.named_children()] == dec_children
    for lyr in m.all_layers():
        for name, branch in lyr.branches():
            assert isinstance(getattr(lyr, name), Residual)
            assert ("norm" in dict(branch.named_children())) is (position == "pre")
        for name, child in lyr.named_children():
            if name.endswith("_norm"):
                assert type(child).__name__ == "RMSNorm"


def test_layer_indices_count_the_whole_model():
    m = Transformer(cfg(arch="encoder_decoder", n_decoder_layers=3))
    assert [lyr.index for lyr in m.all_layers()] == [0, 1, 2, 3, 4]
    assert [lyr.index for lyr in m.dec_layers] == [2, 3, 4]


@pytest.mark.parametrize("learnable", [False, True])
def test_learnable_beta(learnable):
    m = Transformer(cfg(learnable_beta=learnable))
    params, buffers = dict(m.named_parameters()), dict(m.named_buffers())
    for lyr in m.layers:
        for site in ("attn", "ffn"):
            beta = getattr(lyr, site).beta
            assert isinstance(beta, nn.Parameter) is learnable
            key = f"layers.{lyr.index}.{site}.beta"
            assert (key in params) is learnable and (key in buffers) is not learnable
            assert f"layers.{lyr.index}.{site}.lam" in buffers  # λ is never learnt
    if learnable:
        x = ids()
        m.loss({"inputs": x, "labels": x}).backward()
        assert all(getattr(lyr, s).beta.grad is not None for lyr in m.layers for s in ("attn", "ffn"))


# ----------------------------------------------------------------------------------------------------------------
# construction: sample=False, reproducibility
# ----------------------------------------------------------------------------------------------------------------

def _declared(m: Transformer) -> dict:
    out = {k: v.clone() for k, v in m.named_buffers()}  # λ, σ_q/k/v, head scale (and β when fixed)
    for name, mod in m.named_modules():
        for attr in ("weight_std", "token_std", "position_std", "segment_std", "patch_std"):
            if hasattr(mod, attr):
                out[f"{name}.{attr}"] = getattr(mod, attr)
    return out


@pytest.mark.parametrize("kw", [dict(init="dslm", n_segments=2, norm="dyt", n_layers=3, learnable_beta=True),
                                dict(init="deepnorm", arch="encoder_decoder", norm_position="post"),
                                dict(PATCH, init="layerscale")])
def test_sample_false_sets_declared_values_without_drawing(kw):
    c = cfg(**kw)
    g = torch.Generator().manual_seed(7)
    g_state, global_state = g.get_state(), torch.get_rng_state()
    lazy = Transformer(c, generator=g, sample=False)
    assert torch.equal(g.get_state(), g_state) and torch.equal(torch.get_rng_state(), global_state)  # no draw
    full = Transformer(c, generator=torch.Generator().manual_seed(7))
    a, b = _declared(lazy), _declared(full)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])), k
    # constants (norm parameters, β) are set as well; only the random matrices are left unsampled
    full_params = dict(full.named_parameters())
    for name, p in lazy.named_parameters():
        if p.dim() < 2 and not name.startswith("embed.proj"):
            assert torch.equal(p, full_params[name]), name


def test_construction_is_reproducible_with_a_generator():
    c = cfg(init="dslm", n_segments=2, n_layers=3)
    global_state = torch.get_rng_state()
    a = Transformer(c, generator=torch.Generator().manual_seed(11)).state_dict()
    b = Transformer(c, generator=torch.Generator().manual_seed(11)).state_dict()
    assert torch.equal(torch.get_rng_state(), global_state)  # a generator leaves the global RNG alone
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = Transformer(c, generator=torch.Generator().manual_seed(12)).state_dict()
    assert not torch.equal(a["layers.0.attn.branch.attn.w_q"], other["layers.0.attn.branch.attn.w_q"])
    # without a generator the global RNG is used, so the global seed reproduces the model
    torch.manual_seed(5)
    d = Transformer(c).state_dict()
    torch.manual_seed(5)
    e = Transformer(c).state_dict()
    assert all(torch.equal(d[k], e[k]) for k in d)
