"""``sigprop demo``'s report on small stand-in models: figures, JSON and the Markdown summary, with a seed-spread
note where a seed mean is skewed."""

from __future__ import annotations

import json

import sigprop.report.demo as demo
from sigprop.model.config import TransformerConfig

SMALL = dict(n_layers=12, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16, dropout=0.1)


def test_demo_writes_a_report_with_seed_spread_notes(tmp_path, monkeypatch):
    """A narrow Post-LN stack's gradient variance spreads log-normally across seeds (as in
    tests/cli/test_profiles.py), so its note reaches demo.md; the Pre-LN stand-in runs beside it."""
    configs = {"small-pre": TransformerConfig(**SMALL, norm_position="pre", init="xavier"),
               "small-post": TransformerConfig(**SMALL, norm_position="post", init="xavier")}
    monkeypatch.setattr(demo, "DEMO_CONFIGS", configs)
    calls = []

    class Steps:  # a Progress that notes the model of every measured seed
        def task(self, description, total=None):
            name = description.split(":")[0].removeprefix("demo ")
            return lambda k: calls.extend([name] * k if "measure" in description else [])

    results = demo.run_demo(tmp_path, seeds=6, batch_size=2, progress=Steps())
    text = (tmp_path / "demo.md").read_text(encoding="utf-8")
    for name in configs:
        assert results[name]["figure"].stat().st_size > 10_000
        assert json.loads(results[name]["json"].read_text())["kind"] == "comparison"
        assert f"| {name} |" in text and calls.count(name) == 6
    assert "Seed spread" in text and "- small-post: grad_var is skewed across seeds" in text
    assert "## Diagnosis" in text and "**small-post**" in text and "(theory: " in text
    assert json.loads(results["small-pre"]["json"].read_text())["meta"]["diagnosis"]["measured"]["findings"]
