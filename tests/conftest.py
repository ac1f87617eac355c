"""Test configuration: one fixed seed for every test and one intra-op thread (ARCHITECTURE.md, "Tests")."""

import os

import numpy as np
import pytest
import torch

SEED = 20240607


#: The variables that set a fresh process's intra-op threads (PyTorch's OpenMP pool and MKL's).
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Run the tests' small tensors on one intra-op thread: at these sizes extra threads only add synchronisation,
    and on a shared 2-core machine they contend (measured: a 10-layer d=64 forward took 1.5 s with 2 threads
    under load vs 0.02 s with one). The processes a test starts (``sigprop`` commands, torchrun, workers) inherit
    one thread too, through the environment: a tiny training run took 73 s with the default pool under load and
    20 s with one."""
    n = torch.get_num_threads()
    old = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    torch.set_num_threads(1)
    os.environ.update(dict.fromkeys(_THREAD_VARIABLES, "1"))
    yield
    torch.set_num_threads(n)
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def fixed_seed():
    """Seed torch and numpy identically before every test so that Monte Carlo tests are reproducible."""
    torch.manual_seed(SEED)
    np.random.seed(SEED)  # noqa: NPY002 (seeds any legacy np.random use in tests)
    yield
