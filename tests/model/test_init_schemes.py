"""The registry of what each init scheme is, checked against what its plan does."""

from __future__ import annotations

import numpy as np
import pytest

from sigprop.model import TransformerConfig, make_plan, plan_for
from sigprop.model.init import _PLANS, SCHEMES
from sigprop.model.init_schemes import INIT_SCHEMES, SCHEME_NAMES, scheme_info

SMALL = dict(n_layers=4, d_model=32, n_heads=2, vocab_size=64, max_len=16, seq_len=16, dropout=0.1)
PATCHES = dict(input="patches", image_size=8, patch_size=4, seq_len=4, n_layers=3, d_model=16, n_heads=2)


def test_every_plan_has_a_record_and_every_record_a_plan():
    assert set(_PLANS) == set(SCHEME_NAMES)
    assert tuple(SCHEMES) == SCHEME_NAMES
    assert all(INIT_SCHEMES[name].name == name for name in SCHEME_NAMES)


def test_an_unknown_name_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown init scheme 'nope'; schemes: xavier"):
        scheme_info("nope")


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_needs_input_corr_is_whether_a_patch_model_without_it_is_refused(name):
    config = TransformerConfig(**PATCHES, init=name)
    if scheme_info(name).needs_input_corr:
        with pytest.raises(ValueError, match="input_corr"):
            make_plan(config)
    else:
        make_plan(config)


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_a_calibrated_scheme_starts_from_its_plan_schemes_plan(name):
    scheme = scheme_info(name)
    config = TransformerConfig(**SMALL, init=name)
    plan = plan_for(config)
    assert plan.notes.get("calibrated", False) is scheme.calibrated
    base = make_plan(config.replace(init=scheme.plan_scheme))
    for role in ("token", "position", "q", "k", "v", "w1"):
        assert np.array_equal(np.asarray(make_plan(config).stds[role]), np.asarray(base.stds[role]))


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_bounds_depth_is_whether_the_residual_scales_follow_beta_k(name):
    config = TransformerConfig(**SMALL, init=name, beta_k=1.0, beta_alpha=0.5)
    lam, beta = make_plan(config).scales("attn", 0)
    beta2 = config.beta_k / config.total_layers**config.beta_alpha
    follows = np.isclose(beta**2, beta2) and np.isclose(lam**2 + beta**2, 1.0)
    assert follows == scheme_info(name).bounds_depth


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_learns_beta_is_whether_the_plan_makes_beta_a_parameter(name):
    assert plan_for(TransformerConfig(**SMALL, init=name)).learnable_beta == scheme_info(name).learns_beta


@pytest.mark.parametrize("name", SCHEME_NAMES)
def test_a_post_ln_scheme_is_one_whose_skip_scale_needs_a_norm_to_divide_it_out(name):
    lam, _ = make_plan(TransformerConfig(**SMALL, init=name)).scales("attn", 0)
    assert (lam > 1.0) == (scheme_info(name).made_for == "post")


def test_the_config_reads_its_scheme():
    assert TransformerConfig(**SMALL, init="auto").scheme is INIT_SCHEMES["auto"]
