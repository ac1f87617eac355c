"""Measurements of disjoint seeds made apart merge into the measurement of all their seeds: the same averages,
pooled correlations, standard errors and log spreads; other models, other batches and repeated seeds refused."""

import dataclasses

import pytest

from sigprop.analysis.comparison import compare
from sigprop.analysis.experiment import predict_for_batch
from sigprop.measurement.merge import merge_measurements, per_seed_table, profiles_from_table
from sigprop.measurement.seeds import measure_seeds
from sigprop.model import TransformerConfig
from sigprop.model.batches import token_batch

SMALL = TransformerConfig(n_layers=3, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16)


@pytest.fixture(scope="module")
def batch():
    return token_batch(SMALL, batch_size=2, synthetic=True)


def test_two_slices_merge_into_one_run(batch):
    whole = measure_seeds(SMALL, batch, seeds=5, per_seed=True)
    first = measure_seeds(SMALL, batch, seeds=2, per_seed=True)
    rest = measure_seeds(SMALL, batch, seeds=3, seed0=2, per_seed=True)
    merged = merge_measurements([rest, first])  # any order
    assert merged.rows == whole.rows
    for key in ("seeds", "stderr", "seed_log_sd", "per_seed", "batch_sha256", "tokens", "sequences", "config_sha256"):
        assert merged.meta[key] == whole.meta[key], key
    again = merge_measurements([merged])  # a merge merges again
    assert again.rows == whole.rows


def test_per_seed_table_round_trip(batch):
    m = measure_seeds(SMALL, batch, seeds=2, per_seed=True)
    table = m.meta["per_seed"]
    back = profiles_from_table(table, m.config)
    assert per_seed_table(back, table["seeds"]) == table
    with pytest.raises(ValueError, match="malformed"):
        profiles_from_table({**table, "values": table["values"][:1]}, m.config)
    with pytest.raises(ValueError, match="one profile per seed"):
        per_seed_table(back, [0])


def test_what_does_not_merge(batch):
    a = measure_seeds(SMALL, batch, seeds=2, per_seed=True)
    b = measure_seeds(SMALL, batch, seeds=2, seed0=2, per_seed=True)
    with pytest.raises(ValueError, match="repeats seeds"):
        merge_measurements([a, a])
    with pytest.raises(ValueError, match="no per-seed rows"):
        merge_measurements([a, measure_seeds(SMALL, batch, seeds=2, seed0=4)])
    other = dataclasses.replace(SMALL, dropout=0.2)
    with pytest.raises(ValueError, match="another model .*dropout"):
        merge_measurements([a, measure_seeds(other, batch, seeds=2, seed0=4, per_seed=True)])
    other_batch = token_batch(SMALL, batch_size=2, synthetic=True, seed=5)
    with pytest.raises(ValueError, match="another batch"):
        merge_measurements([a, measure_seeds(SMALL, other_batch, seeds=2, seed0=4, per_seed=True)])
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_measurements([])
    assert merge_measurements([a, b]).meta["seeds"] == [0, 1, 2, 3]


def test_seed_arguments_are_checked(batch):
    for kw, message in (({"seeds": 0}, "seeds must be"), ({"seeds": 2, "seed0": -1}, "first seed must be")):
        with pytest.raises(ValueError, match=message):
            measure_seeds(SMALL, batch, **kw)


def test_a_comparison_leaves_the_per_seed_rows_out(batch):
    m = measure_seeds(SMALL, batch, seeds=2, per_seed=True)
    data = compare(predict_for_batch(SMALL, batch), m).to_json()
    assert "per_seed" not in data["measured_meta"] and "stderr" in data["measured_meta"]
