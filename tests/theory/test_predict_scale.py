"""Predictions at production sizes: bounded time and memory (the bounded attention rule, the causal closed form at
any sequence length), and the token-resolved sweep left for batches where it is cheap."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from sigprop.model.presets import preset_config
from sigprop.model.size import gram_bytes
from sigprop.theory.predict import Prediction, predict

_CHILD = """
import json, sys, time
import sigprop
from sigprop.model.presets import preset_config
from sigprop.model.size import gram_bytes
config = preset_config(sys.argv[1]).replace(**json.loads(sys.argv[2]))
start = time.perf_counter()
profile = sigprop.predict(config)
print(json.dumps({"seconds": time.perf_counter() - start, "rule": profile.meta["attention_rule"],
                  "peak_kb": int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])}))
"""


def _predict_in_a_process(preset: str, **overrides) -> dict:
    """``sigprop.predict`` of a preset in a fresh process: its seconds, attention rule and peak resident memory.

    The peak is the child's own high-water mark (``VmHWM``), not ``ru_maxrss``: Linux carries the parent's peak across
    ``fork`` and ``execve`` into the child's ``ru_maxrss``, so a child started by a test worker that once held 2 GB
    would report 2 GB whatever it used itself."""
    run = subprocess.run([sys.executable, "-c", _CHILD, preset, json.dumps(overrides)], capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout.splitlines()[-1])


def test_a_llama3_70b_layer_is_predicted_in_bounded_time_and_memory():
    """Four layers of Llama-3-70B's shape (d 8192, 8192 tokens, rotary, grouped-query heads): the bounded rule, in
    under a minute on a loaded 2-core machine (about 0.4 s a layer when idle: docs/results/scale.md) and under 2 GB."""
    out = _predict_in_a_process("llama3-70b", n_layers=4)
    assert "bounded Monte Carlo: layers 0-3" in out["rule"]
    assert out["seconds"] < 60.0
    assert out["peak_kb"] < 2_000_000


@pytest.mark.slow
def test_llama3_70b_is_predicted_in_bounded_time_and_memory():
    """The whole preset, 80 layers: 29 s on this machine when idle (docs/results/scale.md); a generous bound."""
    out = _predict_in_a_process("llama3-70b")
    assert out["seconds"] < 180.0 and out["peak_kb"] < 2_000_000


def test_a_long_batch_keeps_the_exchangeable_sweep_unless_asked():
    """8 layers at 4096 tokens: the Gram matrices would take 3.2 GB, so a batch's prediction is exchangeable by
    default and says why; asked for, it is token-resolved."""
    config = preset_config("llama-preln").replace(n_layers=8, seq_len=4096, max_len=4096)
    ids = torch.randint(1, config.vocab_size, (1, 4096))
    default = Prediction(config, token_ids=ids)
    assert not default.resolved and f"{gram_bytes(config, 1) / 1e9:.3g} GB" in default.resolved_note
    assert Prediction(config, token_ids=ids, token_resolved=True).resolved


def test_gpt3_175b_sized_causal_closed_form_is_fast():
    """A GPT-3-175B-shaped decoder past its first layers (learned positions, small scores there): the causal closed
    form at 2048 tokens per layer in well under a second (O(L), interpolated softmax terms)."""
    from sigprop.components.attention import attention_backward, attention_forward
    from sigprop.core.moments import GradMoments, Moments

    c = preset_config("gpt3-175b")
    m = Moments(0.0, 1.0, 0.9)
    start = time.perf_counter()
    f = attention_forward(m, c.d_model, c.d_head, c.seq_len, 1e-9, 1e-9, 4e-4, 0.1, causal=True, approx="auto")
    b = attention_backward(GradMoments(1.0, 0.1), m, c.d_model, c.d_head, c.seq_len, 1e-9, 1e-9, 4e-4, 0.1,
                           causal=True, approx="auto")
    assert time.perf_counter() - start < 5.0
    assert float(f.var) > 0.0 and float(b.var) > 0.0


def test_the_gram_matrices_are_sized_by_the_batch_not_the_config():
    """A config of 8 tokens given a batch of 8192: the Gram matrices are the batch's, B × 8192 × 8192 per layer, so
    the default sweep is exchangeable (the config's own length would have called them cheap)."""
    from sigprop.model.config import TransformerConfig
    from sigprop.model.size import resolved_by_default

    config = TransformerConfig(arch="decoder", n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
                               max_len=8192)
    ids = torch.randint(1, config.vocab_size, (1, 8192))
    assert resolved_by_default(config, 1) and not resolved_by_default(config, 1, 8192)
    default = Prediction(config, token_ids=ids)
    assert not default.resolved
    assert f"{gram_bytes(config, 1, 8192) / 1e9:.3g} GB" in default.resolved_note


@pytest.mark.long
def test_a_long_decoder_with_small_scores_is_token_resolved_without_draws():
    """llama-preln (std-0.02 weights at d = 256: every score's variance about 0.01) at 256 tokens, asked for token by
    token: every layer takes the uniform Gram rule, so the state says no heads were drawn, and the prediction is
    finite and positive at every layer; with Xavier weights (scores of variance ~1) the layers sample."""
    config = preset_config("llama-preln").replace(n_layers=2, seq_len=256, max_len=256)
    ids = torch.randint(1, config.vocab_size, (1, 256), generator=torch.Generator().manual_seed(0))
    profile = predict(config, token_ids=ids, token_resolved=True)
    assert profile.meta["attention_rule"] == "token-resolved uniform: layers 0-1"
    assert "heads" not in profile.meta["forward_state"]
    rows = [r for r in profile.rows if r.layer >= 0]
    assert all(np.isfinite(r.fwd_var) and r.fwd_var > 0 and np.isfinite(r.grad_var) and r.grad_var > 0 for r in rows)
    xavier = config.replace(init="xavier", seq_len=64, max_len=64)
    sampled = predict(xavier, token_ids=ids[:, :64], token_resolved=True, attention_heads=4)
    assert sampled.meta["attention_rule"] == "token-resolved sampled: layers 0-1"
