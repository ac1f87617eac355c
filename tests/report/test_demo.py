"""``sigprop demo``'s report on small stand-in models: figures, JSON and the Markdown summary, with a seed-spread
note where a seed mean is skewed."""

from __future__ import annotations

import json

import pytest

import sigprop.report.demo as demo
import sigprop.report.demo_training as demo_training
from sigprop.model.config import TransformerConfig
from tests.train.conftest import corpus, own_cache  # noqa: F401 - fixtures

SMALL = dict(n_layers=12, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16, dropout=0.1)


@pytest.mark.long
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

    results = demo.run_demo(tmp_path, seeds=6, batch_size=2, progress=Steps(), train=False)
    text = (tmp_path / "demo.md").read_text(encoding="utf-8")
    for name in configs:
        assert results[name]["figure"].stat().st_size > 10_000
        assert json.loads(results[name]["json"].read_text())["kind"] == "comparison"
        assert f"| {name} |" in text and calls.count(name) == 6
    assert "Seed spread" in text and "- small-post: grad_var is skewed across seeds" in text
    assert "## Diagnosis" in text and "**small-post**" in text and "(theory: " in text
    assert json.loads(results["small-pre"]["json"].read_text())["meta"]["diagnosis"]["measured"]["findings"]


@pytest.mark.long
def test_demo_training_section_trains_both_models_side_by_side(tmp_path, monkeypatch, corpus):  # noqa: F811
    """The training section on tiny stand-ins: both runs get a fate, the figure and the table are written, every
    step is reported to the progress, and a second call reuses the finished runs."""
    base = dict(arch="decoder", n_layers=3, d_model=16, n_heads=1, norm_position="none", vocab_size=300, seq_len=16,
                max_len=16, dropout=0.0)
    monkeypatch.setattr(demo_training, "DEMO_TRAINING_MODELS", {
        "xavier, no norm": TransformerConfig(**base, init="xavier"),
        "dslm, no norm": TransformerConfig(**base, init="dslm")})
    monkeypatch.setattr(demo_training, "DEMO_TRAINING", {**demo_training.DEMO_TRAINING, "steps": 12, "batch_size": 4,
                                                         "warmup_steps": 2, "eval_every": 6, "eval_batches": 1,
                                                         "checkpoint_every": 12, "track_every": 6,
                                                         "data": str(corpus)})
    ticks = {}

    class Steps:
        def task(self, description, total=None):
            ticks[description] = 0

            def tick(k):
                ticks[description] += k
            return tick

    result = demo_training.run_demo_training(tmp_path, progress=Steps())
    assert [r.model_name for r in result["runs"]] == ["xavier, no norm", "dslm, no norm"]
    assert all(r.fate in ("trained", "stalled", "diverged") and r.steps in (0, 12) for r in result["runs"])
    assert result["figure"].stat().st_size > 10_000
    assert set(ticks.values()) == {12} and len(ticks) == 2
    text = "\n".join(result["lines"])
    assert "| xavier, no norm |" in text and "| dslm, no norm |" in text and "What 0.0 M tokens can show" in text
    again = demo_training.run_demo_training(tmp_path)
    assert [r.wall for r in again["runs"]] == [r.wall for r in result["runs"]]  # reused, not retrained
