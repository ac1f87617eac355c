"""The Llama-style components' sweeps: SwiGLU / GeGLU against the real module within Student-t × standard error
(32 replicates, two-sided 1e-5), and the rotary grouped-query attention sweep end to end on a few configurations."""

import numpy as np
import pytest
from scipy import stats

from sigprop.verify.harness import ROUNDOFF, run_component
from sigprop.verify.registry import load_spec

REPLICATES = 32
T = stats.t.ppf(1 - 1e-5 / 2, REPLICATES - 1)


def test_glu_rules_within_noise():
    spec = load_spec("glu")
    res = run_component(spec, quick=True, n_configs=12, seed=3, replicates=REPLICATES)
    for q in spec.quantities:
        err, noise = res.errors[q], res.noise[q]
        bad = ~(err <= T * noise + ROUNDOFF)  # NaN is bad too
        assert not bad.any(), (q, err[bad], noise[bad], {k: v[np.flatnonzero(bad)[0]] for k, v in res.params.items()})


@pytest.mark.long
def test_rope_gqa_sweep_runs_and_agrees():
    """Three configurations at the quick budget: every quantity within 5 module standard errors plus the sampled
    rule's own noise (512 heads: ~1% on the variances, ~0.5 points on the correlations)."""
    spec = load_spec("rope_gqa")
    res = run_component(spec, quick=True, n_configs=3, seed=4, replicates=4)
    for q in spec.quantities:
        err, noise = res.errors[q], res.noise[q]
        assert np.all(np.isfinite(err)) and np.all(err <= 5.0 * noise + 2.0), (q, err, noise)
