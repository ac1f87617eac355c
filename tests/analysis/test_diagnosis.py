"""sigprop.analysis.diagnosis: growth laws on curves of known shape, verdicts and limits, stacks, and the theory's own
profiles of Pre-LN, Post-LN and DeepScaleLM models."""

import json
import math

import numpy as np
import pytest

from sigprop import TransformerConfig, predict
from sigprop.analysis.diagnosis import DiagnosisLimits, diagnose, growth_law, side_by_side
from sigprop.core.profile import Profile, Row

N = 96


def _profile(fwd_var, grad_var, fwd_corr, kind="predicted", **config):
    rows = [Row(layer, "layer", 0.0, float(v), float(r), float(g), 0.5)
            for layer, (v, g, r) in enumerate(zip(fwd_var, grad_var, fwd_corr, strict=True))]
    return Profile(kind, {"arch": "encoder", "init": "xavier", "n_layers": len(rows), **config}, tuple(rows))


def _finding(diagnosis, quantity, stack=""):
    (found,) = [f for f in diagnosis.findings if f.quantity == quantity and f.stack == stack]
    return found


LAYERS = np.arange(N, dtype=np.float64)
FLAT = np.ones(N)
CORR = np.linspace(0.5, 0.8, N)


def test_growth_law_names_known_shapes():
    linear = growth_law(0.4 + 1.3 * LAYERS)
    assert linear.kind == "power" and abs(linear.rate - 1.0) < 0.1
    assert "linearly" in linear.describe()
    exponential = growth_law(1.05**LAYERS)
    assert exponential.kind == "exponential" and exponential.rate == pytest.approx(1.05, rel=1e-12)
    assert "×0.9524 per layer towards the input" in exponential.describe(towards_input=True)
    hyperbolic = growth_law(N / (LAYERS + 1.0))
    assert hyperbolic.kind == "power" and hyperbolic.rate == pytest.approx(-1.0, rel=1e-12)
    assert "hyperbolically" in hyperbolic.describe()
    assert growth_law(1.0 + 0.05 * np.sin(LAYERS)).kind == "flat"
    assert growth_law(np.ones(5)) is None  # too few layers to fit
    assert growth_law(np.r_[FLAT[:-1], 0.0]) is None


def test_pre_ln_like_growth_and_post_ln_like_vanishing():
    pre = diagnose(_profile(0.4 + 1.3 * LAYERS, 30.0 / (LAYERS + 1.0) ** 0.3, CORR))
    fwd, grad = _finding(pre, "fwd_var"), _finding(pre, "grad_var")
    assert (fwd.verdict, fwd.flagged) == ("grows", True) and fwd.change == pytest.approx(1 + 1.3 * 95 / 0.4)
    assert grad.verdict == "bounded" and not grad.flagged  # 96^0.3 = 3.9 < 10
    assert "init=dslm" in pre.hint
    post = diagnose(_profile(FLAT, 0.96 ** (N - 1 - LAYERS), CORR))
    grad = _finding(post, "grad_var")
    assert grad.verdict == "vanishes" and grad.change == pytest.approx(0.96**95)
    assert grad.law.kind == "exponential" and "×0.96 per layer towards the input" in grad.describe()
    assert _finding(post, "fwd_var").verdict == "bounded"


def test_limits_move_the_verdicts():
    profile = _profile(0.4 + 1.3 * LAYERS, FLAT, np.full(N, 0.995))
    assert _finding(diagnose(profile), "fwd_var").verdict == "grows"
    assert _finding(diagnose(profile, DiagnosisLimits(growth=1e3)), "fwd_var").verdict == "bounded"
    corr = _finding(diagnose(profile), "fwd_corr")
    assert corr.verdict == "collapses" and corr.flagged and "rank collapse" in corr.describe()
    assert not _finding(diagnose(profile, DiagnosisLimits(collapse=0.999)), "fwd_corr").flagged
    for bad in (dict(growth=1.0), dict(growth=math.inf), dict(collapse=1.0), dict(collapse=0.0)):
        with pytest.raises(ValueError):
            DiagnosisLimits(**bad)


def test_a_boundary_jump_varies_and_gets_no_depth_hint():
    grad = np.r_[50.0, FLAT[:-2], 100.0]  # jumps at the first and last layer, nothing along the depth
    diagnosis = diagnose(_profile(FLAT, grad, CORR))
    found = _finding(diagnosis, "grad_var")
    assert (found.verdict, found.flagged, found.spread) == ("varies", True, 100.0)
    assert "varies ×100 between layers" in found.describe()
    assert diagnosis.hint is None


def test_one_boundary_layer_s_jump_is_not_a_change_with_depth_whatever_its_size():
    """×20 at the top layer alone grows past the limit, but flat over the middle layers: DeepScaleLM's scaling is not
    its fix (the doctor once recommended it for this, and not for the same jump at ×5)."""
    grad = np.r_[FLAT[:-1], 0.05]
    found = _finding(diagnose(_profile(FLAT, grad, CORR)), "grad_var")
    assert found.verdict == "grows" and found.flagged and found.law.kind == "flat"
    assert not found.changes_with_depth and diagnose(_profile(FLAT, grad, CORR)).hint is None
    nothing = _finding(diagnose(_profile(FLAT, np.zeros(N), CORR)), "grad_var")  # no gradient reaches the stack
    assert nothing.flagged and not nothing.changes_with_depth


def test_deepscalelm_gets_no_deepscalelm_hint():
    profile = _profile(0.4 + 1.3 * LAYERS, FLAT, CORR, init="dslm")
    assert diagnose(profile).flagged and diagnose(profile).hint is None


def test_deepnet_in_a_pre_ln_stack_is_named_as_the_cause():
    growing = 1.1**LAYERS
    pre = diagnose(_profile(growing, FLAT, CORR, init="deepnorm", norm_position="pre"))
    assert "Post-LN scheme" in pre.hint and "init=dslm" in pre.hint
    assert diagnose(_profile(growing, FLAT, CORR, init="deepnorm", norm_position="post")).hint.count("DeepNet") == 0


def test_overflow_is_not_finite():
    fwd = np.r_[FLAT[:-1], math.inf]
    found = _finding(diagnose(_profile(fwd, FLAT, CORR)), "fwd_var")
    assert found.verdict == "not finite" and found.flagged
    as_dict = diagnose(_profile(fwd, FLAT, CORR)).to_dict()
    assert as_dict["findings"][0]["change"] is None and as_dict["findings"][1]["law"] == {"kind": "flat", "rate": None}
    json.dumps(as_dict, allow_nan=False)  # plain JSON


def test_a_measured_quantity_nan_at_every_layer_is_not_finite():
    """NaN weights make every statistic NaN, and a loss that overflows every gradient: neither is "stable"."""
    nan = np.full(N, math.nan)
    stream = diagnose(_profile(nan, nan, nan, kind="measured"))
    assert {(f.quantity, f.verdict) for f in stream.findings} == {("fwd_var", "not finite"),
                                                                   ("grad_var", "not finite")}
    assert stream.flagged
    gradient = diagnose(_profile(FLAT, nan, CORR, kind="measured"))
    assert _finding(gradient, "grad_var").verdict == "not finite" and gradient.flagged
    skipped = _profile(FLAT, nan, CORR)  # predicted: predict(gradients=False), the forward sweep only
    assert not any(f.quantity == "grad_var" for f in diagnose(skipped).findings)
    one_token = diagnose(_profile(FLAT, FLAT, nan))  # no token pair: no correlation to read
    assert not any(f.quantity == "fwd_corr" for f in one_token.findings) and not one_token.flagged


def test_a_gradient_that_underflows_to_zero_vanishes():
    """A gradient variance that reached 0 (float32 underflow) is vanishing, not an overflow."""
    grad = np.r_[0.0, 1e-40, FLAT[2:]]
    found = _finding(diagnose(_profile(FLAT, grad, CORR)), "grad_var")
    assert found.verdict == "vanishes" and found.flagged and found.change == 0.0
    assert "reaches 0 at some layer: underflow" in found.describe() and "overflow" not in found.describe()
    json.dumps(diagnose(_profile(FLAT, grad, CORR)).to_dict(), allow_nan=False)


def test_a_gradient_that_is_zero_at_every_layer_reaches_nothing():
    """A stack no gradient reaches (a cross-attention β = 0 upstream) is said to be reached by nothing, not to
    underflow."""
    found = _finding(diagnose(_profile(FLAT, np.zeros(N), CORR)), "grad_var")
    assert found.verdict == "vanishes" and "0 at every layer: nothing reaches this stack" in found.describe()
    json.dumps(diagnose(_profile(FLAT, np.zeros(N), CORR)).to_dict(), allow_nan=False)


def test_encoder_and_decoder_are_read_apart():
    fwd = np.r_[1.0 + LAYERS[:48], FLAT[:48]]
    diagnosis = diagnose(_profile(fwd, FLAT, CORR, arch="encoder_decoder", n_layers=48))
    assert _finding(diagnosis, "fwd_var", "encoder").verdict == "grows"
    assert _finding(diagnosis, "fwd_var", "decoder").verdict == "bounded"
    assert diagnosis.lines()[0].startswith("encoder: forward variance grows")


def test_side_by_side_puts_the_theory_beside_each_finding():
    predicted = diagnose(_profile(FLAT, 0.96 ** (N - 1 - LAYERS), CORR))
    measured = diagnose(_profile(FLAT, 0.95 ** (N - 1 - LAYERS), CORR, kind="measured"))
    lines = side_by_side(predicted, measured)
    assert len(lines) == 3 and lines[1].endswith(f"(theory: ×{0.96**95:.3g})")
    assert lines[2].endswith("(theory: 0.8000)")


SMALL = dict(d_model=64, n_heads=2, seq_len=32, max_len=32, vocab_size=512, dropout=0.1)


@pytest.mark.parametrize(("norm_position", "init", "fwd", "grad"), [
    ("pre", "xavier", "grows", "grows"),      # App. E.1: linear forward growth, gradient growing towards the input
    ("post", "xavier", "bounded", "vanishes"),  # App. E.2: exponential gradient change
    ("pre", "dslm", "bounded", "bounded"),    # App. E.3
    ("post", "dslm", "bounded", "bounded"),   # App. E.4
])
@pytest.mark.long
def test_the_theory_of_each_architecture(norm_position, init, fwd, grad):
    """The paper's Table 3, read off sigprop's own predictions at 96 layers (exchangeable sweeps, seconds)."""
    config = TransformerConfig(n_layers=N, norm_position=norm_position, init=init, **SMALL)
    diagnosis = diagnose(predict(config))
    assert (_finding(diagnosis, "fwd_var").verdict, _finding(diagnosis, "grad_var").verdict) == (fwd, grad)
    if (norm_position, init) == ("pre", "xavier"):
        law = _finding(diagnosis, "fwd_var").law
        assert law.kind == "power" and abs(law.rate - 1.0) < 0.25
    if (norm_position, init) == ("post", "xavier"):
        assert _finding(diagnosis, "grad_var").law.kind == "exponential"
    assert _finding(diagnosis, "fwd_corr").verdict == "stays below rank collapse"  # dropout 0.1: r_max < 1


def test_a_stack_whose_branches_are_scaled_to_nothing_is_called_the_identity():
    """SkipInit (β = 0): every variance is bounded for want of propagation, and the diagnosis says so; it asks the
    init plan, so Xavier's identical statistics (β = 1) and a config it cannot rebuild get no such finding."""
    def stream(**config):
        return [f for f in diagnose(_profile(FLAT, FLAT, np.full(N, 0.8), **config)).findings
                if f.quantity == "stream"]

    (found,) = stream(init="skipinit")
    assert found.verdict == "identity" and not found.flagged and "nothing propagates" in found.describe()
    assert stream() == [] and stream(init="no-such-init") == []
    assert stream(init="layerscale", d_model=64, n_heads=2) != []  # β = 1e-6 beyond 24 layers (CaiT)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_skipinit_is_diagnosed_as_the_identity_by_the_theory(norm_position):
    config = TransformerConfig(n_layers=8, init="skipinit", norm_position=norm_position, **SMALL)
    (found,) = [f for f in diagnose(predict(config)).findings if f.quantity == "stream"]
    assert found.verdict == "identity"
    assert not [f for f in diagnose(predict(config.replace(init="xavier"))).findings if f.quantity == "stream"]


def test_the_hint_proposes_what_the_doctor_does():
    """A Llama-style model gets `auto` (DSLM's forms assume ReLU/GELU and LayerNorm), an unnormalised one no scheme:
    the hint once proposed `init=dslm` for both, while the doctor does not."""
    growing = 1.5 ** LAYERS[:16]
    llama = _profile(growing, FLAT[:16], CORR[:16], activation="swiglu", norm="rmsnorm", n_layers=16)
    assert "--set init=auto" in diagnose(llama).hint and "init=dslm" not in diagnose(llama).hint
    bare = _profile(growing, FLAT[:16], CORR[:16], norm_position="none", n_layers=16)
    assert diagnose(bare).hint is None
    plain = _profile(growing, FLAT[:16], CORR[:16], n_layers=16)
    assert "--set init=dslm" in diagnose(plain).hint
    two = _profile(np.array([1.0, 30.0]), np.ones(2), np.array([0.5, 0.6]), n_layers=2)  # β² = 2/2: λ = 0
    assert diagnose(two).findings[0].flagged and diagnose(two).hint is None


def test_a_measurement_whose_loss_required_no_gradient_is_not_called_nan():
    """A frozen model (or one measured under inference mode) has no gradient statistics, and says so; it is not a
    model gone NaN."""
    import torch

    import sigprop

    config = TransformerConfig(n_layers=4, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
    batch = sigprop.make_batch(config, torch.randint(5, 64, (2, 8), generator=torch.Generator().manual_seed(0)))
    frozen = sigprop.measure(sigprop.Transformer(config).requires_grad_(False), batch)
    assert not diagnose(frozen).flagged and not any(f.quantity == "grad_var" for f in diagnose(frozen).findings)
    from sigprop.measurement.seeds import measure_seeds

    averaged = measure_seeds(config, batch, 2)  # several seeds: the flag survives the average when every seed has it
    assert "grad_source" not in averaged.meta and not diagnose(averaged).flagged
