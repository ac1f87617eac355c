"""The doctor's configuration checks (sigprop.analysis.config_checks): a Post-LN scheme in a Pre-LN stack, a
subcritical DyT/Derf (Alekseev Result 3.5) and saturated DyT/Derf units, each flagged where it should be and not
elsewhere, and the fix that removes it."""

from __future__ import annotations

import math

import pytest

from sigprop.analysis.config_checks import SATURATION, config_checks
from sigprop.analysis.doctor import doctor
from sigprop.apjn.asymptotics import lambda_inv
from sigprop.model.config import TransformerConfig
from sigprop.theory.predict import predict

SMALL = dict(n_layers=48, d_model=64, n_heads=2, vocab_size=300, seq_len=32, max_len=32, qk_gain=0.3)


def _by_name(checks):
    return {c.name: c for c in checks}


def test_deepnet_in_a_pre_ln_stack_is_flagged_and_dslm_recommended():
    pre = TransformerConfig(**{**SMALL, "init": "deepnorm", "norm_position": "pre"})
    check = _by_name(config_checks(pre))["Post-LN scheme in a Pre-LN stack"]
    assert check.flagged and check.changes == {"init": "dslm", "lam": None, "beta": None}
    assert "Post-LN scheme in a Pre-LN stack" not in _by_name(config_checks(pre.replace(norm_position="post")))
    report = doctor(pre, seeds=0)
    assert report.recommendation.changes["init"] == "dslm" and not report.fixed_diagnosis.flagged


def test_a_derf_model_is_subcritical_where_its_stretched_exponential_exceeds_the_limit():
    """e^√(N λ⁻¹) against ×10, λ⁻¹ from the APJN asymptotics with the plan's σ_21, σ_OV (Xavier, β = 1): σ_21 =
    √(2/5)·√(8/5) = 0.8 and σ_OV = 1 at d_ff = 4d. λ⁻¹ ∝ α², so the α the fix gives sits exactly at the limit."""
    base = TransformerConfig(**{**SMALL, "norm": "derf", "init": "xavier", "dropout": 0.0, "n_layers": 192})
    li = float(lambda_inv(sigma_21=0.8, sigma_ov=1.0, norm="erf", alpha=1.0))
    critical = math.log(10.0) / math.sqrt(192 * li)  # α at which e^√(Nλ⁻¹) = 10
    below, above = (_by_name(config_checks(base.replace(norm_alpha=a)))["subcritical DyT/Derf"]
                    for a in (0.8 * critical, 1.25 * critical))
    assert not below.flagged and above.flagged
    assert above.changes["norm_alpha"] == pytest.approx(critical, rel=1e-3)
    assert "subcritical DyT/Derf" not in _by_name(config_checks(base.replace(norm="layernorm")))


def test_saturated_units_are_flagged_from_the_predicted_stream():
    """Xavier Pre-"Derf": the stream's variance grows with depth (nothing normalises it), so α√q crosses the
    saturation line at some layer; the fix is α ≤ 1/√q_max."""
    config = TransformerConfig(**{**SMALL, "norm": "derf", "init": "xavier", "norm_alpha": 0.5})
    predicted = predict(config, gradients=False)
    q = [r.fwd_var + r.fwd_mean**2 for r in [predicted.site("input")[0], *predicted.site("layer")]][:-1]
    check = _by_name(config_checks(config, predicted))["saturated DyT/Derf"]
    assert check.flagged == (0.5 * math.sqrt(max(q)) >= SATURATION)
    assert check.flagged  # the growth makes it saturate at 48 layers
    assert check.changes["norm_alpha"] == pytest.approx(1.0 / math.sqrt(max(q)), rel=1e-3)
    fixed = config.replace(norm_alpha=check.changes["norm_alpha"])
    assert not _by_name(config_checks(fixed, predict(fixed, gradients=False)))["saturated DyT/Derf"].flagged


def test_a_large_alpha_under_dslm_is_fixed_by_alpha_alone():
    """DSLM keeps the stream near unit variance, so α = 6 puts every layer's Derf on its tails (α√q ≈ 6): saturated
    (its APJN stays within ×10 at 96 layers, β² = 2/N shrinking σ_21, σ_OV). The fix moves α only."""
    config = TransformerConfig(**{**SMALL, "norm": "derf", "init": "dslm", "dropout": 0.0, "norm_alpha": 6.0,
                                  "n_layers": 96})
    report = doctor(config, seeds=0)
    flagged = [c.name for c in report.checks if c.flagged]
    assert flagged == ["saturated DyT/Derf"], [c.message for c in report.checks]
    assert set(report.recommendation.changes) == {"norm_alpha"}
    assert report.recommendation.changes["norm_alpha"] < 6.0
    assert not any(c.flagged for c in report.fixed_checks), [c.message for c in report.fixed_checks]
