"""Normalised attention entropy per layer: 1 for uniform rows (zero queries), near 0 for rows collapsed onto one key
(huge query/key weights), causal and padded rows normalised by their own visible keys, shaped attention included."""

from __future__ import annotations

import math

import pytest
import torch

from sigprop import TransformerConfig
from sigprop.measurement.attention_entropy import _normalised_entropy, attention_entropies
from sigprop.model.batches import token_batch
from sigprop.model.transformer import seeded_model

SMALL = dict(n_layers=3, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16, dropout=0.0)


@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_uniform_rows_have_entropy_one_and_collapsed_rows_near_zero(arch):
    config = TransformerConfig(**SMALL, arch=arch)
    batch = token_batch(config, batch_size=2, synthetic=True, seed=0)
    model = seeded_model(config, 0)
    with torch.no_grad():
        for layer in model.all_layers():
            layer.attn.branch.attn.w_q.zero_()
    assert attention_entropies(model, batch) == pytest.approx([1.0] * 3, abs=1e-12)
    with torch.no_grad():
        for layer in model.all_layers():
            attn = layer.attn.branch.attn
            attn.w_q.normal_(0.0, 30.0)
            attn.w_k.normal_(0.0, 30.0)
    assert max(attention_entropies(model, batch)) < 0.1


def test_padded_and_causal_rows_use_their_visible_keys():
    q = torch.zeros(1, 1, 4, 8)
    mask = torch.tensor([[True, True, True, False]])
    # uniform over 3 visible keys (padding) and over 1..4 keys (causal; the first row, with one key, left out)
    assert _normalised_entropy(q, q, 1.0, False, mask) == pytest.approx(1.0)
    assert _normalised_entropy(q, q, 1.0, True, None) == pytest.approx(1.0)
    k = torch.zeros(1, 1, 4, 8)
    k[..., 0, 0] = 1e4
    q2 = torch.zeros(1, 1, 4, 8)
    q2[..., 0] = 1.0
    assert _normalised_entropy(q2, k, 1.0, False, None) == pytest.approx(0.0, abs=1e-9)


def test_shaped_attention_reports_its_softmax():
    config = TransformerConfig(**{**SMALL, "n_layers": 2}, arch="encoder", attention="shaped", init="shaped",
                               norm_position="none", activation="shaped_relu")
    batch = token_batch(config, batch_size=2, synthetic=True, seed=0)
    values = attention_entropies(seeded_model(config, 0), batch)
    assert len(values) == 2 and all(0.9 < v <= 1.0 + 1e-12 for v in values)  # τ = τ₀√(d·d_head): near uniform
    assert not any(math.isnan(v) for v in values)


def test_padded_positions_queries_are_left_out():
    """A padded position is no query: its row (here collapsed onto one key) must not enter the mean of the real ones
    (uniform)."""
    q = torch.zeros(1, 1, 4, 8)
    q[..., 3, 0] = 1.0  # only the padded position's query is not zero
    k = torch.zeros(1, 1, 4, 8)
    k[..., 0, 0] = 1e4
    mask = torch.tensor([[True, True, True, False]])
    assert _normalised_entropy(q, k, 1.0, False, mask) == pytest.approx(1.0)
