"""The experiments' scales: the GPU scale reuses the deepest runs of `depth` and `divergence`, the paper's scale
follows the papers' stated configurations, and every row of a table names one model."""

from __future__ import annotations

import json

import pytest

from sigprop.experiments import catalog
from sigprop.experiments.spec import plan_runs


def _tails(name: str, scale: str) -> set[str]:
    """The run ids' rate, seed and config digest, which identify a run whatever its model is called."""
    return {r.run_id.rsplit("-lr", 1)[1] for r in plan_runs(catalog.get_experiment(name), scale)}


@pytest.mark.parametrize("name", ["ablations", "prior-methods"])
def test_at_the_gpu_scale_the_dslm_runs_at_32x64_are_those_of_depth_and_divergence(name):
    """Post-LN DSLM at 1e-3 (`divergence`), 2e-3 and 4e-3 (`depth`) and Pre-LN DSLM at 8e-3 (`depth`) are the same
    configs at --scale gpu, so `--runs-dir` with those experiments' folders trains them once."""
    finished_elsewhere = _tails("depth", "gpu") | _tails("divergence", "gpu")
    shared = _tails(name, "gpu") & finished_elsewhere
    assert sorted(tail.split("-s0-")[0] for tail in shared) == ["0.001", "0.002", "0.004", "0.008"]


def test_every_model_of_a_scale_has_a_name_of_its_own():
    for name, experiment in catalog.EXPERIMENTS.items():
        for scale_name in experiment.scales:
            names = [m.name for m in experiment.scale(scale_name).models]
            assert len(set(names)) == len(names), (name, scale_name)


@pytest.mark.parametrize("name", ["depth", "depth-mlm", "ablations", "prior-methods"])
def test_kedia_s_paper_scale_trains_their_deepest_models_about_100k_steps_of_256_by_256_tokens(name):
    """App. N, Table 25: 100 k steps of 256 sequences of 256 tokens, rates {1, 3, 5, 7, 10}·10⁻⁴; ~40 tokens per
    non-embedding parameter makes their ~150 M-parameter models take within 10% of that."""
    runs = plan_runs(catalog.get_experiment(name), "paper")
    deepest = [r for r in runs if r.model_config["n_layers"] == 192]
    assert deepest
    for run in deepest:
        assert run.train_config["batch_size"] == 256 and run.model_config["seq_len"] == 256
        assert 90_000 <= run.train_config["steps"] <= 110_000
    assert {r.lr for r in runs} == {1e-4, 3e-4, 5e-4, 7e-4, 1e-3}


def test_noci_s_paper_scale_is_their_appendix_d_bert():
    """App. D.1: 18 layers of 768, 8 heads, 100 k steps of 32 × 128 tokens, 4,000 warmup steps over which 'recover'
    anneals, rates {1, 5, 10, 50}·10⁻⁴, 4 seeds."""
    experiment = catalog.get_experiment("shaped")
    runs = plan_runs(experiment, "paper")
    assert {(r.model_config["n_layers"], r.model_config["d_model"], r.model_config["n_heads"]) for r in runs} == {
        (18, 768, 8)}
    assert {(r.train_config["steps"], r.train_config["batch_size"], r.train_config["warmup_steps"]) for r in runs} == {
        (100_000, 32, 4000)}
    assert {r.model_config.get("shaped_anneal_steps") for r in runs} == {None, 4000}
    assert {r.lr for r in runs} == {1e-4, 5e-4, 1e-3, 5e-3} and experiment.scale("paper").seeds == 4


def test_depth_mlm_tunes_each_model_around_the_rate_depth_found_best_for_it():
    """At the CPU scale each `depth-mlm` model's grid is half, once and twice its best rate in `depth`'s stored
    results (causal LM), and otherwise the same model as an encoder; a model without a best rate keeps its grid."""
    stored = catalog.RESULTS_DIR / "depth" / "results.json"
    best = {row["model"]: row["best_lr"] for row in json.loads(stored.read_text(encoding="utf-8"))["rows"]}
    depth, mlm = catalog.get_experiment("depth").scale("cpu"), catalog.get_experiment("depth-mlm").scale("cpu")
    assert [m.name for m in mlm.models] == [m.name for m in depth.models]
    for causal, masked in zip(depth.models, mlm.models, strict=True):
        lr = best[causal.name]
        assert masked.lrs == (causal.lrs if lr is None else pytest.approx((lr / 2, lr, 2 * lr))), masked.name
        assert masked.model == causal.model and masked.train == causal.train
    assert mlm.base_model == {**depth.base_model, "arch": "encoder"} and mlm.train == depth.train
    assert (mlm.tokens_per_parameter, mlm.seeds, mlm.grid_extensions) == (20.0, 2, 3)


def test_divergence_s_dropout_variants_differ_from_their_models_in_dropout_alone_and_keep_the_kept_runs():
    """The two dropout-0.1 models are the Post-LN Xavier and DSLM models with the paper's dropout, and adding them
    leaves every kept run of `divergence` one the catalogue still plans (its id unchanged)."""
    scale = catalog.get_experiment("divergence").scale("cpu")
    models = {m.name: m for m in scale.models}
    for init in ("xavier", "dslm"):
        plain, dropped = models[f"32x32 {init} post-LN"], models[f"32x32 {init} post-LN, dropout 0.1"]
        assert {**scale.base_model, **dropped.model} == {**scale.base_model, **plain.model, "dropout": 0.1}
        assert scale.base_model["dropout"] == 0.0 and dropped.lrs == plain.lrs and dropped.train == plain.train
    stored = catalog.RESULTS_DIR / "divergence" / "results.json"
    kept = {r["run_id"] for r in json.loads(stored.read_text(encoding="utf-8"))["runs"] if r["tuning"]}
    assert kept and kept <= {r.run_id for r in plan_runs(catalog.get_experiment("divergence"), "cpu")}


def test_the_stored_best_rates_are_read_with_a_clear_error_where_they_are_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "RESULTS_DIR", tmp_path)
    missing = "stored results of experiment 'depth' at cpu scale are missing: .*results.json"
    with pytest.raises(ValueError, match=missing):
        catalog.get_experiment("depth-mlm").scale("cpu")
    (tmp_path / "depth").mkdir()
    rows = [{"model": "a", "best_lr": 0.004}, {"model": "b", "best_lr": None}]
    (tmp_path / "depth" / "results.json").write_text(json.dumps({"experiment": "depth", "scale": "cpu", "rows": rows}))
    assert catalog.stored_best_rates("depth") == {"a": 0.004}
    with pytest.raises(ValueError, match="holds experiment 'depth' at 'cpu' scale, not 'depth' at 'gpu'"):
        (tmp_path / "depth" / "gpu").mkdir()
        (tmp_path / "depth" / "gpu" / "results.json").write_text(json.dumps({"experiment": "depth", "scale": "cpu"}))
        catalog.stored_best_rates("depth", "gpu")
