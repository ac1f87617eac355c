"""``init-theory``: sigprop's prediction at initialisation beside each trained model of an experiment."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sigprop.experiments import catalog
from sigprop.experiments.run import run_experiment
from sigprop.model.config import config_from_dict
from sigprop.theory.predict import predict
from tests.experiments.test_runner import _experiment


@pytest.mark.long
def test_the_table_holds_each_model_s_prediction_beside_its_trained_loss(corpus, tmp_path, monkeypatch):
    e = replace(_experiment(corpus, lrs=(3e-3,), seeds=1), evaluation="init-theory")
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny", e)
    result = run_experiment("tiny", out=tmp_path / "e", workers=1, say=lambda s: None)
    assert {p.name for p in result.files} >= {"theory.json", "theory.md", "theory.png"}
    table = json.loads((tmp_path / "e" / "theory.json").read_text())
    (row,) = table["rows"]
    scale = e.scale("cpu")
    expected = predict(config_from_dict({**scale.base_model, **scale.models[0].model}))
    fwd, grad, corr = (expected.column(q) for q in ("fwd_var", "grad_var", "fwd_corr"))
    assert row["fwd_var"] == pytest.approx(fwd, rel=1e-12) and row["grad_var"] == pytest.approx(grad, rel=1e-12)
    assert row["fwd_growth"] == pytest.approx(fwd[-1] / fwd[0]) and row["grad_ratio"] == pytest.approx(
        grad[0] / grad[-1])
    assert row["corr_last"] == pytest.approx(corr[-1])
    assert row["final_val_mean"] == result.summary["rows"][0]["final_val_mean"]
    assert "| 2x16 | 0.003 |" in (tmp_path / "e" / "theory.md").read_text()

    def no_prediction(*args, **kwargs):
        raise AssertionError("the kept prediction is reused")

    monkeypatch.setattr("sigprop.theory.predict.predict", no_prediction)
    again = run_experiment("tiny", out=tmp_path / "e", say=lambda s: None, train=False)
    assert any(p.name == "theory.md" for p in again.files)


def test_the_experiments_at_the_deepest_shape_carry_the_init_theory():
    for name in ("prior-methods", "ablations", "divergence"):
        assert catalog.get_experiment(name).evaluation == "init-theory"
