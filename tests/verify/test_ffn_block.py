"""The FFN block's composed rules (LayerNorm → Linear → activation → Linear → Dropout) against the real block:
every configuration of a small sweep within Student-t × standard error (32 replicates, two-sided 1e-5)."""

import numpy as np
from scipy import stats

from sigprop.verify.harness import ROUNDOFF, run_component
from sigprop.verify.registry import load_spec

REPLICATES = 32
T = stats.t.ppf(1 - 1e-5 / 2, REPLICATES - 1)


def test_ffn_block_composition_within_noise():
    spec = load_spec("ffn_block")
    res = run_component(spec, quick=True, n_configs=12, seed=2, replicates=REPLICATES)
    for q in spec.quantities:
        err, noise = res.errors[q], res.noise[q]
        bad = ~(err <= T * noise + ROUNDOFF)  # NaN is bad too
        assert not bad.any(), (q, err[bad], noise[bad], {k: v[np.flatnonzero(bad)[0]] for k, v in res.params.items()})
