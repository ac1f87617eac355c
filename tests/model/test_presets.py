"""The presets: every one builds a valid configuration, and the production-shaped ones have their published
shapes."""

from __future__ import annotations

import pytest

from sigprop.model.presets import PRESETS, preset_config
from sigprop.model.size import parameter_count, theory_bytes


def test_every_preset_builds():
    for name in PRESETS:
        assert preset_config(name).n_layers >= 1


@pytest.mark.parametrize("name,layers,width,heads,kv_heads,ffn,vocab,seq", [
    ("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    ("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    ("gpt3-175b", 96, 12288, 96, 96, 4 * 12288, 50257, 2048),
])
def test_production_presets_have_the_published_shapes(name, layers, width, heads, kv_heads, ffn, vocab, seq):
    c = preset_config(name)
    assert (c.n_layers, c.d_model, c.n_heads, c.kv_heads, c.ffn_width, c.vocab_size, c.seq_len) == (
        layers, width, heads, kv_heads, ffn, vocab, seq)
    assert c.d_head == 128 and c.arch == "decoder"
    assert theory_bytes(c) < 1e9  # their theory fits anywhere (measured peaks: docs/results/scale.md)


def test_llama3_and_gpt3_components():
    llama, gpt = preset_config("llama3-70b"), preset_config("gpt3-175b")
    assert (llama.norm, llama.activation, llama.position, llama.rope_theta, llama.tie_head) == (
        "rmsnorm", "swiglu", "rope", 500000.0, False)
    assert (gpt.norm, gpt.norm_position, gpt.activation, gpt.position, gpt.tie_head) == (
        "layernorm", "pre", "gelu", "learned", True)
    assert parameter_count(llama) == pytest.approx(70.6e9, rel=0.01)  # Llama-3-70B: 70.6 B parameters
    assert parameter_count(preset_config("llama3-8b")) == pytest.approx(8.03e9, rel=0.01)
    assert parameter_count(gpt) == pytest.approx(175e9, rel=0.01)
