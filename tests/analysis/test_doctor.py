"""``sigprop doctor``: the diagnosis and the fix on models the papers call unstable (theory only, small widths, fast
attention rules), the model's language in the hint, the HTML and JSON reports, and bad input."""

from __future__ import annotations

import json

import pytest

from sigprop.analysis.diagnosis import diagnose
from sigprop.analysis.doctor import doctor, recommend
from sigprop.model.config import TransformerConfig
from tests.helpers import run_cli

#: small scores (qk_gain 0.3): the closed-form attention rules, a quick prediction
SMALL = dict(n_layers=48, d_model=64, n_heads=2, vocab_size=300, seq_len=32, max_len=32, qk_gain=0.3)


@pytest.mark.parametrize("fields,flag", [(dict(norm_position="post", init="xavier"), "gradient variance vanishes"),
                                         (dict(norm_position="pre", init="xavier"), "forward variance grows")])
def test_unstable_models_are_flagged_and_dslm_fixes_them(fields, flag):
    """Post-LN Xavier loses its gradient towards the input and vanilla Pre-LN's forward variance grows with depth
    (Kedia et al. Figs. 1, 3); DeepScaleLM, the recommendation, leaves nothing flagged."""
    report = doctor(TransformerConfig(**{**SMALL, **fields}), seeds=0)
    assert report.diagnosis.flagged and flag in report.verdict, report.verdict
    assert report.recommendation.changes == {"init": "dslm"}
    assert report.recommendation.apply == "--set init=dslm"
    assert report.fixed_config.init == "dslm" and not report.fixed_diagnosis.flagged, report.fixed_diagnosis.lines()


def test_rank_collapse_without_dropout_gets_dropout():
    """Noci et al.'s V init without dropout collapses the tokens (Kedia et al. App. F): the fix is dropout."""
    from sigprop.model.presets import preset_config

    config = preset_config("rank-collapse-noci").replace(n_layers=48, d_model=64, n_heads=2, seq_len=32, max_len=32)
    report = doctor(config, seeds=0)
    assert any(f.flagged and f.quantity == "fwd_corr" for f in report.diagnosis.findings)
    assert report.recommendation.changes.get("dropout") == 0.1


def test_the_hint_speaks_the_models_language():
    config = TransformerConfig(**{**SMALL, "norm_position": "pre", "init": "xavier", "lam": 1.0})
    d = diagnose(doctor(config, seeds=0).predicted)
    assert recommend(config, d, "hf").apply == "sigprop.apply_init(model, 'dslm')"
    assert recommend(config, d, "sigprop").apply == "--set init=dslm --set lam=none"
    with pytest.raises(ValueError, match="source"):
        recommend(config, d, "keras")


def test_cli_reports(tmp_path):
    out = run_cli(["doctor", "fig3-postln", *[f"--set={k}={v}" for k, v in SMALL.items()], "--seeds", "0",
                   "--json", tmp_path / "d.json", "--html", tmp_path / "d.html"])
    assert out.exit_code == 0, out.stderr
    assert "unstable at initialisation" in out.stdout and "apply it: --set init=dslm" in out.stdout
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["kind"] == "doctor" and data["recommendation"]["changes"] == {"init": "dslm"}
    assert len(data["profiles"]["fixed_predicted"]) == SMALL["n_layers"]
    page = (tmp_path / "d.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "<script" not in page


def test_cli_bad_input_fails_before_work(tmp_path):
    for args, words in ((["doctor", "no-such-model"], "neither a preset"),
                        (["doctor", "fig1-preln", "--html", tmp_path / "r.txt"], "--html"),
                        (["doctor", "fig1-preln", "--seeds", "-1"], "--seeds"),
                        (["doctor", "fig1-preln", "--fresh"], "--fresh applies to a model with saved weights")):
        out = run_cli(args)
        assert out.exit_code == 2 and words in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)


def test_measured_profiles_beside_the_theory():
    """With seeds the current and the fixed model are measured on the default corpus beside the prediction, and
    the diagnosis reads the measurement."""
    config = TransformerConfig(**{**SMALL, "n_layers": 8, "norm_position": "post", "init": "xavier"})
    report = doctor(config, seeds=2)
    assert report.measured is not None and report.diagnosis.kind == "measured"
    assert set(report.agreement["current"]) == {"fwd_var", "fwd_corr", "grad_var", "grad_corr"}
    noise = report.noise["current"]
    assert set(noise) == set(report.agreement["current"])
    assert noise["grad_var"] > 0 and noise["grad_corr"] > 0  # two seeds give an SE (a Post-LN fwd_var's may be 0)
    if report.recommendation is not None:
        assert report.fixed_measured is not None and "fixed" in report.agreement


def test_oversized_qk_scores_are_brought_back():
    """Q/K at 2× Xavier (Kedia et al. Sec. 3.3): a flagged depth law with qk_gain > 1 adds qk_gain = 1 to the fix
    (the whole model, 24 layers of sampled attention, takes a minute: `sigprop doctor qk-2x-xavier`)."""
    config = TransformerConfig(**{**SMALL, "norm_position": "pre", "init": "xavier"})
    d = diagnose(doctor(config, seeds=0).predicted)
    rec = recommend(config.replace(qk_gain=2.0), d)
    assert rec.changes == {"init": "dslm", "qk_gain": 1.0} and rec.apply == "--set init=dslm --set qk_gain=1.0"
    assert recommend(config.replace(qk_gain=2.0), d, "hf").apply == \
        "sigprop.apply_init(model, 'dslm'), then set qk_gain = 1.0"


def test_a_model_beyond_dslm_s_closed_forms_gets_auto():
    """SwiGLU and RMSNorm are outside DeepScaleLM's closed forms (App. M): the recommendation is init='auto', and
    its fixed model keeps the forward variance bounded."""
    config = TransformerConfig(**{**SMALL, "norm_position": "pre", "init": "xavier", "activation": "swiglu",
                                  "norm": "rmsnorm"})
    report = doctor(config, seeds=0)
    assert report.recommendation.changes["init"] == "auto", report.recommendation
    assert "activation=swiglu, norm=rmsnorm" in report.recommendation.reasons[0]
    assert not any(f.flagged for f in report.fixed_diagnosis.findings if f.quantity == "fwd_var")


def test_a_model_with_nan_weights_is_diagnosed_not_finite_and_its_report_is_plain_json():
    """NaN weights make every measured statistic NaN: the doctor says so (it once called such a model stable) and its
    JSON report, with nulls for the NaNs, can still be written."""
    import torch

    from sigprop.analysis.doctor import doctor_measured
    from sigprop.model.transformer import Transformer

    config = TransformerConfig(arch="decoder", n_layers=2, d_model=16, n_heads=2, vocab_size=32, seq_len=8)

    def build(seed):
        torch.manual_seed(seed)
        model = Transformer(config)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))
        return model

    from sigprop.model.objective import make_batch

    batch = make_batch(config, torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0)))
    report = doctor_measured(build, batch, [0], "a NaN model", "no theory (test)")
    assert report.flagged and "NaN, infinite or negative" in report.verdict
    text = json.dumps(report.to_dict(), allow_nan=False)
    assert '"fwd_var": null' in text


def test_a_model_whose_theory_overflows_is_diagnosed_as_exploding_and_fixed():
    """DeepNet's up-weighted skip in a Pre-LN stack multiplies the stream's variance by λ² = 20 per layer: past ~120
    layers it leaves float64, where the doctor once stopped with an error instead of a diagnosis."""
    config = TransformerConfig(arch="decoder", n_layers=200, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
                               init="deepnorm")
    report = doctor(config, seeds=0, batch_size=1)
    assert report.predicted is None and report.flagged
    assert "explodes: ×inf" in report.verdict and "the theory overflows" in report.verdict
    assert report.recommendation is not None and report.recommendation.changes["init"] == "dslm"
    assert report.fixed_diagnosis is not None and not report.fixed_diagnosis.flagged
    json.dumps(report.to_dict(), allow_nan=False)


def test_a_saved_model_whose_beta_training_moved_is_not_called_the_identity():
    """A SkipInit model whose learnable β = 0 was moved to 0.7: the identity finding came from the config's plan
    (β = 0) instead of the weights, and said nothing propagates while the measured variance grew ×5.5."""
    import torch

    import sigprop
    from sigprop.analysis.doctor import SavedModel
    from sigprop.components.residual import Residual

    config = TransformerConfig(n_layers=4, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16,
                               init="skipinit", learnable_beta=True)
    torch.manual_seed(0)
    model = sigprop.Transformer(config)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Residual):
                module.beta.fill_(0.7)
    report = doctor(config, seeds=1, batch_size=2, saved=SavedModel.of(model, "a trained SkipInit model"))
    assert not any(f.verdict == "identity" for f in report.diagnosis.findings)
    fresh = doctor(config, seeds=1, batch_size=2)  # at initialisation, β = 0: the identity it is
    assert any(f.verdict == "identity" for f in fresh.diagnosis.findings)


def test_two_layers_get_no_scheme_that_removes_every_skip_connection():
    """At N = 2 DeepScaleLM's β² = 2/N = 1 and λ = 0: the doctor once proposed it (with the Q/K fix that alone
    addresses the cause), a network without any residual path."""
    config = TransformerConfig(arch="decoder", n_layers=2, d_model=32, n_heads=2, vocab_size=300, seq_len=16,
                               max_len=16, qk_gain=8.0)
    report = doctor(config, seeds=0, batch_size=1)
    assert report.recommendation is not None and report.recommendation.changes == {"qk_gain": 1.0}
    assert not report.fixed_diagnosis.flagged


def test_a_saved_model_with_nan_weights_is_not_called_an_overflow():
    """NaN weights make the theory NaN, not infinite: no "explodes ×inf" diagnosis and no DSLM for it."""
    import pytest
    import torch

    import sigprop
    from sigprop.analysis.doctor import SavedModel

    config = TransformerConfig(n_layers=4, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16)
    model = sigprop.Transformer(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    with pytest.raises(ValueError, match="theory is NaN"):
        doctor(config, seeds=1, batch_size=2, saved=SavedModel.of(model, "a NaN model"))
