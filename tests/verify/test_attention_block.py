"""The attention block's composed rules against the real block on whole sequences (tier 4 on one block).

Plain Monte Carlo at 4x the sweep budget on a few configurations; tolerance t x standard error from 8 replicates
(Student t, two-sided 1e-4 per assertion).
"""

import warnings

import numpy as np
import torch
from scipy import stats

from sigprop.verify.spec import Budget
from sigprop.verify.specs.attention_block import SPEC

T = stats.t.ppf(1 - 1e-4 / 2, 7)


def test_attention_block_composition_matches_real_block():
    params = {k: np.array(v, dtype=np.float64) for k, v in {
        "mean": [0.0, 3.0], "var": [1.0, 0.5], "corr": [0.2, 0.6], "grad_var": [1.0, 2.0], "grad_corr": [0.3, 0.0],
        "d": [64, 64], "heads": [4, 4], "seq_len": [64, 64], "p": [0.1, 0.1], "qk_gain": [0.3, 0.1],
        "v_gain": [1.0, 2.0], "o_gain": [1.0, 0.5]}.items()}
    pred = SPEC.predict(params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # vmap falls back to a loop for SDPA on CPU
        est = SPEC.simulate(params, Budget(scale=4.0), torch.Generator().manual_seed(5))
    for q in SPEC.quantities:
        diff = np.abs(pred[q] - est[q].value)
        assert np.all(diff <= T * est[q].se + 1e-9), (q, pred[q], est[q].value, est[q].se)

