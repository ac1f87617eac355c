"""``parameter_count`` (sigprop.model.size) counts, from the config alone, the parameters the built model has."""

from __future__ import annotations

import pytest

from sigprop import TransformerConfig
from sigprop.model.size import parameter_count
from sigprop.model.transformer import Transformer

SMALL = dict(n_layers=3, d_model=32, n_heads=2, vocab_size=50, seq_len=8, max_len=8)


@pytest.mark.parametrize("fields", [
    {}, dict(norm="rmsnorm"), dict(norm="dyt"), dict(norm="derf"), dict(norm_position="post"),
    dict(norm_position="none", init="skipinit"), dict(init="rezero"), dict(init="layerscale"),
    dict(init="dslm", learnable_beta=True),
    dict(qk_norm=True), dict(head_transform=True, arch="encoder"), dict(tie_head=False), dict(n_segments=2),
    dict(activation="swiglu", norm="rmsnorm", position="rope", n_kv_heads=1), dict(head_dim=8, n_heads=2),
    dict(arch="encoder_decoder", n_decoder_layers=2), dict(arch="encoder_decoder", norm="rmsnorm", init="rezero"),
    dict(input="patches", arch="encoder", image_size=8, patch_size=4, seq_len=4, pool="mean"),
    dict(input="patches", arch="encoder", image_size=8, patch_size=4, seq_len=5, pool="cls", norm="dyt"),
    dict(parallel_block=True, arch="decoder"), dict(norm="none", norm_position="none", init="rezero"),
])
def test_the_count_is_the_built_models(fields):
    config = TransformerConfig(**{**SMALL, **fields})
    model = Transformer(config, sample=False)
    built = sum(p.numel() for p in model.parameters())  # a tied head's weight is one parameter, counted once
    assert parameter_count(config) == built
