"""sigprop.verify.registry: the default sweep is the stored table's, the costly components run when named."""

from __future__ import annotations

import json
from pathlib import Path

from sigprop.verify.registry import ON_REQUEST, available
from sigprop.verify.run import resolve_components

STORED = Path(__file__).resolve().parents[2] / "docs" / "results" / "verify-full.json"


def test_the_default_sweep_is_the_stored_full_sweep_s_components_and_the_others_run_when_named():
    assert resolve_components(None) == list(json.loads(STORED.read_text())["components"])
    assert set(available()) - set(resolve_components(None)) == set(ON_REQUEST)
    assert resolve_components(list(ON_REQUEST)) == list(ON_REQUEST)


def test_a_simulator_with_a_fixed_number_of_replicates_refuses_another():
    """attention and mha draw two long sequences per configuration whatever was asked: 32 asked was silently 2."""
    import pytest

    from sigprop.verify.harness import run_component
    from sigprop.verify.registry import load_spec

    with pytest.raises(ValueError, match="draws 2 replicates"):
        run_component(load_spec("attention"), quick=True, n_configs=1, replicates=32)


def test_quick_takes_fewer_samples_in_the_multi_head_spec(monkeypatch):
    """``--quick`` promises fewer samples; the multi-head spec ignored its budget and drew the same rows."""
    import numpy as np
    import torch

    from sigprop.verify.spec import Budget
    from sigprop.verify.specs import mha

    params = {k: np.array([v], dtype=float) for k, v in dict(q_scale=0.3, v_scale=1.0, corr=0.5, grad_var=1.0,
                                                              grad_corr=0.3, p=0.0, n_heads=1, d_head=16, d_in=32,
                                                              L=300).items()}
    rows = []
    original = mha.simulate_mha

    def counting(prm, replicates, generator, nq_max=mha.N_QUERIES, **kwargs):
        rows.append(nq_max)
        return original(prm, replicates, generator, nq_max=nq_max, **kwargs)

    monkeypatch.setattr(mha, "simulate_mha", counting)
    for scale in (mha.SPEC.quick_scale, 1.0):
        mha.SPEC.simulate(params, Budget(scale=scale), torch.Generator().manual_seed(0))
    assert rows[0] < rows[1] == mha.N_QUERIES
