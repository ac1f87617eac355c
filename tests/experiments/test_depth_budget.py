"""`depth-budget`: the shape ladder's pair at d = 128 and three rows, each differing from it in one aspect of the
training only (the models, the seeds and the rate grids are the pair's); the pair's runs are the ladder's; and the
rows' table read by its pre-registered rules."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from sigprop.experiments.budget import BEST_K, BUDGET_RUNG, budget_rows
from sigprop.experiments.budget_report import evaluate_budget, read_row
from sigprop.experiments.catalog import get_experiment
from sigprop.experiments.ladder import Role
from sigprop.experiments.runner import RunResult
from sigprop.experiments.spec import lattice_rate, plan_runs

LADDER_JSON = Path(__file__).resolve().parents[2] / "docs/results/experiments/shape-ladder/ladder.json"


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
    (", 4x steps (batch 8)", {"steps", "batch_size", "eval_batches", "eval_every", "checkpoint_every"}),
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
        tokens = run.train_config["steps"] * run.train_config["batch_size"]
        base_tokens = base.train_config["steps"] * base.train_config["batch_size"]
        if suffix.startswith(", 4x"):
            # the same tokens in batches of 8 (3.9× the steps of batches of 31), on the same validation windows,
            # evaluated as often
            assert tokens == base_tokens and run.train_config["batch_size"] == 8
            assert _windows(run.train_config) == _windows(base.train_config)
            assert (run.train_config["steps"] // run.train_config["eval_every"]
                    == base.train_config["steps"] // base.train_config["eval_every"])
        elif suffix.startswith(", 40"):
            assert tokens == 2 * base_tokens
        else:
            assert run.train_config["warmup_steps"] == round(0.01 * base.train_config["steps"])
            assert (run.train_config["schedule"], run.train_config["final_lr_fraction"]) == ("linear", 0.0)


def test_the_pair_is_the_ladder_s_rung_so_its_kept_runs_are_reused(runs):
    kept = {p.name.rsplit("-lr", 1)[1] for p in (LADDER_JSON.parent / "runs").iterdir()
            if p.name.startswith(f"d-{BUDGET_RUNG}--")}
    pair = _row(runs, "")
    assert len(pair) == 12
    for run in pair.values():  # a run id ends in the rate, the seed and a digest of both configs: the ladder's run
        assert run.run_id.rsplit("-lr", 1)[1] in kept, run.run_id
        assert run.train_config["data"] == "pinned:python-v1" and run.model_config["dropout"] == 0.1


def test_the_grids_centre_on_the_ladder_s_best_rates_at_the_rung():
    rung = next(r for r in json.loads(LADDER_JSON.read_text(encoding="utf-8"))["rungs"] if r["d"] == BUDGET_RUNG)
    for role, k in BEST_K.items():
        assert rung["models"][role.value]["best_lr"] == lattice_rate(k, math.sqrt(2.0))


def test_row_a_refuses_a_batch_that_cannot_keep_the_tokens():
    with pytest.raises(ValueError, match="batches of 8"):
        budget_rows(30, steps=2001)


def _gap(*differences):
    return {"seeds": list(range(len(differences))), "differences": list(differences),
            "high": max(differences) + 0.01}


@pytest.mark.parametrize("row, pair, reading", [
    (_gap(-0.2, -0.1, -0.15), _gap(0.1, 0.2, 0.15), "flips the sign"),
    (_gap(-0.3, -0.25, -0.25), _gap(-0.1, -0.2, -0.15), "narrows the gap"),  # the pair below 0 already: no flip
    (_gap(0.05, 0.1, 0.12), _gap(0.1, 0.2, 0.15), "narrows the gap"),
    (_gap(0.05, 0.3, 0.12), _gap(0.1, 0.2, 0.15), "leaves the gap"),  # above the pair at seed 1
    ({"seeds": [0], "differences": [0.1], "high": None}, _gap(0.1, 0.2, 0.15),
     "not read (fewer than two paired seeds)"),
])
def test_rows_are_read_by_the_pre_registered_rules(row, pair, reading):
    assert read_row({"final": True, "gap": row}, {"final": True, "gap": pair}) == reading
    assert read_row({"final": False, "gap": row}, {"final": True, "gap": pair}).startswith("not read")


def test_the_rows_table_pairs_seeds_and_gives_t_intervals():
    pair_wide, pair_deep = "2x128 xavier pre-LN", "8x64 dslm pre-LN"
    row_wide, row_deep = pair_wide + ", 40 tokens/param", pair_deep + ", 40 tokens/param"
    losses = {pair_wide: (3.60, 3.50, 3.62), pair_deep: (3.77, 3.72, 3.80),
              row_wide: (3.40, 3.33, 3.41), row_deep: (3.45, 3.42, 3.50)}
    best = {pair_wide: 5.66e-3, pair_deep: 1.6e-2, row_wide: 5.66e-3, row_deep: 1.6e-2}
    results = [RunResult(f"{m}-{s}", m, s, best[m], s < 2, "trained", "", v, 1, 1, 1.0, [])
               for m, values in losses.items() for s, v in enumerate(values)]
    results.append(RunResult("worse", row_deep, 0, 2.26e-2, True, "trained", "", 9.0, 1, 1, 1.0, []))
    summary = {"rows": [{"model": m, "best_lr": best[m], "settled": True} for m in losses]}
    table = evaluate_budget(summary, results, None, None)
    rows = {r["key"]: r for r in table["rows"]}
    assert set(rows) == {"pair", "b"}
    t = stats.t.ppf(0.975, 2)
    for key, (deep, wide) in (("pair", (pair_deep, pair_wide)), ("b", (row_deep, row_wide))):
        d = [a - b for a, b in zip(losses[deep], losses[wide], strict=True)]
        mean = sum(d) / 3
        se = math.sqrt(sum((x - mean) ** 2 for x in d) / 2 / 3)
        gap = rows[key]["gap"]
        assert gap["differences"] == pytest.approx(d) and gap["dof"] == 2
        assert (gap["low"], gap["high"]) == pytest.approx((mean - t * se, mean + t * se))
    change = [a - b for a, b in zip(rows["b"]["gap"]["differences"], rows["pair"]["gap"]["differences"], strict=True)]
    assert rows["b"]["change"]["differences"] == pytest.approx(change)
    assert rows["b"]["reading"] == "narrows the gap"
    assert rows["pair"]["models"][Role.DEEP_THIN.value]["losses"] == {"0": 3.77, "1": 3.72, "2": 3.80}
