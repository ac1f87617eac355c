"""`depth-budget`: the `depth` headline pair and three rows, each differing from it in one aspect of the training
only (the models, the seeds and the rate grids are the pair's)."""

from __future__ import annotations

import pytest

from sigprop.experiments.catalog import get_experiment
from sigprop.experiments.spec import plan_runs


@pytest.fixture(scope="module")
def runs():
    plan = plan_runs(get_experiment("depth-budget"), "cpu")
    return {(r.model_name, r.lr, r.seed): r for r in plan}


def _row(runs, suffix):
    return {(name.removesuffix(suffix), lr, seed): r for (name, lr, seed), r in runs.items()
            if (name.endswith(suffix) if suffix else "," not in name)}


@pytest.mark.parametrize("suffix, changed", [
    (", 4x steps (batch 8)", {"steps", "batch_size"}),
    (", 40 tokens/param", {"steps"}),
    (", warmup 1% + linear decay", {"warmup_steps", "schedule", "final_lr_fraction"}),
])
def test_each_row_changes_one_aspect_of_the_headline_pair(runs, suffix, changed):
    headline, row = _row(runs, ""), _row(runs, suffix)
    assert set(row) == set(headline) and len(headline) == 2 * 3 * 2  # two models, three rates, two seeds
    for key, run in row.items():
        base = headline[key]
        assert run.model_config == base.model_config
        differs = {k for k in base.train_config if base.train_config[k] != run.train_config[k]}
        assert differs == changed, (key, differs)
        tokens = run.train_config["steps"] * run.train_config["batch_size"]
        base_tokens = base.train_config["steps"] * base.train_config["batch_size"]
        if suffix.startswith(", 4x"):
            assert tokens == pytest.approx(base_tokens, rel=1e-3) and run.train_config["batch_size"] * 4 == 32
        elif suffix.startswith(", 40"):
            assert tokens == pytest.approx(2 * base_tokens, rel=1e-3)
        else:
            assert run.train_config["warmup_steps"] == round(0.01 * base.train_config["steps"])
            assert (run.train_config["schedule"], run.train_config["final_lr_fraction"]) == ("linear", 0.0)
