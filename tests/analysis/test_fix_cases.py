"""The doctor's fixes and their training evidence (sigprop.analysis.fix_cases): each case is what the doctor flags
and fixes, the experiment trains exactly those two models, and the doctor's text says what the stored outcome says."""

from __future__ import annotations

import json

import pytest

import bench.fix_outcomes as fix_outcomes
from sigprop.analysis.doctor import doctor, recommend
from sigprop.analysis.fix_cases import (
    FIX_CASES,
    NOT_MEASURED,
    FixOutcome,
    FixReading,
    fix_evidence,
    load_outcomes,
    outcomes_markdown,
)
from sigprop.experiments.catalog import get_experiment
from sigprop.experiments.runner import RunResult
from sigprop.model.config import TransformerConfig

CASE_IDS = [c.name for c in FIX_CASES]


@pytest.mark.long
@pytest.mark.parametrize("case", FIX_CASES, ids=CASE_IDS)
def test_each_case_is_flagged_and_its_fix_is_the_doctors(case):
    """The doctor (theory only) flags the case's model and recommends the case's fix: the fields the fix sets, to
    those values, and nothing beyond the scheme's own residual scales."""
    report = doctor(TransformerConfig(**case.flagged), seeds=0)
    assert report.flagged and report.recommendation is not None
    set_to_values = {k: v for k, v in report.recommendation.changes.items() if v is not None}
    assert set_to_values == {k: v for k, v in case.fix.items() if v is not None}
    assert case.matches(report.config, report.recommendation.changes)


def test_the_experiment_trains_each_case_and_its_twin():
    models = {m.name: m for m in get_experiment("doctor-fixes").scales["cpu"].models}
    assert len(models) == 2 * len(FIX_CASES)
    for case in FIX_CASES:
        flagged, fixed = models[f"{case.name}: flagged"], models[f"{case.name}: fixed"]
        assert fixed.model == {**flagged.model, **case.fix}
        assert set(fixed.model) - set(case.fix) == set(flagged.model) - set(case.fix)


def test_a_recommendation_cites_the_measured_outcome_of_its_kind():
    qk = next(c for c in FIX_CASES if "qk_gain" in c.fix)
    outcome = FixOutcome(qk.name, 4.5, 4.25, {"trained": 2}, {"trained": 2}, 2, "a test", 1e-3, 1e-3,
                         {"0": 4.4, "1": 4.6}, {"0": 4.2, "1": 4.3})
    config = TransformerConfig(**qk.flagged)
    said = fix_evidence(config, {"qk_gain": 1.0}, {qk.name: outcome})
    assert said == (f"{qk.name}: " + outcome.sentence(),)
    assert "4.500" in said[0] and "4.250" in said[0] and "lowered the final loss by 0.250" in said[0]
    worse = FixOutcome(qk.name, 4.0, 4.1, {"trained": 2}, {"stalled": 1, "trained": 1}, 2, "a test", 1e-3, 2e-3,
                       {"0": 4.0}, {"0": 4.1})
    assert "did not lower" in worse.sentence() and "stalled" in worse.sentence()
    assert worse.sentence().endswith(": contradicted") and said[0].endswith(": supported")


def test_a_model_that_trained_at_no_rate_is_said_so_and_not_compared():
    post = FIX_CASES[0]
    neither = FixOutcome(post.name, None, None, {"stalled": 10}, {"stalled": 10}, 0, "a test")
    said = neither.sentence()
    assert "flagged trained at no rate on both seeds (10 stalled)" in said
    assert "neither model trained on both seeds at any rate tried" in said
    assert "seeds at each model's best rate" not in said and "lowered" not in said
    fixed_only = FixOutcome(post.name, None, 5.0, {"stalled": 10}, {"trained": 2, "stalled": 6}, 2, "a test")
    assert "fixed 5.000" in fixed_only.sentence() and "fixed model trained where the flagged one did not" in (
        fixed_only.sentence())
    flagged_only = FixOutcome(post.name, 5.0, None, {"trained": 2}, {"diverged": 10}, 2, "a test")
    assert "fixed model did not train where the flagged one did" in flagged_only.sentence()


def test_an_unmeasured_kind_says_so():
    post = next(c for c in FIX_CASES if c.flagged["norm_position"] == "post")
    config = TransformerConfig(**post.flagged)
    assert fix_evidence(config, {"init": "dslm", "lam": None}, {}) == (f"{post.name}: {NOT_MEASURED}",)
    # no case of this kind: a Post-LN model given Q/K at 1x
    assert fix_evidence(config, {"qk_gain": 1.0}, {}) == (f"a fix of this kind: {NOT_MEASURED}",)
    # dropout against rank collapse is a case of its own, whatever the initialisation fix beside it
    dropout = next(c for c in FIX_CASES if c.fix == {"dropout": 0.1})
    assert fix_evidence(config, {"dropout": 0.1}, {}) == (f"{dropout.name}: {NOT_MEASURED}",)
    assert f"{dropout.name}: {NOT_MEASURED}" in fix_evidence(config, {"init": "dslm", "dropout": 0.1}, {})
    # the Pre-LN case does not speak for a Post-LN model
    assert all("pre-LN" not in s for s in fix_evidence(config, {"init": "dslm"}, {}))


def test_a_recommendation_beyond_any_one_case_says_the_whole_was_not_measured():
    """Pre-LN Xavier with Q/K at 2x: the doctor changes the scheme and the Q/K scale; each case trained one of the two
    changes alone (the Q/K case from DeepScaleLM), so the evidence says the combination was not trained."""
    pre = next(c for c in FIX_CASES if c.name.startswith("pre-LN"))
    qk = next(c for c in FIX_CASES if "qk_gain" in c.fix)
    config = TransformerConfig(**{**pre.flagged, "qk_gain": 2.0})
    said = fix_evidence(config, {"init": "dslm", "lam": None, "beta": None, "qk_gain": 1.0}, {})
    assert said == (f"{pre.name}: {NOT_MEASURED}", f"{qk.name}: {NOT_MEASURED}",
                    f"the recommendation as a whole (init=dslm, qk_gain=1.0): {NOT_MEASURED} (each case above "
                    "trained its own change alone)")
    # the scheme's own residual scales (None) are part of the case's fix, not a change beyond it
    assert len(fix_evidence(TransformerConfig(**pre.flagged), {"init": "dslm", "lam": None}, {})) == 1


def test_the_derf_case_does_not_speak_for_a_dyt_model():
    derf = next(c for c in FIX_CASES if "norm_alpha" in c.fix)
    dyt = TransformerConfig(**{**derf.flagged, "norm": "dyt"})
    assert not derf.matches(dyt, {"norm_alpha": 0.5})
    assert fix_evidence(dyt, {"norm_alpha": 0.5}, {}) == (f"a fix of this kind: {NOT_MEASURED}",)


def test_a_post_ln_scheme_in_a_llama_style_stack_is_replaced_by_auto():
    """init=deepnorm (a Post-LN scheme) in a Pre-LN RMSNorm/SwiGLU stack: the configuration check proposes a new
    scheme, and beyond DeepScaleLM's closed forms that is init='auto', flagged by depth or not."""
    from sigprop.analysis.config_checks import config_checks
    from sigprop.analysis.diagnosis import diagnose
    from sigprop.core.profile import Profile, Row

    llama = next(c for c in FIX_CASES if c.fix == {"init": "auto"})
    config = TransformerConfig(**{**llama.flagged, "init": "deepnorm"})
    checks = [c for c in config_checks(config) if c.flagged]
    assert any(c.changes.get("init") == "dslm" for c in checks)
    flat = diagnose(Profile("predicted", config.to_dict(), tuple(Row(layer, "layer", 0.0, 1.0, 0.3, 1.0, 0.5)
                                                                 for layer in range(config.n_layers))))
    for diagnosis in (doctor_diagnosis_exploding(config), flat):
        rec = recommend(config, diagnosis, checks=checks)
        assert rec is not None and rec.changes["init"] == "auto"
        assert any("init='auto' calibrates" in r for r in rec.reasons)


def test_the_doctors_recommendation_carries_the_stored_evidence():
    """What the doctor's recommendation says is what the outcomes file (the experiment's table) says."""
    qk = next(c for c in FIX_CASES if "qk_gain" in c.fix)
    config = TransformerConfig(**qk.flagged)
    rec = recommend(config, doctor_diagnosis_exploding(config))
    assert rec is not None and rec.evidence == fix_evidence(config, rec.changes, load_outcomes())
    assert rec.to_dict()["evidence"] == list(rec.evidence)


def doctor_diagnosis_exploding(config):
    """A diagnosis that flags the gradient's depth law, from a hand-made profile (no prediction needed): the
    gradient grows ×1.1 per layer towards the input."""
    from sigprop.analysis.diagnosis import diagnose
    from sigprop.core.profile import Profile, Row

    n = config.n_layers
    rows = tuple(Row(layer, "layer", 0.0, 1.0, 0.3, 1.1 ** (n - layer), 0.5) for layer in range(n))
    return diagnose(Profile("predicted", config.to_dict(), rows))


def _run(model: str, seed: int, lr: float, final: float | None) -> dict:
    """A finished tuning run as an experiment summary stores it."""
    return RunResult(f"{model}-{lr:g}-s{seed}", model, seed, lr, True, "trained" if final else "stalled", "", final,
                     600, 1, 1.0, []).__dict__


def test_the_outcomes_file_and_its_table_are_written_read_back_and_bad_files_are_refused(tmp_path):
    qk = next(c for c in FIX_CASES if "qk_gain" in c.fix)
    post, pre = FIX_CASES[0], FIX_CASES[1]
    summary = {"experiment": "doctor-fixes", "rows": [
        {"model": f"{qk.name}: flagged", "settled": True, "final_val_mean": 4.5, "fates": {"trained": 6}, "seeds": 2,
         "best_lr": 2e-3},
        {"model": f"{qk.name}: fixed", "settled": True, "final_val_mean": 4.2, "fates": {"trained": 6}, "seeds": 2,
         "best_lr": 4e-3},
        {"model": f"{post.name}: flagged", "settled": False, "final_val_mean": 5.0, "fates": {}, "seeds": 1,
         "best_lr": 1e-3},
        # a case settled with its flagged model trained at no rate tried: the seeds are the fixed model's
        {"model": f"{pre.name}: flagged", "settled": True, "final_val_mean": None, "fates": {"stalled": 10},
         "seeds": 0, "best_lr": None},
        {"model": f"{pre.name}: fixed", "settled": True, "final_val_mean": 5.5, "fates": {"trained": 6}, "seeds": 2,
         "best_lr": 1e-3},
    ], "runs": [_run(f"{qk.name}: flagged", 0, 2e-3, 4.4), _run(f"{qk.name}: flagged", 1, 2e-3, 4.6),
                _run(f"{qk.name}: flagged", 0, 4e-3, 4.9),  # another rate: not the best
                _run(f"{qk.name}: fixed", 0, 4e-3, 4.1), _run(f"{qk.name}: fixed", 1, 4e-3, 4.3),
                _run(f"{pre.name}: flagged", 0, 1e-3, None),
                _run(f"{pre.name}: fixed", 0, 1e-3, 5.4), _run(f"{pre.name}: fixed", 1, 1e-3, 5.6)]}
    results, out, table = tmp_path / "results.json", tmp_path / "fix_outcomes.json", tmp_path / "outcomes.md"
    results.write_text(json.dumps(summary))
    assert fix_outcomes.main(["--results", str(results), "--out", str(out), "--table", str(table)]) == 0
    read = load_outcomes(out)
    assert list(read) == [pre.name, qk.name]  # the unsettled case is not kept
    assert read[pre.name].flagged_loss is None and read[pre.name].seeds == 2
    assert read[pre.name].reading is FixReading.SUPPORTED  # the fixed twin trained, the flagged model did not
    assert read[qk.name].flagged_loss == 4.5 and read[qk.name].seeds == 2
    assert read[qk.name].flagged_by_seed == {"0": 4.4, "1": 4.6} and read[qk.name].fixed_by_seed == {"0": 4.1, "1": 4.3}
    assert read[qk.name].reading is FixReading.SUPPORTED and read[qk.name].flagged_lr == 2e-3
    assert table.read_text() == outcomes_markdown(read)
    assert "| 0.002: 4.400, 4.600 (mean 4.500) | 0.004: 4.100, 4.300 (mean 4.200) | -0.300, -0.300 | supported |" in (
        table.read_text())
    assert f"| {post.name} | – | – | – | {NOT_MEASURED} |" in table.read_text()
    assert load_outcomes(tmp_path / "absent.json") == {}
    out.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="list of outcomes"):
        load_outcomes(out)
    for bad in (dict(read[qk.name].__dict__, fixed_loss=float("nan")),
                dict(read[qk.name].__dict__, fixed_by_seed={"0": float("inf")})):
        out.write_text(json.dumps([bad]))
        with pytest.raises(ValueError, match="not finite"):
            load_outcomes(out)
    results.write_text(json.dumps({"experiment": "depth", "rows": []}))
    assert fix_outcomes.main(["--results", str(results), "--out", str(out)]) == 2


def test_two_models_are_compared_on_the_seeds_both_have(tmp_path):
    qk = next(c for c in FIX_CASES if "qk_gain" in c.fix)
    rows = [{"model": f"{qk.name}: {side}", "settled": True, "final_val_mean": mean, "fates": {"trained": 3},
             "seeds": n, "best_lr": 1e-3} for side, mean, n in (("flagged", 4.3, 3), ("fixed", 4.15, 2))]
    runs = [_run(f"{qk.name}: flagged", s, 1e-3, v) for s, v in ((0, 4.0), (1, 4.0), (2, 5.0))]
    runs += [_run(f"{qk.name}: fixed", s, 1e-3, v) for s, v in ((0, 4.1), (1, 4.2))]  # higher at both seeds shared
    results, out, table = tmp_path / "results.json", tmp_path / "fix_outcomes.json", tmp_path / "outcomes.md"
    results.write_text(json.dumps({"experiment": "doctor-fixes", "rows": rows, "runs": runs}))
    assert fix_outcomes.main(["--results", str(results), "--out", str(out), "--table", str(table)]) == 0
    got = load_outcomes(out)[qk.name]
    # the flagged model's third seed (5.0) has no partner: left out of its mean, which would otherwise hide that the
    # fix trained worse at every seed compared
    assert got.seeds == 2 and got.flagged_loss == pytest.approx(4.0) and got.fixed_loss == pytest.approx(4.15)
    assert got.reading is FixReading.CONTRADICTED and "rose by 0.150" in got.sentence()
    apart = [_run(f"{qk.name}: flagged", 0, 1e-3, 4.0), _run(f"{qk.name}: fixed", 1, 1e-3, 3.0)]
    results.write_text(json.dumps({"experiment": "doctor-fixes", "rows": rows, "runs": apart}))
    assert fix_outcomes.main(["--results", str(results), "--out", str(out), "--table", str(table)]) == 0
    got = load_outcomes(out)[qk.name]
    assert got.seeds == 0 and got.reading is FixReading.NOT_SEPARATED and "share no seed" in got.sentence()
    out.write_text(json.dumps([dict(got.__dict__, flagged_by_seed={})]))  # a mean without its seeds
    with pytest.raises(ValueError, match="without its losses per seed"):
        load_outcomes(out)


def test_the_reading_follows_the_rule_fixed_before_the_runs():
    def mean(losses: dict) -> float | None:
        return sum(losses.values()) / len(losses) if losses else None

    def outcome(flagged: dict, fixed: dict) -> FixOutcome:
        return FixOutcome("c", mean(flagged), mean(fixed), {}, {}, 2, "a test", 1e-3, 1e-3, flagged, fixed)

    assert outcome({"0": 4.0, "1": 4.0}, {"0": 3.9, "1": 3.99}).reading is FixReading.SUPPORTED
    assert outcome({"0": 4.0, "1": 4.0}, {"0": 4.1, "1": 4.01}).reading is FixReading.CONTRADICTED
    mixed = outcome({"0": 4.0, "1": 4.0}, {"0": 3.5, "1": 4.01})  # lower on average, but not at every seed
    assert mixed.reading is FixReading.NOT_SEPARATED and "not at every seed" in mixed.sentence()
    assert "lowered the final loss by 0.245" in mixed.sentence() and mixed.sentence().endswith(": not separated")
    assert outcome({"0": 4.0}, {}).reading is FixReading.CONTRADICTED  # the fix trained at no rate tried
    assert outcome({}, {}).reading is FixReading.NOT_SEPARATED


def test_a_computed_alpha_is_of_the_derf_kind_at_any_value():
    """The doctor computes α from each model's own stream: any smaller α it recommends is of the Derf case's kind;
    a recommendation that leaves α alone is not."""
    derf = next(c for c in FIX_CASES if "norm_alpha" in c.fix)
    other = TransformerConfig(**{**derf.flagged, "n_layers": 48, "norm_alpha": 3.0})
    assert derf.matches(other, {"norm_alpha": 0.5})
    assert not derf.matches(other, {"qk_gain": 1.0})
    assert not next(c for c in FIX_CASES if "qk_gain" in c.fix).matches(other, {"norm_alpha": 0.5})


def test_the_stored_table_is_the_outcomes_the_doctor_cites():
    """The experiment's table "flagged → fixed" beside its page says what the outcomes file the doctor reads says,
    and the doctor's evidence for each case is that file's."""
    from pathlib import Path

    table = Path(__file__).resolve().parents[2] / "docs" / "results" / "experiments" / "doctor-fixes" / "outcomes.md"
    stored = load_outcomes()
    assert table.read_text() == outcomes_markdown(stored)
    for case in FIX_CASES:
        said = fix_evidence(TransformerConfig(**case.flagged), case.fix, stored)
        expected = stored[case.name].sentence() if case.name in stored else NOT_MEASURED
        assert f"{case.name}: {expected}" in said
