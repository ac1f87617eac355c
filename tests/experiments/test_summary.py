"""An experiment's gaps read per seed: each model at the rate its tuning seed chose, the seeds both models have
paired, Student's t with n − 1 degrees of freedom."""

from __future__ import annotations

import pytest
from scipy import stats

from sigprop.experiments.runner import RunResult
from sigprop.experiments.summary import best_learning_rates, paired_gap_at_best, seed_losses


def _run(model: str, seed: int, lr: float, final: float | None, fate: str = "trained") -> RunResult:
    return RunResult(f"{model}-{lr:g}-{seed}", model, seed, lr, seed == 0, fate, "", final, 1, 1, 1.0, [])


def _results() -> list[RunResult]:
    """Model "deep": seed 0 best at 2e-3 (its 4e-3 run stalled); model "wide": seed 0 best at 1e-3."""
    return [_run("deep", 0, 1e-3, 3.30), _run("deep", 0, 2e-3, 3.10), _run("deep", 0, 4e-3, 6.2, "stalled"),
            _run("deep", 1, 2e-3, 3.40), _run("wide", 0, 1e-3, 3.00), _run("wide", 0, 2e-3, 3.05),
            _run("wide", 1, 1e-3, 3.20), _run("wide", 2, 1e-3, 3.10)]


def test_seed_losses_are_taken_at_the_rate_seed_zero_chose_whatever_the_other_seeds_give():
    assert seed_losses(_results(), "deep") == {0: 3.10, 1: 3.40}
    assert seed_losses(_results(), "deep", lr=1e-3) == {0: 3.30}
    assert seed_losses(_results(), "deep", lr=4e-3) == {}  # a stalled run has no loss to pair
    assert seed_losses(_results(), "absent") == {}


def test_the_gap_pairs_the_seeds_both_models_have_each_at_its_own_best_rate():
    gap = paired_gap_at_best(_results(), "deep", "wide")
    assert gap.seeds == (0, 1) and gap.dof == 1
    assert gap.differences == pytest.approx((3.10 - 3.00, 3.40 - 3.20))
    half = stats.t.ppf(0.975, 1) * abs(0.2 - 0.1) / 2  # two seeds: se is half the differences' spread
    assert (gap.low, gap.high) == (pytest.approx(0.15 - half), pytest.approx(0.15 + half))


def test_no_shared_seed_gives_no_gap():
    assert paired_gap_at_best([_run("a", 0, 1e-3, 3.0)], "a", "b") is None


def test_a_tie_goes_to_the_lower_rate_whatever_order_the_runs_come_in():
    """The schedule sees runs in plan order, the table in run-id order: both must pick the same best rate."""
    runs = [_run("m", 0, 1e-3, 3.0), _run("m", 0, 2e-3, 3.0), _run("m", 0, 4e-3, 3.5)]
    assert best_learning_rates(runs) == best_learning_rates(runs[::-1]) == {"m": 1e-3}
