"""Tests for sigprop.sde.stopping and the integrator's stopping times (Noci et al. Sec. 4.4, Fig. 8)."""

import math

import numpy as np
import pytest
import torch

from sigprop.sde.integrate import euler_maruyama
from sigprop.sde.stopping import stopping_times
from sigprop.sde.transformer import SDECoefficients
from sigprop.sde.triu import to_triu


def deterministic(rate):
    """dV = rate * V dt on every entry, no noise: Euler gives V_k = V0 (1 + rate dt)^k exactly."""
    def zero(v):
        p = to_triu(v).shape[-1]
        return torch.zeros(v.shape[0], p, p, dtype=torch.float64)

    return SDECoefficients(lambda v: rate * to_triu(v), zero)


def test_deterministic_crossing_time():
    """Eigenvalues grow as (1 + r dt)^k: the upper bound 1e4 is first exceeded at k* = the smallest k with
    lam_max (1 + r dt)^k > 1e4; decaying ones cross 1e-4 at the analogous k."""
    dt = 0.01
    v0 = torch.diag(torch.tensor([2.0, 0.5], dtype=torch.float64))
    up = euler_maruyama(deterministic(3.0), v0, 4.0, dt, 2, seed=0)
    k_up = math.floor(math.log(1e4 / 2.0) / math.log(1 + 3.0 * dt)) + 1
    assert np.allclose(up.stopping_times, k_up * dt)
    down = euler_maruyama(deterministic(-3.0), v0, 4.0, dt, 1, seed=0)
    k_down = math.floor(math.log(1e-4 / 0.5) / math.log(1 - 3.0 * dt)) + 1
    assert np.allclose(down.stopping_times, k_down * dt)
    never = euler_maruyama(deterministic(0.1), v0, 1.0, dt, 3, seed=0)
    assert np.all(np.isinf(never.stopping_times))
    # frozen after stopping: the recorded end value is the value at the stopping time
    assert np.isclose(up.v[0, -1, 0, 0], 2.0 * (1 + 3.0 * dt) ** k_up)


def test_stopping_times_on_recorded_paths():
    t = np.array([0.0, 0.5, 1.0])
    ok = np.eye(2)
    path = np.stack([np.stack([ok, ok, ok]), np.stack([ok, 2e4 * ok, ok]), np.stack([ok, ok, np.diag([1, 1e-5])])])
    assert np.array_equal(stopping_times(t, path), [np.inf, 0.5, 1.0])
    with pytest.raises(ValueError, match="eig_bounds"):
        stopping_times(t, path, bounds=(1.0, 0.5))
    with pytest.raises(ValueError, match="v_path"):
        stopping_times(t, path[:, :2])
