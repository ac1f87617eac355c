"""Gaussian helpers against scipy: quadrature, bivariate normal CDF."""

import numpy as np
import pytest
from scipy import integrate, stats

from sigprop.core.gaussian import bvn_cdf, expect_1d, expect_2d
from sigprop.core.validate import clip_corr


def test_expect_1d_polynomials_exact():
    # E[X^4] = 3σ⁴ + 6μ²σ² + μ⁴ for X ~ N(μ, σ²).
    mu, var = 0.7, 2.3
    assert expect_1d(lambda x: x**4, mu, var) == pytest.approx(3 * var**2 + 6 * mu**2 * var + mu**4, rel=1e-12)


def test_expect_2d_matches_scipy_dblquad():
    mu, var, rho = 0.3, 1.7, 0.6
    f = np.tanh
    got = expect_2d(lambda a, b: f(a) * f(b), mu, var, rho)
    cov = var * np.array([[1, rho], [rho, 1]])
    dens = stats.multivariate_normal([mu, mu], cov).pdf
    ref, _ = integrate.dblquad(lambda y, x: f(x) * f(y) * dens([x, y]), -12, 12, -12, 12, epsabs=1e-10)
    assert got == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize("h, k, rho", [(0.3, -0.5, 0.4), (0.0, 0.0, 0.3), (-1.0, -1.0, 0.9), (1.2, 0.0, -0.5),
                                       (0.0, 0.7, 0.2), (2.0, 2.0, 0.999), (0.5, 0.5, 1.0), (0.5, -0.2, -1.0)])
def test_bvn_cdf_matches_scipy(h, k, rho):
    if abs(rho) == 1.0:
        ref = stats.norm.cdf(min(h, k)) if rho > 0 else max(stats.norm.cdf(h) + stats.norm.cdf(k) - 1, 0.0)
    else:
        ref = stats.multivariate_normal([0, 0], [[1, rho], [rho, 1]]).cdf([h, k])
    assert bvn_cdf(h, k, rho) == pytest.approx(ref, abs=1e-7)


def test_clip_corr_tolerates_roundoff_only():
    assert clip_corr(1.0 + 1e-12) == 1.0
    with pytest.raises(ValueError):
        clip_corr(1.01)
