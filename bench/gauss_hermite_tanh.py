"""Why DyT's rules do not use plain Gauss–Hermite quadrature: its error on tanh-like integrands at a large variance.

    python bench/gauss_hermite_tanh.py

tanh has poles at ±iπ/2, so an n-point Gauss–Hermite rule in the standardised variable converges slowly once the
pre-activation's standard deviation is large against π/2. For h ~ N(0, v) this prints E[tanh² h] and E[sech⁴ h] by
the 96-point rule of ``sigprop.core.gaussian.expect_1d`` against adaptive quadrature (scipy.integrate.quad), and
DyT's own localised rule (``sigprop.components.dyt``) beside them. Written to docs/results/gauss-hermite-tanh.txt.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, stats

from sigprop.components.dyt import tanh_expectations
from sigprop.core.gaussian import expect_1d

#: The integrands, and the field of :func:`tanh_expectations` (DyT's rule) that holds each one's expectation.
INTEGRANDS = {"E[tanh² h]": (lambda x: np.tanh(x) ** 2, "phi2"), "E[sech⁴ h]": (lambda x: np.cosh(x) ** -4.0, "dphi2")}


def adaptive(f, v: float) -> float:
    """E[f(h)], h ~ N(0, v), by adaptive quadrature over ±60 (the Gaussian mass beyond is below float64's reach)."""
    return integrate.quad(lambda x: f(x) * stats.norm.pdf(x, scale=v ** 0.5), -60.0, 60.0, points=[0.0],
                          limit=500)[0]


def main() -> None:
    print("v      integrand     Gauss–Hermite (96)   adaptive quad   its error   DyT's rule's error")
    for v in (1.0, 10.0, 40.0):
        for name, (f, field) in INTEGRANDS.items():
            exact = adaptive(f, v)
            gh, local = float(expect_1d(f, 0.0, v)), float(getattr(tanh_expectations(0.0, v, 0.0), field))
            print(f"{v:<6g} {name:<12}  {gh:<19.6g}  {exact:<14.6g}  {100 * (gh / exact - 1):+8.2f}%   "
                  f"{local / exact - 1:+.1e}")


if __name__ == "__main__":
    main()
