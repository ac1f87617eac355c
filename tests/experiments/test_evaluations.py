"""Experiments that evaluate another's trained models (fp8): they complete the source experiment in its folder,
reuse its finished runs, evaluate each model's runs at its best rate, and keep each run's evaluation; a folder in
use by another invocation is refused."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sigprop.experiments import catalog
from sigprop.experiments.run import _folder_lock, run_experiment
from tests.experiments.test_runner import _experiment


@pytest.fixture
def tiny_fp8(corpus, monkeypatch):
    source = _experiment(corpus, lrs=(3e-3, 1e-2), tokens_per_parameter=0.3, seeds=2)
    fp8 = dataclasses.replace(source, name="tiny-fp8", runs_from="tiny", evaluation="fp8")
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny", source)
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny-fp8", fp8)


@pytest.mark.long
def test_fp8_evaluates_the_source_s_best_runs_and_reuses_them(tiny_fp8, tmp_path):
    said = []
    result = run_experiment("tiny-fp8", out=tmp_path / "fp8", runs_dir=tmp_path / "src", workers=2, say=said.append)
    assert sum(line.startswith("start") for line in said) == 3  # two tuning runs, one more seed
    row = result.summary["rows"][0]
    source = json.loads((tmp_path / "src" / "results.json").read_text())["rows"][0]
    assert row["seeds"] == source["seeds"] == 2 and row["best_lr"] == source["best_lr"]
    assert row["fp32_mean"] == pytest.approx(source["final_val_mean"], rel=1e-6)  # the run's logged loss
    for fmt in ("e4m3", "e5m2"):
        assert row[f"{fmt}_delta_mean"] == pytest.approx(row[f"{fmt}_mean"] - row["fp32_mean"], abs=1e-9)
    assert len(list((tmp_path / "fp8" / "fp8").glob("*.json"))) == 2
    table = (tmp_path / "fp8" / "table.md").read_text()
    assert "| 2x16 |" in table and "Δ E4M3" in table
    assert {p.name for p in result.files} == {"results.json", "table.md", "figure.png"}
    again = []
    second = run_experiment("tiny-fp8", out=tmp_path / "fp8", runs_dir=tmp_path / "src", workers=2,
                            say=again.append)
    assert not any(line.startswith(("start", "fp8: evaluating")) for line in again)  # nothing trained or cast again
    assert second.summary["rows"] == result.summary["rows"]


def test_fp8_refuses_its_table_over_the_source_s(tiny_fp8, tmp_path):
    with pytest.raises(ValueError, match="must differ"):
        run_experiment("tiny-fp8", out=tmp_path / "x", runs_dir=tmp_path / "x")
    with pytest.raises(ValueError, match="no such folder"):
        run_experiment("tiny", out=tmp_path / "y", runs_dir=tmp_path / "z")
    (tmp_path / "y").mkdir()
    with pytest.raises(ValueError, match="must differ"):
        run_experiment("tiny", out=tmp_path / "y", runs_dir=tmp_path / "y")


def test_a_folder_in_use_is_refused(tiny_fp8, tmp_path):
    with _folder_lock(tmp_path / "e"), pytest.raises(ValueError, match="in use by"):
        run_experiment("tiny", out=tmp_path / "e", say=lambda s: None)
    assert not list((tmp_path / "e").glob("2x16*"))


@pytest.mark.long
def test_a_vit_experiment_gets_the_apjn_theory_beside_its_accuracy(monkeypatch, tmp_path):
    """The derf experiment's form on two tiny digits ViTs (Pre-LN and Derf, 10 steps): its table, and the theory's
    table with λ⁻¹ for the Derf model only, N/λ = N·λ⁻¹ its depth in units of λ, the accuracy of its best run."""
    derf = catalog.get_experiment("derf")
    scale = derf.scale("cpu")
    models = tuple(m for m in scale.models if m.name in ("pre-LN N=4", "derf a=1 N=4"))
    tiny = dataclasses.replace(scale, models=tuple(dataclasses.replace(m, lrs=(1e-3,)) for m in models),
                               base_model={**scale.base_model, "d_model": 16},
                               train={**scale.train, "steps": 10, "eval_every": 5, "warmup_steps": 2,
                                      "batch_size": 16, "checkpoint_every": 10}, seeds=1)
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny-derf", dataclasses.replace(derf, name="tiny-derf",
                                                                               scales={"cpu": tiny}))
    result = run_experiment("tiny-derf", out=tmp_path / "d", workers=2, say=lambda s: None)
    assert {p.name for p in result.files} >= {"table.md", "theory.md", "theory.json", "theory.png"}
    theory = json.loads((tmp_path / "d" / "theory.json").read_text())["rows"]
    by_name = {r["model"]: r for r in theory}
    assert by_name["pre-LN N=4"]["lambda_inv"] is None and by_name["pre-LN N=4"]["log_apjn"] is not None
    lam = by_name["derf a=1 N=4"]["lambda_inv"]
    assert lam > 0 and by_name["derf a=1 N=4"]["depth_over_lambda"] == pytest.approx(4 * lam)
    assert all(0.0 <= (r["accuracy_mean"] or 0.0) <= 1.0 for r in theory)
    assert "| derf a=1 N=4 | 4 | 1 |" in (tmp_path / "d" / "theory.md").read_text()


@pytest.mark.long
def test_the_shaped_experiment_tabulates_every_run_s_attention_entropy(monkeypatch, tmp_path, corpus):
    """The shaped experiment's form on tiny encoders (Pre-LN and shaped, 8 steps, tracked every 4): a row per run
    with its last tracked entropies, each in [0, 1]."""
    shaped = catalog.get_experiment("shaped")
    scale = shaped.scale("cpu")
    models = tuple(dataclasses.replace(m, lrs=(1e-3,)) for m in scale.models if m.name in ("pre-LN", "shaped, fixed"))
    tiny = dataclasses.replace(scale, models=models, base_model={**scale.base_model, "n_layers": 2, "d_model": 16,
                                                                 "vocab_size": 300, "seq_len": 16, "max_len": 16},
                               train={**scale.train, "steps": 8, "eval_every": 4, "track_every": 4, "batch_size": 4,
                                      "warmup_steps": 1, "checkpoint_every": 8, "data": str(corpus)}, seeds=1)
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny-shaped", dataclasses.replace(shaped, name="tiny-shaped",
                                                                                 scales={"cpu": tiny}))
    result = run_experiment("tiny-shaped", out=tmp_path / "s", workers=2, say=lambda s: None)
    assert {p.name for p in result.files} >= {"entropy.md", "entropy.json", "entropy.png"}
    rows = json.loads((tmp_path / "s" / "entropy.json").read_text())["rows"]
    assert [r["model"] for r in rows] == ["pre-LN", "shaped, fixed"]
    assert all(r["track_step"] == 8 and len(r["entropy"]) == 2 and 0.0 <= r["entropy_min"] <= 1.0 for r in rows)


def test_a_cast_that_overflows_is_said_not_averaged_away():
    """A seed whose FP8 cast gives a loss that is not finite left the mean of the others while `seeds` counted it."""
    from sigprop.experiments.evaluations import _fp8_row

    row = {"model": "m", "best_lr": 1e-3, "seeds": 2, "fp32_mean": 3.0, "fp32_se": 0.1, "e4m3_not_finite": 1,
           "e4m3_mean": 3.1, "e4m3_se": None, "e4m3_delta_mean": 0.1, "e4m3_delta_se": None, "e5m2_not_finite": 0,
           "e5m2_mean": 3.2, "e5m2_se": 0.1, "e5m2_delta_mean": 0.2, "e5m2_delta_se": 0.05, "e4m3_overflow": 0.0,
           "e4m3_underflow": 0.0, "e5m2_underflow": 0.0}
    cells = _fp8_row(row).split(" | ")
    assert cells[4] == "not finite (1 of 2 seeds)" and cells[5] == "not finite (1 of 2 seeds)"
    assert "3.2000" in cells[6]
