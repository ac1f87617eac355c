"""`depth-budget`: the shape ladder's pair at d = 128 and three rows, each differing from it in one aspect of the
training only (the models, the seeds and the rate grids are the pair's); the pair's runs, its best rates' third seeds
included, are the ladder's kept runs; and the rows' table read by its pre-registered rules."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from sigprop.experiments.budget import BEST_K, BUDGET_RUNG, PAIR_NAMES, budget_model, budget_rows
from sigprop.experiments.budget_report import evaluate_budget, read_row
from sigprop.experiments.catalog import get_experiment
from sigprop.experiments.ladder import Role
from sigprop.experiments.run import run_experiment
from sigprop.experiments.runner import RunResult
from sigprop.experiments.spec import lattice_rate, plan_runs

LADDER_JSON = Path(__file__).resolve().parents[2] / "docs/results/experiments/shape-ladder/ladder.json"
BEST_RATES = {role: lattice_rate(k, math.sqrt(2.0)) for role, k in BEST_K.items()}


@pytest.fixture(scope="module")
def runs():
    plan = plan_runs(get_experiment("depth-budget"), "cpu")
    return {(r.model_name, r.lr, r.seed): r for r in plan}


def _row(runs, suffix):
    return {(name.removesuffix(suffix), lr, seed): r for (name, lr, seed), r in runs.items()
            if (name.endswith(suffix) if suffix else "," not in name)}


def _windows(train: dict) -> int:
    return train["eval_batches"] * train["batch_size"]


@pytest.mark.parametrize("suffix, changed", [
    (", 4x steps (batch 8)", {"steps", "batch_size", "warmup_steps", "eval_batches", "eval_every", "checkpoint_every"}),
    (", 40 tokens/param", {"steps"}),
    (", warmup 1% + linear decay", {"warmup_steps", "schedule", "final_lr_fraction"}),
])
def test_each_row_changes_one_aspect_of_the_pair(runs, suffix, changed):
    pair, row = _row(runs, ""), _row(runs, suffix)
    assert set(row) == set(pair) and len(pair) == 2 * 3 * 2  # two models, three rates, two tuning seeds
    for key, run in row.items():
        base = pair[key]
        assert run.model_config == base.model_config
        differs = {k for k in base.train_config if base.train_config[k] != run.train_config[k]}
        assert differs == changed, (key, differs)
        tc, bc = run.train_config, base.train_config
        sequences, base_sequences = tc["steps"] * tc["batch_size"], bc["steps"] * bc["batch_size"]
        if suffix.startswith(", 4x"):
            # as many training sequences in batches of 8 (3.9× the steps of batches of 31), the warmup over the same
            # share of them, the same validation windows, evaluated as often (the last evaluation at the end)
            assert sequences == base_sequences and tc["batch_size"] == 8
            assert tc["warmup_steps"] * tc["batch_size"] == pytest.approx(bc["warmup_steps"] * bc["batch_size"],
                                                                         abs=tc["batch_size"])
            assert _windows(tc) == _windows(bc)
            evaluations = len([s for s in range(1, tc["steps"] + 1) if s % tc["eval_every"] == 0 or s == tc["steps"]])
            assert evaluations == bc["steps"] // bc["eval_every"]
        elif suffix.startswith(", 40"):
            assert sequences == 2 * base_sequences
        else:
            assert tc["warmup_steps"] == round(0.01 * bc["steps"])
            assert (tc["schedule"], tc["final_lr_fraction"]) == ("linear", 0.0)


def test_the_pair_is_the_ladder_s_rung_so_its_kept_runs_are_reused():
    kept = {p.name.rsplit("-lr", 1)[1] for p in (LADDER_JSON.parent / "runs").iterdir()
            if p.name.startswith(f"d-{BUDGET_RUNG}--")}
    best = {name: BEST_RATES[role] for role, name in PAIR_NAMES.items()}  # the third seeds' rates
    budget = get_experiment("depth-budget")
    planned = plan_runs(budget, "cpu") + plan_runs(budget, "cpu", best_lr=best)
    pair = [r for r in planned if r.model_name in best]
    assert len(pair) == 14 and sum(not r.tuning for r in pair) == 2
    for run in pair:  # a run id ends in the rate, the seed and a digest of both configs: the ladder's run
        assert run.run_id.rsplit("-lr", 1)[1] in kept, run.run_id
        assert run.train_config["data"] == "pinned:python-v1" and run.model_config["dropout"] == 0.1


def test_the_grids_centre_on_the_ladder_s_best_rates_at_the_rung():
    rung = next(r for r in json.loads(LADDER_JSON.read_text(encoding="utf-8"))["rungs"] if r["d"] == BUDGET_RUNG)
    for role, rate in BEST_RATES.items():
        assert rung["models"][role.value]["best_lr"] == rate


def test_row_a_refuses_a_batch_that_cannot_keep_the_sequences():
    pair = dict(steps=2001, batch_size=30, warmup_steps=100, eval_every=250, eval_batches=64, checkpoint_every=250)
    with pytest.raises(ValueError, match="batches of 8"):
        budget_rows(pair)


def test_a_train_override_of_a_field_a_row_sets_is_refused():
    with pytest.raises(ValueError, match="--train-set steps: depth-budget's models set steps themselves"):
        run_experiment("depth-budget", train_overrides=["steps=100"], train=False)


def test_names_give_rows_and_roles_without_building_the_experiment():
    assert budget_model("2x128 xavier pre-LN") == ("pair", Role.SHALLOW_WIDE)
    assert budget_model("8x64 dslm pre-LN, warmup 1% + linear decay") == ("c", Role.DEEP_THIN)
    assert budget_model("d=128: 8x64 dslm pre-LN") is None


def _gap(*differences):
    return {"seeds": list(range(len(differences))), "differences": list(differences),
            "low": min(differences) - 0.01, "high": max(differences) + 0.01}


@pytest.mark.parametrize("gap, change, reading", [
    (_gap(-0.2, -0.1, -0.15), _gap(-0.3, -0.3, -0.3), "flips the sign"),
    (_gap(0.05, 0.1, 0.12), _gap(-0.1, -0.1, -0.05), "narrows the gap"),
    (_gap(0.25, 0.3, 0.32), _gap(0.1, 0.1, 0.15), "widens the gap"),
    (_gap(0.05, 0.3, 0.12), _gap(-0.1, 0.1, -0.05), "not separated from the pair"),
    (_gap(0.1), _gap(0.1) | {"low": None, "high": None}, "not read (fewer than two paired seeds)"),
])
def test_rows_are_read_by_the_pre_registered_rules(gap, change, reading):
    pair = {"final": True, "gap": _gap(0.1, 0.2, 0.15)}
    assert read_row({"final": True, "gap": gap, "change": change}, pair) == reading
    assert read_row({"final": False, "gap": gap, "change": change}, pair) == "not read (tuning not finished)"
    assert read_row({"final": True, "gap": gap, "change": change}, pair | {"final": False}).startswith("not read")
    below = {"final": True, "gap": _gap(-0.3, -0.2, -0.25)}  # the pair below 0 already: a row cannot flip it
    assert read_row({"final": True, "gap": _gap(-0.4, -0.3, -0.35), "change": _gap(-0.1, -0.1, -0.1)},
                    below) == "narrows the gap"


def test_a_row_that_can_never_settle_says_why_instead_of_still_tuning():
    from sigprop.experiments.summary import Standing

    def model(name, standing):
        return {"model": name, "settled": standing is Standing.SETTLED, "standing": standing.value}

    pair = {"final": True, "gap": _gap(0.1, 0.2, 0.15),
            "models": {"a": model("wide", Standing.SETTLED), "b": model("thin", Standing.SETTLED)}}
    row = {"final": False, "gap": _gap(0.1, 0.2), "change": _gap(0.0, 0.0),
           "models": {"a": model("wide, 4x", Standing.EDGE_SPENT), "b": model("thin, 4x", Standing.SETTLED)}}
    assert read_row(row, pair) == f"not read (wide, 4x: {Standing.EDGE_SPENT.value})"
    row["models"]["b"] = model("thin, 4x", Standing.TUNING)  # something still trains: it may yet settle
    assert read_row(row, pair) == "not read (tuning not finished)"


def test_standing_tells_a_model_still_tuning_from_one_that_never_will_settle():
    from types import SimpleNamespace as Run

    from sigprop.experiments.summary import Standing, standing

    spec = Run(lrs=(1.0, 2.0, 4.0))
    scale = Run(tuning_seeds=2, grid_extensions=2, lower_when_none_trains=False)

    def runs(*lrs, fate="trained", tuning=True):
        return [Run(lr=lr, tuning=tuning, fate=fate) for lr in lrs for _ in range(2 if tuning else 1)]

    grid = runs(1.0, 2.0, 4.0)
    assert standing(spec, grid[:-1], 2.0, scale, 3) is Standing.TUNING  # a tuning seed still to train
    assert standing(spec, grid, 1.0, scale, 3) is Standing.TUNING  # at the lower edge: extends down
    assert standing(spec, grid + runs(0.5, 0.25), 0.25, scale, 3) is Standing.EDGE_SPENT
    assert standing(spec, grid + runs(0.5), 0.5, scale, 3) is Standing.TUNING  # one extension left
    assert standing(spec, grid + runs(8.0, 16.0), 16.0, scale, 3) is Standing.EDGE_SPENT
    assert standing(spec, grid, 2.0, scale, 3) is Standing.TUNING  # its third seed to train
    assert standing(spec, grid + runs(2.0, tuning=False), 2.0, scale, 3) is Standing.SETTLED
    lost = grid + runs(2.0, tuning=False, fate="diverged")
    assert standing(spec, lost, 2.0, scale, 3) is Standing.SEED_LOST
    assert standing(spec, runs(1.0, 2.0, 4.0, fate="stalled"), None, scale, 3) is Standing.NONE_TRAINED


def _results(losses: dict, best: dict) -> list[RunResult]:
    runs = [RunResult(f"{m}-{s}", m, s, best[m], s < 2, "trained", "", v, 1, 1, 1.0, [])
            for m, values in losses.items() for s, v in enumerate(values)]
    return runs + [RunResult(f"{m}-worse", m, 0, 2 * best[m], True, "trained", "", 9.0, 1, 1, 1.0, []) for m in losses]


def test_the_rows_table_pairs_seeds_and_gives_t_intervals():
    pair_wide, pair_deep = PAIR_NAMES[Role.SHALLOW_WIDE], PAIR_NAMES[Role.DEEP_THIN]
    row_wide, row_deep = pair_wide + ", 40 tokens/param", pair_deep + ", 40 tokens/param"
    losses = {pair_wide: (3.60, 3.50, 3.62), pair_deep: (3.77, 3.72, 3.80),
              row_wide: (3.40, 3.33, 3.41), row_deep: (3.45, 3.42, 3.50)}
    best = {pair_wide: 5.66e-3, pair_deep: 1.6e-2, row_wide: 5.66e-3, row_deep: 1.6e-2}
    summary = {"rows": [{"model": m, "best_lr": best[m], "settled": True} for m in losses]}
    table = evaluate_budget(summary, _results(losses, best))
    rows = {r["key"]: r for r in table["rows"]}
    assert list(rows) == ["pair", "a", "b", "c"]
    t = stats.t.ppf(0.975, 2)

    def interval(d):
        mean = sum(d) / len(d)
        se = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d))
        return mean - t * se, mean + t * se

    deltas = {}
    for key, (deep, wide) in (("pair", (pair_deep, pair_wide)), ("b", (row_deep, row_wide))):
        deltas[key] = [a - b for a, b in zip(losses[deep], losses[wide], strict=True)]
        gap = rows[key]["gap"]
        assert gap["differences"] == pytest.approx(deltas[key]) and gap["dof"] == 2
        assert (gap["low"], gap["high"]) == pytest.approx(interval(deltas[key]))
    change = [a - b for a, b in zip(deltas["b"], deltas["pair"], strict=True)]
    assert rows["b"]["change"]["differences"] == pytest.approx(change)
    assert (rows["b"]["change"]["low"], rows["b"]["change"]["high"]) == pytest.approx(interval(change))
    assert rows["b"]["reading"] == "narrows the gap"  # the change's interval lies below 0
    assert rows["pair"]["models"][Role.DEEP_THIN.value]["losses"] == {"0": 3.77, "1": 3.72, "2": 3.80}
    for key in ("a", "c"):  # not run: named, with no models, not read
        assert rows[key]["models"] == {"shallow-wide": None, "deep-thin": None} and rows[key]["gap"] is None
        assert rows[key]["reading"] == "not read (tuning not finished)"


def test_a_row_is_not_read_while_the_pair_or_one_of_its_models_is_unsettled():
    pair_wide, pair_deep = PAIR_NAMES[Role.SHALLOW_WIDE], PAIR_NAMES[Role.DEEP_THIN]
    row_wide, row_deep = pair_wide + ", 40 tokens/param", pair_deep + ", 40 tokens/param"
    losses = {pair_wide: (3.60, 3.50), pair_deep: (3.77, 3.72), row_wide: (3.40, 3.33), row_deep: (3.45, 3.42)}
    best = dict.fromkeys(losses, 4e-3)
    for unsettled in (pair_deep, row_wide):
        summary = {"rows": [{"model": m, "best_lr": best[m], "settled": m != unsettled} for m in losses]}
        rows = {r["key"]: r for r in evaluate_budget(summary, _results(losses, best))["rows"]}
        assert rows["b"]["reading"] == "not read (tuning not finished)" and rows["b"]["gap"] is not None
    summary = {"rows": [{"model": m, "best_lr": best[m]} for m in losses]}  # no "settled": not settled
    assert not evaluate_budget(summary, _results(losses, best))["rows"][0]["settled"]
