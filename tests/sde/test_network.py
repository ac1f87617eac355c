"""Finite networks (Noci et al. Eqs. 1, 4, 9, 11): recorded shapes, the identity at gamma = 0, the three simulation
methods against each other in law (KS at alpha = 0.001), rank collapse without shaping, and bad input."""

import math

import numpy as np
import pytest
import torch

from sigprop.sde.experiments import ks_test
from sigprop.sde.network import (
    ARCHITECTURES,
    equicorrelated,
    get_architecture,
    initial_tokens,
    intervention,
    psd_root,
    simulate_network,
)
from tests.helpers import Z, mc_mean

V0 = equicorrelated(3, 0.2)


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_recorded_covariances_have_the_documented_shapes(arch):
    path = simulate_network(arch, V0, width=16, depth=4, n_samples=5, gamma=0.5, seed=1, chunk=2)
    assert path.v.shape == (5, 5, 3, 3)
    assert np.array_equal(path.layers, np.arange(5)) and np.allclose(path.times, np.arange(5) / 16)
    np.testing.assert_allclose(path.v[:, 0], np.broadcast_to(V0, (5, 3, 3)), atol=1e-12)
    np.testing.assert_allclose(path.v, path.v.swapaxes(-1, -2), atol=1e-10)
    assert path.corr().shape == (5, 5) and path.stopping_times().shape == (5,)
    sub = simulate_network(arch, V0, width=16, depth=4, n_samples=3, gamma=0.5, record_layers=[0, 2, 4])
    assert sub.v.shape == (3, 3, 3, 3) and list(sub.layers) == [0, 2, 4]


@pytest.mark.parametrize("method", ["reduced", "sketch", "full"])
@pytest.mark.parametrize("arch", ["resnet_relu", "shaped_attention", "shaped_transformer", "softmax_attention"])
def test_gamma_zero_is_the_identity(arch, method):
    """lambda = 1, gamma = 0: X_{l+1} = X_l, so V_l = V0 at every layer, whatever the branch."""
    path = simulate_network(arch, V0, width=12, depth=3, n_samples=4, gamma=0.0, method=method)
    np.testing.assert_allclose(path.v, np.broadcast_to(V0, path.v.shape), atol=1e-12)


def test_initial_tokens_reproduce_v0_exactly():
    v = equicorrelated(4, -0.1, 3.0)
    x = initial_tokens(v, 10)
    np.testing.assert_allclose((x @ x.T / 10).numpy(), v, atol=1e-12)
    r = psd_root(torch.from_numpy(v)[None])
    np.testing.assert_allclose((r @ r.transpose(-1, -2))[0].numpy(), v, atol=1e-12)


@pytest.mark.parametrize("arch", ["shaped_attention", "resnet_relu", "softmax_attention"])
def test_the_three_methods_have_the_same_law(arch):
    """full n x n weights vs the Gaussian sketch vs the reduced Markov chain of V (module docstring): two-sample
    KS of V^{01} and V^{00} after two layers, each below the critical value at alpha = 0.001."""
    kw = {"width": 12, "depth": 2, "n_samples": 1500, "gamma": 0.8, "tau0": 0.5, "c_minus": -2.0}
    paths = {m: simulate_network(arch, V0, method=m, seed=i, **kw)
             for i, m in enumerate(["full", "sketch", "reduced"])}
    for other in ("sketch", "reduced"):
        for a, b in ((0, 1), (0, 0), (1, 2)):
            ks = ks_test(paths["full"].v[:, -1, a, b], paths[other].v[:, -1, a, b])
            assert ks["statistic"] <= ks["critical"], (arch, other, (a, b), ks)


def test_one_layer_mean_matches_the_exact_expectation():
    """Residual shaped ReLU, one layer: E V1^{00} = lambda^2 V0^{00} + gamma^2 c E[sigma_s(g)^2] V0^{00} = V0^{00}
    (c^{-1} = E sigma_s(g)^2, Eq. 4); the cross terms vanish in expectation."""
    path = simulate_network("resnet_relu", V0, width=20, depth=1, n_samples=4096, gamma=0.7, c_minus=-3.0)
    est, se = mc_mean(path.v[:, 1, 0, 0])
    assert abs(est - V0[0, 0]) <= Z * se


def test_unshaped_softmax_collapses_and_shaped_attention_does_not():
    """Sec. 4.1 / Fig. 1: the zero-order m^{-1} 11^T of Softmax attention drives rho -> 1; shaped attention keeps
    the mean correlation near rho0 over T = d/n = 0.75."""
    shaped = simulate_network("shaped_attention", V0, 64, 48, 64, gamma=1 / math.sqrt(8)).corr()[:, -1]
    soft = simulate_network("softmax_attention", V0, 64, 48, 64, gamma=1 / math.sqrt(8)).corr()[:, -1]
    assert np.mean(soft) > 0.99
    assert np.mean(shaped) < 0.9


def test_architectures_and_interventions():
    assert get_architecture("shaped_transformer").sde_kind == "shaped_transformer"
    assert get_architecture("resnet_relu").sde_kind == "resnet_relu"
    assert get_architecture("preln_attention").sde_kind is None
    assert intervention(True, True, True).sde_kind == "shaped_attention"
    assert intervention(True, False, False).name == "only id"
    assert intervention(False, True, True).name == "center, tau^2=nn_k"
    assert intervention(False, False, False).name == "none"


@pytest.mark.parametrize("kwargs, message", [
    ({"arch": "lstm"}, "architecture must be one of"),
    ({"gamma": 1.5}, "gamma"),
    ({"tau0": 0.0}, "tau0"),
    ({"width": 4}, "2 m"),
    ({"width": 2}, "width must be >="),
    ({"depth": 0}, "depth must be a positive integer"),
    ({"method": "exact"}, "method must be one of"),
    ({"arch": "preln_attention", "method": "reduced"}, "LayerNorm"),
    ({"record_layers": [0, 5]}, "record_layers"),
    ({"chunk": 0}, "chunk"),
])
def test_bad_input_raises_a_named_value_error(kwargs, message):
    args = {"arch": "shaped_attention", "v0": V0, "width": 8, "depth": 2, "n_samples": 2, "gamma": 0.5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        simulate_network(**args)
