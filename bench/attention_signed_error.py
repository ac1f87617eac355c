"""The sign of the attention rules' errors on the verify sweep: is the closed form biased, or only noisy?

    python bench/attention_signed_error.py [--seed 0]

Runs the ``attention`` sweep of ``sigprop verify`` (the same configurations and draws as the full sweep at this
seed, 1024 configurations over Kedia et al.'s Table 22 ranges) and prints, per quantity, the mean signed error of the
closed form against Monte Carlo with its standard error (from the per-configuration standard errors): over all
configurations, and over the quarter with the largest scores (q_scale, σ_q = σ_k = q_scale/√d_in, at its top). Errors
are normalised as ``sigprop verify`` normalises them: variances relative, correlations in absolute percentage
points. ``sigprop verify`` reports |error| only, which cannot tell a bias from noise. Written to
docs/results/attention-signed-error.txt.
"""

from __future__ import annotations

import argparse

import numpy as np

from sigprop.verify.harness import run_component
from sigprop.verify.registry import load_spec

QUANTITIES = ("var", "corr", "grad_var", "grad_corr")


def signed(result, quantity: str) -> tuple[np.ndarray, np.ndarray]:
    """Per configuration: the signed error and its standard error, in percent, normalised as the sweep does."""
    pred, meas = result.predicted[quantity], result.measured[quantity]
    scale = np.abs(meas.value) if quantity in ("var", "grad_var") else np.ones_like(meas.value)
    return 100.0 * (pred - meas.value) / scale, 100.0 * meas.se / scale


def line(name: str, err: np.ndarray, se: np.ndarray) -> str:
    """The mean signed error of a set of configurations, ± the standard error of that mean."""
    ok = np.isfinite(err) & np.isfinite(se)
    mean, mean_se = err[ok].mean(), np.sqrt(np.sum(se[ok] ** 2)) / ok.sum()
    return f"  {name:<28} {mean:+.3f} ± {mean_se:.3f}   ({ok.sum()} configurations)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = run_component(load_spec("attention"), seed=args.seed)
    q_scale = result.params["q_scale"]
    top = q_scale >= np.quantile(q_scale, 0.75)
    print(f"attention sweep, seed {args.seed}: mean signed error (closed form − Monte Carlo), % (points for corr)")
    for quantity in QUANTITIES:
        err, se = signed(result, quantity)
        print(quantity)
        print(line("all", err, se))
        print(line(f"q_scale ≥ {q_scale[top].min():.2f} (largest scores)", err[top], se[top]))


if __name__ == "__main__":
    main()
