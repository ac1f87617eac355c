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
    with pytest.raises(ValueError, match="--runs-dir is for"):
        run_experiment("tiny", out=tmp_path / "y", runs_dir=tmp_path / "z")


def test_a_folder_in_use_is_refused(tiny_fp8, tmp_path):
    with _folder_lock(tmp_path / "e"), pytest.raises(ValueError, match="in use by"):
        run_experiment("tiny", out=tmp_path / "e", say=lambda s: None)
    assert not list((tmp_path / "e").glob("2x16*"))
