"""Shared simulation of an elementwise component: token pairs in, correlated output gradients back."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .sampling import correlated_gaussian, forward_backward_estimates
from .spec import Budget, Estimate

__all__ = ["simulate_elementwise", "ELEMENTWISE_NOTE", "PAIRS_PER_REPLICATE"]

#: Token pairs per replicate at full budget (8 replicates: ~2.6e5 pairs, 5.2e5 elements per configuration).
PAIRS_PER_REPLICATE = 2**15
_HIDDEN = 256

ELEMENTWISE_NOTE = (
    "An elementwise map sees one element at a time, so the sequence length L and width d of Table 22 do not enter "
    "its rules; the sweep draws independent token pairs (T = 2), which estimates the same expectations with the "
    "least Monte Carlo noise per element."
)


def simulate_elementwise(apply: Callable[[torch.Tensor], torch.Tensor], params: dict, budget: Budget,
                         generator: torch.Generator, dtype=torch.float32) -> dict[str, Estimate]:
    """Push Gaussian token pairs with per-configuration (mean, var, corr) through ``apply`` (the real module, whose
    parameters broadcast over the leading configuration dimension), back-propagate Gaussian output gradients with
    (grad_var, grad_corr), and estimate output and input-gradient moments with standard errors.

    ``params`` needs arrays ``mean``, ``var``, ``corr``, ``grad_var``, ``grad_corr`` (missing mean → 0).
    """
    n = len(params["var"])
    k = budget.replicates
    pairs = budget.samples(PAIRS_PER_REPLICATE, minimum=_HIDDEN)
    batch = max(1, pairs // _HIDDEN)
    mean = params.get("mean", np.zeros(n))
    x = correlated_gaussian(n, k, batch, 2, _HIDDEN, mean, params["var"], params["corr"], generator, dtype)
    x.requires_grad_(True)
    y = apply(x)
    g = correlated_gaussian(n, k, batch, 2, _HIDDEN, np.zeros(n), params["grad_var"], params["grad_corr"],
                            generator, dtype)
    y.backward(g)
    return forward_backward_estimates(y.detach(), x.grad)
