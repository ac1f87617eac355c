"""``doctor(spread=True)`` / ``sigprop doctor --spread``: the interval one model's first-layer gradient ratio falls
in, for the current and the fixed model, and its coverage of per-seed measurements."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sigprop.analysis.doctor import INTERVAL_LEVEL, GradientInterval
from sigprop.analysis.experiment import batch_prediction
from sigprop.measurement.hooks import measure
from sigprop.model.batches import token_batch
from sigprop.model.config import TransformerConfig
from sigprop.model.transformer import Transformer
from tests.helpers import run_cli

#: a small Post-LN Xavier stack (closed-form attention: qk_gain 0.3)
SMALL = dict(n_layers=24, d_model=32, n_heads=1, vocab_size=300, seq_len=16, max_len=16, qk_gain=0.3,
             norm_position="post", init="xavier")
#: deep enough that its gradient vanishes towards the input, which the doctor flags and fixes
FLAGGED = {**SMALL, "n_layers": 48, "d_model": 64}


@pytest.mark.long
def test_cli_doctor_spread(tmp_path):
    out = run_cli(["doctor", "fig3-postln", *[f"--set={k}={v}" for k, v in FLAGGED.items()], "--seeds", "0",
                   "--spread", "--json", tmp_path / "d.json", "--html", tmp_path / "d.html"])
    assert out.exit_code == 0, out.stderr
    text = " ".join(out.stdout.split())  # the console wraps long lines
    assert "with 90% probability" in text and "the fix narrows it" in text
    intervals = json.loads((tmp_path / "d.json").read_text())["gradient_interval"]
    current, fixed = intervals["current"], intervals["fixed"]
    for interval in (current, fixed):
        assert interval["level"] == INTERVAL_LEVEL and interval["low"] < interval["expected"] < interval["high"]
        assert interval["log_sd"] > 0
    assert fixed["decades"] < current["decades"]  # DeepScaleLM's layers scale the gradient less: a narrower spread
    assert "One model, not the average" in (tmp_path / "d.html").read_text()


def test_spread_of_an_encoder_decoder_is_refused_before_any_work():
    out = run_cli(["doctor", "encdec-preln", "--spread"])
    assert out.exit_code == 2 and "encoder-decoder" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.long
def test_the_interval_covers_per_seed_measurements_at_its_level():
    """128 freshly drawn models of the small stack, measured on the prediction's batch (train mode, each seed's own
    dropout masks): the share whose σ²_g(0)/σ²_g(top) lies in the 90% interval is within three binomial standard
    deviations of 0.9."""
    config = TransformerConfig(**SMALL)
    batch = token_batch(config, batch_size=2)
    interval = GradientInterval.of(batch_prediction(config, batch).profile(spread=True))
    seeds, inside = 128, 0
    top = config.n_layers - 1
    for seed in range(seeds):
        model = Transformer(config, generator=torch.Generator().manual_seed(seed)).train()
        torch.manual_seed(10_000 + seed)
        rows = measure(model, batch).lookup()
        inside += interval.low <= rows[(0, "layer")].grad_var / rows[(top, "layer")].grad_var <= interval.high
    level = interval.level
    assert abs(inside / seeds - level) <= 3 * math.sqrt(level * (1 - level) / seeds), inside / seeds
