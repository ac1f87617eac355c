"""Vanilla Pre-LN laws (Kedia et al. App. E.1)."""

import math

import numpy as np
import pytest
from scipy import special

from sigprop.laws.preln import (
    hyperbolic_gradient,
    preln_forward_bounds,
    preln_forward_variance,
    preln_gradient_bounds,
    preln_gradient_constant,
    preln_gradient_growth,
)


def _direct_gradient(n_layers, C1, C2, rx, rg, var_in, paper):
    """Literal iteration of App. E.1.2's recurrence from the top (σ²_{g,N} = 1) down to layer 1 (or 0)."""
    g = {n_layers: 1.0}
    var_fwd = var_in
    fwd_in = []  # forward variance at the input of layer n (n = 1..N)
    for n in range(1, n_layers + 1):
        fwd_in.append(var_fwd)
        var_fwd += C1 * rx[n - 1] + C2
    for n in range(n_layers, 1, -1):
        den = (C1 * rx[n - 1] + C2) * (n - 1) if paper else fwd_in[n - 1]
        g[n - 1] = g[n] * (1 + (C1 * rg[n - 1] + C2) / den)
    return np.array([g[n] for n in range(1, n_layers + 1)])


# --- forward -----------------------------------------------------------------------------------------------------

def test_forward_constant_r_is_linear():
    N, C1, C2, r, v0 = 50, 2.2, 0.4, 0.85, 0.3
    var = preln_forward_variance(N, C1, C2, r, var_in=v0)
    assert var.shape == (N,)
    assert np.allclose(var, v0 + np.arange(1, N + 1) * (C1 * r + C2), rtol=1e-14, atol=0)


def test_forward_per_layer_r_matches_loop_and_bounds():
    rng = np.random.default_rng(1)
    N, C1, C2, v0 = 40, 1.3, 0.7, 1.0
    r = rng.uniform(0.2, 0.9, N)
    var = preln_forward_variance(N, C1, C2, r, var_in=v0)
    acc, direct = v0, []
    for i in range(N):
        acc += C1 * r[i] + C2
        direct.append(acc)
    assert np.allclose(var, direct, rtol=1e-14, atol=0)
    lo, hi = preln_forward_bounds(N, C1, C2, 0.2, 0.9, var_in=v0)
    assert np.all(lo <= var) and np.all(var <= hi)


def test_forward_validation():
    with pytest.raises(ValueError, match="n_layers"):
        preln_forward_variance(0, 1.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="shape"):
        preln_forward_variance(3, 1.0, 1.0, [0.5, 0.5])
    with pytest.raises(ValueError, match="r_min must be <= r_max"):
        preln_forward_bounds(3, 1.0, 1.0, 0.9, 0.1)


# --- backward ----------------------------------------------------------------------------------------------------

def test_gradient_constant_identities_and_paper_values():
    assert preln_gradient_constant(2.2, 0.4, 0.7, 0.7) == pytest.approx(1.0, abs=1e-15)
    assert preln_gradient_constant(2.2, 0.4, 1.0, 0.0) == pytest.approx(0.4 / 2.6, rel=1e-15)
    # App. E.1.2: C_gpre,min = C2/(C1 + C2) = 0.15 and C_gpre,max = (C1 + C2)/C2 = 6.5 for C1 = 2.2, C2 = 0.4
    assert abs(preln_gradient_constant(2.2, 0.4, 1.0, 0.0) - 0.15) <= 0.005
    assert abs(preln_gradient_constant(2.2, 0.4, 0.0, 1.0) - 6.5) <= 0.05


@pytest.mark.parametrize("r", [0.0, 0.4, 0.85, 1.0])
def test_paper_recurrence_with_c_one_is_exactly_hyperbolic(r):
    N = 64
    ratio = preln_gradient_growth(N, 2.2, 0.4, r, r, denominator="paper")
    n = np.arange(1, N + 1)
    assert np.allclose(ratio, hyperbolic_gradient(n, N), rtol=1e-13, atol=0)  # Π_{k=n}^{N-1} (k+1)/k = N/n
    assert ratio[-1] == 1.0 and hyperbolic_gradient(N, N) == 1.0


@pytest.mark.parametrize("paper", [True, False])
def test_gradient_matches_direct_iteration(paper):
    rng = np.random.default_rng(2)
    N, C1, C2, v0 = 30, 2.2, 0.4, 0.5
    rx, rg = rng.uniform(0, 1, N), rng.uniform(0, 1, N)
    got = preln_gradient_growth(N, C1, C2, rx, rg, var_in=v0, denominator="paper" if paper else "exact")
    assert np.allclose(got, _direct_gradient(N, C1, C2, rx, rg, v0, paper), rtol=1e-13, atol=0)


def test_gradient_include_input_and_exact_denominator():
    N, C1, C2, r = 20, 2.2, 0.4, 0.8
    # exact denominator with var_in = 0 is the paper's C3 (n − 1) for n >= 2
    assert np.allclose(preln_gradient_growth(N, C1, C2, r, r, var_in=0.0),
                       preln_gradient_growth(N, C1, C2, r, r, denominator="paper"), rtol=1e-14, atol=0)
    # a positive embedding variance enlarges every LayerNorm denominator, so the growth is smaller
    assert np.all(preln_gradient_growth(N, C1, C2, r, r, var_in=1.0) <= preln_gradient_growth(N, C1, C2, r, r,
                                                                                             var_in=0.0))
    full = preln_gradient_growth(N, C1, C2, r, 0.6, var_in=1.0, include_input=True)
    part = preln_gradient_growth(N, C1, C2, r, 0.6, var_in=1.0)
    assert full.shape == (N + 1,) and np.array_equal(full[1:], part)
    assert full[0] == pytest.approx(part[0] * (1 + (C1 * 0.6 + C2) / 1.0), rel=1e-15)
    with pytest.raises(ValueError, match="include_input"):
        preln_gradient_growth(N, C1, C2, r, r, denominator="paper", include_input=True)
    with pytest.raises(ValueError, match="var_in must be > 0"):
        preln_gradient_growth(N, C1, C2, r, r, var_in=0.0, include_input=True)
    with pytest.raises(ValueError, match="denominator"):
        preln_gradient_growth(N, C1, C2, r, r, denominator="bogus")


@pytest.mark.parametrize("C", [0.15, 0.5, 1.0, 2.0, 6.5])
def test_discrete_product_against_gamma_and_continuous_law(C):
    """Constant C_gpre = C (paper denominator): Π_{k=n}^{N−1}(1 + C/k) = Γ(N+C)Γ(n)/(Γ(n+C)Γ(N)) exactly, and the
    continuous (N/n)^C law of App. E.1.2 within the discretisation error

        |log Π − C log(N/n)| ≤ |C(1 − C)|/(2(n − 1)) + max(C, C³)/(3 n (n − 1))       (n ≥ 2)

    from log(1 + x) = x − x²/2 + R, 0 ≤ R ≤ x³/3 (x ≥ 0), Σ_{k≥n} k⁻² ≤ 1/(n − 1), Σ_{k≥n} k⁻³ ≤ 1/(n(n − 1)).
    """
    N, C2 = 400, 1.0
    # constant C_gpre = (C1 r_g + C2)/(C1 r_x + C2) = C: r_g = 1, r_x = 0, C1 = C − 1 (C ≥ 1), or r_g = 0, r_x = 1,
    # C1 = 1/C − 1 (C < 1)
    C1, rx, rg = (C - 1.0, 0.0, 1.0) if C >= 1 else (1.0 / C - 1.0, 1.0, 0.0)
    assert preln_gradient_constant(C1, C2, rx, rg) == pytest.approx(C, rel=1e-14)
    ratio = preln_gradient_growth(N, C1, C2, rx, rg, denominator="paper")
    n = np.arange(1, N + 1)
    gamma = special.gammaln(N + C) + special.gammaln(n) - special.gammaln(n + C) - special.gammaln(N)
    assert np.allclose(np.log(ratio), gamma, rtol=0, atol=1e-11)
    m = n[1:]
    gap = np.abs(np.log(ratio[1:]) - C * np.log(N / m))
    tol = abs(C * (1 - C)) / (2 * (m - 1)) + max(C, C**3) / (3 * m * (m - 1))
    assert np.all(gap <= tol + 1e-12)


def test_paper_bounds_hold_for_any_per_layer_correlations():
    """(N/n)^{C_min} ≤ Π ≤ (N/n)^{C_max} (App. E.1.2), rigorous for the paper's recurrence by Bernoulli's inequality."""
    rng = np.random.default_rng(3)
    N, C1, C2 = 200, 2.2, 0.4
    n = np.arange(1, N + 1)
    lo, hi = preln_gradient_bounds(n, N, C1, C2)
    for _ in range(20):
        ratio = preln_gradient_growth(N, C1, C2, rng.uniform(0, 1, N), rng.uniform(0, 1, N), denominator="paper")
        assert np.all(lo <= ratio * (1 + 1e-13)) and np.all(ratio <= hi * (1 + 1e-13))
    assert preln_gradient_bounds(N, N, C1, C2) == (1.0, 1.0)


def test_hyperbolic_validation():
    assert hyperbolic_gradient(np.array([1, 2, 4]), 8).tolist() == [8.0, 4.0, 2.0]
    with pytest.raises(ValueError, match="n must be <= N"):
        hyperbolic_gradient(5, 4)
    with pytest.raises(ValueError, match="C2"):
        preln_gradient_bounds(1, 2, 1.0, 0.0)
    assert math.isfinite(preln_gradient_bounds(1, 2, 0.0, 1.0)[1])
