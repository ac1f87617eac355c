"""The seed-to-seed spread (sigprop.theory.spread, sigprop.theory.layer_noise): the accumulation along depth against
a simulation of its linear model, the one-layer Monte Carlo's bookkeeping, and predict(spread=...) leaving every
other number as it was."""

import math

import numpy as np
import pytest
import torch

import sigprop
from sigprop.core.profile import Profile
from sigprop.theory.layer_noise import LayerNoiseSampler, NoiseKey, gaussian_rows
from sigprop.theory.predict import theory_model
from sigprop.theory.spread import (
    NoiseSampling,
    accumulate,
    accumulate_state,
    anchor_layers,
    predict_spread,
    spread_steps,
    state_spread,
)

SMALL = dict(n_layers=3, d_model=16, n_heads=2, vocab_size=64, seq_len=8, max_len=8)


def test_accumulate_identities():
    n, v = 5, 0.02
    zero, ones = np.zeros(n), np.ones(n)
    fwd, grad = accumulate(v * ones, v * ones, zero, zero, zero)  # no coupling: each layer's own noise
    assert fwd.tolist() == pytest.approx([0.0] + [v] * n)  # A = 0: ε_l is layer l's fresh noise only
    assert grad.tolist() == pytest.approx([v * k for k in range(n, -1, -1)])
    fwd, _ = accumulate(v * ones, zero, zero, ones, zero)  # A = 1: the forward noise adds up
    assert fwd.tolist() == pytest.approx([v * k for k in range(n + 1)])


def test_accumulate_against_a_simulation_of_the_linear_model():
    """Var ε_l and Var S_l of the linear model ε_k = A_k ε_{k−1} + η^f_k, δlog γ_k = B_k ε_{k−1} + η^g_k with
    correlated (η^f_k, η^g_k), simulated: within z standard errors of a variance (relative SE √(2/(n − 1)))."""
    rng = np.random.default_rng(0)
    n, draws = 6, 40_000
    vf, vg = rng.uniform(0.01, 0.05, n), rng.uniform(0.01, 0.05, n)
    cov = 0.6 * np.sqrt(vf * vg) * rng.choice([-1, 1], n)
    A, B = rng.uniform(0.3, 1.0, n), rng.uniform(-0.8, 0.8, n)
    fwd, grad = accumulate(vf, vg, cov, A, B)
    eta = np.stack([rng.multivariate_normal([0, 0], [[vf[k], cov[k]], [cov[k], vg[k]]], draws) for k in range(n)])
    eps = np.zeros((n + 1, draws))
    gain = np.zeros((n, draws))
    for k in range(n):
        gain[k] = B[k] * eps[k] + eta[k, :, 1]
        eps[k + 1] = A[k] * eps[k] + eta[k, :, 0]
    S = np.array([gain[l + 1:].sum(axis=0) for l in range(-1, n)])
    for predicted, simulated in ((fwd, eps), (grad, S)):
        for p, x in zip(predicted, simulated, strict=True):
            var = x.var(ddof=1)
            assert abs(p - var) <= 4.4 * max(var, 1e-12) * math.sqrt(2 / (draws - 1)) + 1e-15


def test_accumulate_state_against_a_simulation_of_the_coupled_linear_model():
    """The forward state u_k = (ε_k, ρ_k) walked up, the gradient correlation's fluctuation v_k walked down, and the
    log gains reading both (accumulate_state's docstring), each layer's fresh noise ζ_k correlated within the layer:
    Var ε_l, Var S_l and the correlations' Var ρ_l, Var v_l simulated, within z standard errors of a variance
    (relative SE √(2/(n − 1)))."""
    rng = np.random.default_rng(1)
    n, draws = 5, 40_000
    noise = np.empty((n, 4, 4))
    for k in range(n):
        root = rng.normal(0.0, 0.12, (4, 4))
        noise[k] = root @ root.T
    J = rng.uniform(-0.6, 0.6, (n, 4, 3))
    J[:, 0, 0] = rng.uniform(0.5, 1.0, n)
    J[:, 1, 1] = rng.uniform(0.5, 1.0, n)
    J[:, 3, 2] = rng.uniform(0.5, 1.0, n)
    fwd, grad = accumulate_state(noise, J)
    zeta = np.stack([rng.multivariate_normal(np.zeros(4), noise[k], draws) for k in range(n)])
    u = np.zeros((n + 1, draws, 2))  # u[k + 1] = u_k
    for k in range(n):
        u[k + 1] = u[k] @ J[k, :2, :2].T + zeta[k, :, :2]
    v = np.zeros((n + 1, draws))  # v[k + 1] = v_k, v_{N-1} = 0
    for k in range(n - 1, -1, -1):
        v[k] = J[k, 3, 2] * v[k + 1] + u[k] @ J[k, 3, :2] + zeta[k, :, 3]
    gain = np.stack([u[k] @ J[k, 2, :2] + J[k, 2, 2] * v[k + 1] + zeta[k, :, 2] for k in range(n)])
    S = np.array([gain[l + 1:].sum(axis=0) for l in range(-1, n)])
    rho, grad_corr = state_spread(noise, J)
    for predicted, simulated in ((fwd, u[:, :, 0]), (grad, S), (rho, u[:, :, 1]), (grad_corr, v)):
        for p, x in zip(predicted, simulated, strict=True):
            var = x.var(ddof=1)
            assert abs(p - var) <= 4.4 * max(var, 1e-12) * math.sqrt(2 / (draws - 1)) + 1e-15


def test_anchor_layers_cover_both_ends():
    assert anchor_layers(3) == [0, 1, 2]
    at = anchor_layers(100, 6)
    assert at[0] == 0 and at[-1] == 99 and at == sorted(set(at)) and len(at) == 6


def test_noise_anchors_are_refined_where_the_noise_falls_and_progress_adds_up():
    """A Pre-LN stack's fresh noise falls steeply over its first layers: the refinement samples there (beyond the
    Chebyshev anchors), never past ``most_anchors``, and the progress reported sums to :func:`spread_steps`."""
    config = sigprop.TransformerConfig(**{**SMALL, "n_layers": 48}, norm_position="pre")
    calls: list[int] = []
    columns = predict_spread(theory_model(config), sigprop.predict(config), {"L": 8, "attention_seed": 0}, 1, 8,
                             NoiseSampling(inputs=2, draws_per_input=3), progress=calls.append)
    at, chebyshev = columns.meta["anchor_layers"], anchor_layers(48)
    assert set(chebyshev) < set(at) and len(at) <= NoiseSampling().most_anchors
    assert any(chebyshev[1] < k < chebyshev[3] for k in at if k not in chebyshev)
    assert sum(calls) == spread_steps(48)


def test_gaussian_rows_moments():
    gen = torch.Generator().manual_seed(0)
    x = gaussian_rows(0.5, 2.0, 0.3, 4000, 2, 8, gen)
    centred = x - 0.5
    # the grand mean averages B·W independent (sequence, coordinate) means of L tokens that share √r c:
    # its variance is σ²(r + (1 − r)/L)/(B·W)
    sequences, length, width = x.shape
    mean_se = math.sqrt(2.0 * (0.3 + 0.7 / length) / (sequences * width))
    assert float(x.mean()) == pytest.approx(0.5, abs=4.4 * mean_se)
    corr = float((centred[:, 0] * centred[:, 1]).mean() / centred.pow(2).mean())
    assert corr == pytest.approx(0.3, abs=4.4 * math.sqrt(2 / (4000 * 8)))
    across = gaussian_rows(0.0, 1.0, 1.0, 3, 2, 8, gen, across=True)
    assert bool((across == across[:1, :1]).all())  # one vector for the whole batch


def test_sampler_caches_per_key_and_leaves_the_global_random_state():
    config = sigprop.TransformerConfig(**SMALL, norm_position="pre")
    sampler = LayerNoiseSampler(config, sigprop.plan_for(config), sequences=2, length=8, inputs=2, draws_per_input=3)
    state = torch.get_rng_state()
    m, g = sigprop.Moments(var=1.0, corr=0.4), sigprop.GradMoments(var=3.0, corr=0.2)
    first = sampler.noise(1, m, g)
    assert torch.equal(state, torch.get_rng_state())
    again = sampler.noise(1, sigprop.Moments(var=1.0 + 1e-4, corr=0.4 + 1e-3), sigprop.GradMoments(var=9.0, corr=0.2))
    assert again is first and sampler.samples == 1  # the same key: rounded moments, the gradient's scale dropped
    assert NoiseKey.of(1, m, g) != NoiseKey.of(2, m, g)
    assert first.dof == 4 and first.fwd > 0 and first.grad > 0


def test_sampler_refuses_an_encoder_decoder():
    config = sigprop.TransformerConfig(**SMALL, arch="encoder_decoder", n_decoder_layers=2)
    with pytest.raises(ValueError, match="encoder-decoder"):
        LayerNoiseSampler(config, sigprop.plan_for(config), sequences=1, length=8)


def test_spread_false_leaves_the_prediction_bit_identical_and_spread_true_adds_columns():
    config = sigprop.TransformerConfig(**SMALL, norm_position="post")
    plain = sigprop.predict(config)
    assert plain.to_json() == sigprop.predict(config, spread=False).to_json()
    assert not plain.has_spread
    assert all("grad_var_log_sd" not in r and "fwd_var_log_sd" not in r for r in plain.to_json()["per_site"])
    spread = sigprop.predict(config, spread=True)
    keep = ("fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr")
    for a, b in zip(plain.rows, spread.rows, strict=True):
        assert [getattr(a, q) for q in keep] == pytest.approx([getattr(b, q) for q in keep], rel=0, abs=0,
                                                              nan_ok=True)
    layers = spread.site("layer")
    assert layers[-1].grad_var_log_sd == 0.0  # relative to the top
    assert layers[0].grad_var_log_sd > layers[1].grad_var_log_sd > 0
    assert all(r.fwd_var_log_sd < 1e-3 for r in layers)  # Post-LN: each layer ends in a norm
    assert all(math.isnan(r.grad_var_log_sd) for r in spread.rows if r.site not in ("layer", "input"))
    back = Profile.from_json(spread.to_json())
    assert back.column("grad_var_log_sd") == spread.column("grad_var_log_sd") and back.has_spread
    assert spread.meta["spread"]["anchor_layers"] == [0, 1, 2]


def test_pre_ln_forward_spread_is_positive_from_the_first_layer():
    """Pre-LN's stream is a sum of branches: its variance carries every layer's fresh noise (none at the input)."""
    config = sigprop.TransformerConfig(**{**SMALL, "n_layers": 4}, norm_position="pre")
    profile = sigprop.predict(config, spread=True)
    assert profile.site("input")[0].fwd_var_log_sd == 0.0
    assert all(r.fwd_var_log_sd > 0 for r in profile.site("layer"))


def test_gradient_ratio_interval():
    from sigprop.core.profile import Row
    from sigprop.theory.spread import gradient_ratio_interval

    rows = (Row(0, "layer", grad_var=8.0, grad_var_log_sd=0.4), Row(1, "layer", grad_var=2.0, grad_var_log_sd=0.0))
    low, high = gradient_ratio_interval(Profile("predicted", {}, rows), level=0.9)
    z = 1.6448536269514722
    assert (low, high) == pytest.approx((4 * math.exp(-0.08 - z * 0.4), 4 * math.exp(-0.08 + z * 0.4)), rel=1e-12)
    assert math.sqrt(low * high) * math.exp(0.08) == pytest.approx(4.0)  # the log-normal's mean is the ratio
    with pytest.raises(ValueError, match="spread=True"):
        gradient_ratio_interval(Profile("predicted", {}, (Row(0, "layer", grad_var=1.0),)))
    with pytest.raises(ValueError, match="level"):
        gradient_ratio_interval(Profile("predicted", {}, rows), level=1.0)


@pytest.mark.parametrize("corr, grad_corr", [(1.0, 0.0), (0.999, -0.004), (0.5, 1.0)])
def test_response_stays_inside_the_states_that_exist(corr, grad_corr):
    """Near a correlation of 1 (a Post-LN stream near rank collapse) or a gradient correlation near 0 at a long
    sequence (where L tokens cannot share less than −1/(L − 1)), the central differences step only into states the
    rules accept, and every response is finite."""
    from sigprop.theory.predict import theory_model
    from sigprop.theory.spread import response

    config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=128, max_len=128,
                                       norm_position="post")
    J = response(theory_model(config), 1, sigprop.Moments(var=1.0, corr=corr),
                 sigprop.GradMoments(var=1.0, corr=grad_corr), {"L": 128, "attention_seed": 0})
    assert J.shape == (4, 3) and np.isfinite(J).all()
