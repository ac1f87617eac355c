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
