"""Tier 3 for the exact rules (dropout, linear, residual, embedding): every configuration of a small sweep over
Table 22's ranges agrees with Monte Carlo on the real module within t × standard error.

The standard errors come from 32 independent replicates per configuration; t is Student's quantile for a two-sided
false-alarm rate of 1e-5 per assertion. A floor of harness.ROUNDOFF percent covers float32 round-off.
"""

import numpy as np
import pytest
from scipy import stats

from sigprop.verify.harness import ROUNDOFF, run_component
from sigprop.verify.registry import load_spec

REPLICATES = 32
T = stats.t.ppf(1 - 1e-5 / 2, REPLICATES - 1)


@pytest.mark.parametrize("name", ["dropout", "linear", "residual", "embedding"])
def test_exact_rule_within_noise(name):
    spec = load_spec(name)
    res = run_component(spec, quick=True, n_configs=12, seed=1, replicates=REPLICATES)
    for q in spec.quantities:
        err, noise = res.errors[q], res.noise[q]
        bad = ~(err <= T * noise + ROUNDOFF)  # NaN is bad too
        assert not bad.any(), (
            f"{name}.{q}: error {err[bad][0]:.3g}% > {T:.2f} x noise {noise[bad][0]:.3g}% at "
            f"{ {k: float(v[np.flatnonzero(bad)[0]]) for k, v in res.params.items()} }")
