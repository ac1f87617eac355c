"""``sigprop doctor RUN_DIR``: a training run's newest checkpoint diagnosed as it is (its trained weights measured
once, the theory reading their standard deviations and saying where trained weights make it an approximation);
``--fresh`` for a freshly initialised model of its configuration."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli

from .conftest import tiny_args


@pytest.mark.long
def test_doctor_reads_a_trained_run(corpus, tmp_path, monkeypatch):
    run = tmp_path / "run"
    done = run_cli(["train", *tiny_args(corpus, "steps=4", "checkpoint_every=4"), "--out", str(run)])
    assert done.exit_code == 0, done.stderr
    out = tmp_path / "d.json"
    done = run_cli(["doctor", str(run), "--seeds", "0", "--json", str(out)])
    assert done.exit_code == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["source"] == "run" and report["measured_what"].startswith("the newest checkpoint of")
    assert report["profiles"]["measured"] is not None
    # four AdamW steps move the norms off weight 1: the theory says it reads them as an approximation
    assert any("norms at their initial affine parameters" in a for a in report["approximations"])
    assert "theory approximate" in done.stdout
    fresh = tmp_path / "f.json"
    done = run_cli(["doctor", str(run), "--seeds", "0", "--fresh", "--json", str(fresh)])
    assert done.exit_code == 0, done.stderr
    assert json.loads(fresh.read_text())["measured_what"] == "theory only"
    done = run_cli(["doctor", str(run), "--set", "n_layers=3"])
    assert done.exit_code == 2 and "--fresh" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    # measure and compare take the run's trained model the same way: its checkpoint measured once, the theory reading
    # its weights and saying where they make it approximate
    measured, compared = tmp_path / "m.json", tmp_path / "c.json"
    done = run_cli(["measure", "--run", str(run), "--batch-size", "2", "--json", str(measured)])
    assert done.exit_code == 0, done.stderr
    assert json.loads(measured.read_text())["meta"]["seeds"] == [0]
    assert "newest checkpoint" in json.loads(measured.read_text())["meta"]["weights"]
    again = tmp_path / "m2.json"  # its dropout masks seeded: the same numbers on every run
    assert run_cli(["measure", "--run", str(run), "--batch-size", "2", "--json", str(again)]).exit_code == 0
    assert json.loads(again.read_text())["config"]["dropout"] > 0
    assert json.loads(again.read_text())["per_layer"] == json.loads(measured.read_text())["per_layer"]
    done = run_cli(["compare", "--run", str(run), "--batch-size", "2", "--json", str(compared)])
    assert done.exit_code == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "reads the standard deviations of the newest checkpoint" in said and "initial affine parameters" in said
    # the stored measurement compared later, from another folder: the theory reads the same checkpoint's weights
    # (it predicted a freshly initialised model without a word)
    again_compared = tmp_path / "c2.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    done = run_cli(["compare", "--measured", str(measured), "--json", str(again_compared)])
    assert done.exit_code == 0, done.stderr
    by_run, by_file = (json.loads(f.read_text())["predicted_meta"] for f in (compared, again_compared))
    assert by_file["plan"] == by_run["plan"] and "read" in by_run["plan"]["source"]
    assert any("initial affine parameters" in n for n in by_file["notes"])  # the notes are in the JSON too
    done = run_cli(["compare", "--run", str(run), "--preset", "fig1-preln"])
    assert done.exit_code == 2 and "--run" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = run_cli(["measure", "--run", str(tmp_path)])
    assert done.exit_code == 2 and "no run directory" in done.stderr
    # a run before its first checkpoint: refused (it measured four fresh seeds as if they were the run), --fresh kept
    for ckpt in run.glob("ckpt-*"):
        ckpt.unlink()
    done = run_cli(["measure", "--run", str(run), "--batch-size", "2"])
    assert done.exit_code == 2 and "no checkpoint yet" in done.stderr and "--fresh" in done.stderr
    done = run_cli(["compare", "--measured", str(measured)])  # its checkpoint gone: refused, not a fresh theory
    assert done.exit_code == 2 and "newest checkpoint is now None" in done.stderr
    assert run_cli(["measure", "--run", str(run), "--fresh", "--seeds", "1", "--batch-size", "2"]).exit_code == 0
