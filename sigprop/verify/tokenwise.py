"""Shared simulation of a component that acts on each token separately (elementwise maps, normalisers):
Gaussian token pairs in, correlated Gaussian output gradients back, through the real module."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .sampling import correlated_gaussian, forward_backward_estimates
from .spec import Budget, Estimate

__all__ = ["simulate_tokenwise", "ELEMENTWISE_NOTE", "ELEMENTWISE_HIDDEN", "ELEMENTS_PER_REPLICATE", "CHUNK"]

#: Hidden width of the token pairs drawn for an elementwise map (any width gives the same expectations).
ELEMENTWISE_HIDDEN = 256

#: Elements per replicate and configuration at full budget (8 replicates: 2^19 ≈ 5.2e5 elements per configuration).
ELEMENTS_PER_REPLICATE = 2**16

#: Configurations simulated per tensor (a spec's ``max_group``). With ~5e5 elements per configuration the per-call
#: overhead is already negligible, and larger tensors fall out of cache: 4 per tensor was fastest for the elementwise
#: maps (relu, dyt: ~2x faster than 16); dropout gains a little from larger tensors, layernorm hardly changes
#: (bench/bench_verify.py; docs/results/performance.md).
CHUNK = 4

ELEMENTWISE_NOTE = (
    "An elementwise map sees one element at a time, so the sequence length L and width d of Table 22 do not enter "
    "its rules; the sweep draws independent token pairs (T = 2), which estimates the same expectations with the "
    "least Monte Carlo noise per element."
)


def simulate_tokenwise(apply: Callable[[torch.Tensor], torch.Tensor], params: dict, budget: Budget,
                       generator: torch.Generator, hidden: int, dtype=torch.float32,
                       elements: int = ELEMENTS_PER_REPLICATE) -> dict[str, Estimate]:
    """Push Gaussian token pairs (C, K, batch, 2, hidden) with per-configuration (mean, var, corr) through
    ``apply`` (the real module; per-configuration parameters broadcast over the leading dimension), back-propagate
    Gaussian output gradients with (grad_var, grad_corr), independent of the input, and estimate output and
    input-gradient moments with standard errors, for all configurations of the batch as one tensor.

    ``params`` needs arrays ``var``, ``corr``, ``grad_var``, ``grad_corr`` (missing ``mean`` → 0). ``elements`` is
    the number of elements per replicate and configuration at full budget (token pairs = elements / (2·hidden)).
    """
    n = len(params["var"])
    k = budget.replicates
    batch = max(1, round(budget.samples(elements) / (2 * hidden)))
    mean = params.get("mean", np.zeros(n))
    x = correlated_gaussian(n, k, batch, 2, hidden, mean, params["var"], params["corr"], generator, dtype)
    x.requires_grad_(True)
    y = apply(x)
    g = correlated_gaussian(n, k, batch, 2, hidden, np.zeros(n), params["grad_var"], params["grad_corr"],
                            generator, dtype)
    y.backward(g)
    return forward_backward_estimates(y.detach(), x.grad)
