"""sigprop.compare: summaries per quantity, including the discrepancy measured in the measurement's standard errors."""

import math

import numpy as np
import pytest

from sigprop.analysis.comparison import summarise


def test_share_within_two_standard_errors_and_median_z():
    pred = np.array([1.0, 1.0, 1.0, 1.0])
    meas = np.array([1.1, 1.3, 0.95, 1.0])
    se = np.array([0.1, 0.1, 0.1, 0.0])  # the last row has no usable SE
    s = summarise("fwd_var", pred, meas, se)
    # |err|/SE = 1, 3, 0.5 over the rows with an SE
    assert s.within_2se == 2 / 3
    assert s.median_z == pytest.approx(1.0, rel=1e-12)


def test_the_measurement_s_relative_standard_error():
    s = summarise("fwd_var", [1.0, 1.0, 1.0], [2.0, 0.5, 1.0], [0.1, 0.1, 0.3])
    assert s.median_rel_se == pytest.approx(float(np.median([0.05, 0.2, 0.3])), rel=1e-12)


def test_noise_alone_gives_a_median_relative_error_of_0_67_relative_standard_errors():
    """Monte Carlo: an exact theory against measurements m = μ(1 + σ·N(0, 1)) (σ = 2%): median relative error over
    median relative SE → the median of |N(0, 1)|, Φ⁻¹(3/4) = 0.6745 (what the doctor's "noise" column rests on); the
    mean over K draws within Z standard errors of that mean."""
    from scipy.stats import norm

    from tests.helpers import Z

    rng = np.random.default_rng(5)
    rows, draws, sigma = 192, 200, 0.02
    mu = np.exp(np.linspace(0.0, 3.0, rows))
    ratios = []
    for _ in range(draws):
        meas = mu * (1.0 + sigma * rng.standard_normal(rows))
        s = summarise("grad_var", mu, meas, sigma * meas)
        ratios.append(s.median_rel / s.median_rel_se)
    ratios = np.array(ratios)
    assert abs(ratios.mean() - norm.ppf(0.75)) <= Z * ratios.std(ddof=1) / math.sqrt(draws)


def test_without_standard_errors_the_se_numbers_are_undefined():
    s = summarise("fwd_var", [1.0, 2.0], [1.0, 2.1])
    assert math.isnan(s.within_2se) and math.isnan(s.median_z) and math.isnan(s.median_rel_se)
    assert s.to_dict()["within_2se"] is None


@pytest.mark.parametrize("log_scale", [False, True])
def test_an_exact_theory_scores_the_noise_ceiling_of_r2_on_average(log_scale):
    """Monte Carlo: measurements m = μ + SE·N(0, 1) of a known profile μ (spanning > a decade on the log scale),
    compared with the exact prediction μ. The mean of R² − ceiling over K draws is zero up to Z standard errors of
    that mean (the O(1/rows) correlation of Σε² with SS_tot, ~1e-5 here, is far below that)."""
    from tests.helpers import Z

    rng = np.random.default_rng(3)
    rows, draws = 400, 400
    mu = np.exp(np.linspace(0.0, 4.0, rows)) if log_scale else np.linspace(1.0, 2.0, rows)
    se = (0.02 * mu) if log_scale else np.full(rows, 0.05)
    diffs, ceilings = [], []
    for _ in range(draws):
        meas = mu + se * rng.standard_normal(rows)
        s = summarise("grad_var", mu, meas, se)
        assert s.r2_log == log_scale
        diffs.append(s.r2 - s.r2_noise_ceiling)
        ceilings.append(s.r2_noise_ceiling)
    diffs = np.array(diffs)
    assert abs(diffs.mean()) <= Z * diffs.std(ddof=1) / math.sqrt(draws)
    assert np.mean(ceilings) < 1 - 1e-4  # the noise is visible: the check above is not trivially 1 = 1


def test_noise_ceiling_needs_every_row_s_standard_error():
    s = summarise("fwd_var", [1.0, 1.5, 2.0], [1.1, 1.4, 2.0], [0.1, 0.1, 0.0])
    assert math.isnan(s.r2_noise_ceiling)
    s = summarise("fwd_var", [1.0, 1.5, 2.0], [1.1, 1.4, 2.0], [0.1, 0.1, 0.1])
    ss_tot = np.sum((np.array([1.1, 1.4, 2.0]) - np.mean([1.1, 1.4, 2.0])) ** 2)
    assert s.r2_noise_ceiling == pytest.approx(1 - 0.03 / ss_tot, rel=1e-12)



def test_a_comparison_json_gives_back_both_profiles_and_their_diagnosis():
    """compare() → JSON → comparison_side(): the compared site's rows of each side come back exactly, and the JSON
    carries each side's diagnosis."""
    import json

    from sigprop.analysis.comparison import compare, comparison_side
    from sigprop.core.profile import Profile, Row

    def profile(kind, scale):
        rows = [Row(layer, "layer", 0.0, 1.0 + scale * layer, 0.5, 2.0**-layer, 0.4) for layer in range(12)]
        return Profile(kind, {"arch": "encoder", "init": "xavier", "n_layers": 12},
                       (*rows, Row(0, "attn", 0.0, 3.0, 0.2, 1.0, 0.1)))

    predicted, measured = profile("predicted", 1.0), profile("measured", 1.1)
    data = json.loads(json.dumps(compare(predicted, measured).to_json(), allow_nan=False))
    for side in (predicted, measured):
        back = comparison_side(data, side.kind)
        assert back.kind == side.kind and back.rows == tuple(side.site("layer"))
    verdicts = {kind: [f["verdict"] for f in d["findings"]] for kind, d in data["meta"]["diagnosis"].items()}
    assert verdicts == {"predicted": ["grows", "explodes", "stays below rank collapse"],  # 2^l: grows to the input
                        "measured": ["grows", "explodes", "stays below rank collapse"]}


def test_a_comparison_file_gives_back_its_measurement(tmp_path):
    """A measurement stored as JSON (a measured profile or a comparison) read back for ``compare --measured``."""
    from sigprop.analysis.comparison import compare, measured_from_json, read_measured
    from sigprop.core.profile import Profile, Row

    pred = Profile("predicted", {"n_layers": 2}, (Row(0, "layer", 0.0, 1.0, 0.5, 2.0, 0.1),
                                                  Row(1, "layer", 0.0, 1.5, 0.6, 1.0, 0.2)), {})
    meas = Profile("measured", {"n_layers": 2}, (Row(0, "layer", 0.01, 1.1, 0.55, 2.2, 0.12),
                                                 Row(1, "layer", -0.01, 1.4, 0.62, 1.0, 0.2)),
                   {"seeds": [0, 1], "stderr": {"0:layer": {"fwd_var": 0.1}}})
    back = measured_from_json(compare(pred, meas).to_json())
    assert back.kind == "measured" and back.rows == meas.rows and back.meta == meas.meta
    assert back.config == pred.config
    assert measured_from_json(meas.to_json()).rows == meas.rows
    path = tmp_path / "m.json"
    meas.write_json(path)
    assert read_measured(path).rows == meas.rows
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_measured(path)
    with pytest.raises(ValueError, match="kind"):
        measured_from_json([1, 2])


@pytest.mark.parametrize("seeds", [2, 4, 16])
def test_an_exact_theory_meets_the_student_interval_95_percent_of_the_time(seeds):
    """Rows measured as the mean of K normal seeds with their sample standard error: an exact theory lies within
    t_{0.975, K−1} standard errors with probability 0.95 and within 2 with probability 2F_t(2; K−1) − 1 (0.705 at
    K = 2). Over n rows each share has binomial standard error √(p(1 − p)/n)."""
    from scipy import stats

    from tests.helpers import Z

    rng = np.random.default_rng(seeds)
    n = 20_000
    draws = rng.normal(1.0, 0.3, size=(n, seeds))
    meas, se = draws.mean(axis=1), draws.std(axis=1, ddof=1) / math.sqrt(seeds)
    s = summarise("fwd_var", np.ones(n), meas, se, dof=seeds - 1)
    for share, p in ((s.within_t95, 0.95), (s.within_2se, 2.0 * stats.t.cdf(2.0, seeds - 1) - 1.0)):
        assert abs(share - p) <= Z * math.sqrt(p * (1.0 - p) / n), (seeds, share, p)
    assert math.isnan(summarise("fwd_var", np.ones(n), meas, se).within_t95)  # without degrees of freedom


def test_rows_that_are_not_finite_are_counted_not_silently_dropped():
    s = summarise("fwd_var", [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, float("nan")], [0.1] * 4)
    assert s.n == 3 and s.not_finite == 1
    assert summarise("fwd_var", [float("inf")], [1.0]).not_finite == 1


def test_a_stored_measurement_still_matches_its_config_when_fields_are_added():
    """A field added since measurements began recording their config's fingerprint (at its default) must leave the
    fingerprint unchanged, or every stored measurement is refused as edited (embed_dropout once did)."""
    from pathlib import Path

    from sigprop.analysis.comparison import check_measurement, read_measured

    measured = read_measured(Path(__file__).resolve().parents[2] / "docs" / "results" / "compare-llama-preln.json")
    assert measured.meta.get("config_sha256") is not None
    check_measurement(measured)


def test_compare_refuses_profiles_of_different_models_or_layers():
    """A prediction of a 4-layer Post-LN model against a measurement of a 2-layer Pre-LN one was compared on the
    layers they share, without a word."""
    import torch

    import sigprop

    pre = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
    post = pre.replace(n_layers=4, norm_position="post")
    model = sigprop.Transformer(pre, generator=torch.Generator().manual_seed(0))
    ids = torch.randint(5, 64, (4, 8), generator=torch.Generator().manual_seed(0))
    measured = sigprop.measure(model, sigprop.make_batch(pre, ids, torch.Generator().manual_seed(1)))
    with pytest.raises(ValueError, match="different models: n_layers 4 predicted, 2 measured; norm_position"):
        sigprop.compare(sigprop.predict(post, token_ids=ids), measured)
    # the same model with rows missing: refused unless layers= picks the shared ones
    predicted = sigprop.predict(model, token_ids=ids)
    cut = sigprop.Profile("measured", measured.config, tuple(r for r in measured.rows if r.layer != 1), measured.meta)
    with pytest.raises(ValueError, match="only predicted: 1; only measured: none"):
        sigprop.compare(predicted, cut)
    assert sigprop.compare(predicted, cut, layers=[0]).layers == (0,)
