"""Test configuration: one fixed seed for every test (DESIGN.md, "Tests")."""

import numpy as np
import pytest
import torch

SEED = 20240607


@pytest.fixture(autouse=True)
def fixed_seed():
    """Seed torch and numpy identically before every test so that Monte Carlo tests are reproducible."""
    torch.manual_seed(SEED)
    np.random.seed(SEED)  # noqa: NPY002 (seeds any legacy np.random use in tests)
    yield
