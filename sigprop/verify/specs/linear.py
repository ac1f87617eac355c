"""Verification sweep of the linear layer (Kedia et al. App. A.2; Table 22 row "FFN")."""

from __future__ import annotations

import math

import numpy as np
from torch.func import functional_call, vmap

from ...components.linear import Linear, linear_backward, linear_forward
from ...core.moments import GradMoments, Moments
from ..sampling import correlated_gaussian, forward_backward_estimates, linear_weights
from ..spec import ComponentSpec, Param
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params

#: Full-budget targets per configuration: sampled weights (the squared row norms of W fluctuate with relative
#: standard error sqrt(2/weights)) and token pairs × min(d_in, d_out) (input- and output-side samples). The per-row
#: sums that carry an input mean are stratified (:func:`~sigprop.verify.sampling.linear_weights`), so they need no
#: extra draws.
WEIGHTS = 2**18
TOKEN_SAMPLES = 2**17
#: Bound on the elements held at once (weights plus activations and gradients) when configurations share a tensor.
CHUNK_WEIGHTS = 2**24


def weight_draws(weights_per_draw: int, scale: float, replicates: int) -> int:
    """Independent weight draws per configuration: enough for :data:`WEIGHTS` sampled weights, at least one per
    replicate, a multiple of ``replicates``."""
    draws = max(replicates, math.ceil(WEIGHTS * scale / weights_per_draw))
    return replicates * math.ceil(draws / replicates)


def draws_and_rows(d_in: int, d_out: int, scale: float, replicates: int) -> tuple[int, int]:
    """Independent weight matrices per configuration (a multiple of ``replicates``) and token pairs per matrix."""
    draws = weight_draws(d_in * d_out, scale, replicates)
    rows = max(1, math.ceil(TOKEN_SAMPLES * scale / (2 * min(d_in, d_out) * draws)))
    return draws, rows


def max_group(shape: dict, budget) -> int:
    """Configurations per tensor such that sampled weights plus activations (input, output and their gradients)
    stay below :data:`CHUNK_WEIGHTS` elements."""
    d_in, d_out = int(shape["d_in"]), int(shape["d_out"])
    draws, rows = draws_and_rows(d_in, d_out, budget.scale, budget.replicates)
    per_config = draws * (d_in * d_out + 4 * rows * (d_in + d_out))
    return CHUNK_WEIGHTS // per_config


def _simulate(params, budget, generator):
    d_in, d_out = int(params["d_in"][0]), int(params["d_out"][0])
    draws, rows = draws_and_rows(d_in, d_out, budget.scale, budget.replicates)
    return _simulate_chunk(params, d_in, d_out, draws, rows, budget.replicates, generator)


def _simulate_chunk(params, d_in, d_out, draws, rows, k, generator):
    n = len(params["var"])
    layer = Linear(d_in, d_out, bias=False)
    weights = linear_weights(n, draws, d_out, d_in, np.sqrt(_weight_var(params)), generator, k)
    x = correlated_gaussian(n, draws, rows, 2, d_in, params["mean"], params["var"], params["corr"], generator)
    x.requires_grad_(True)

    def run(w, xi):
        return functional_call(layer, {"weight": w}, (xi,))

    y = vmap(vmap(run))(weights, x)  # the real nn.Linear forward, one weight draw per (config, draw)
    g = correlated_gaussian(n, draws, rows, 2, d_out, np.zeros(n), params["grad_var"], params["grad_corr"],
                            generator)
    y.backward(g)

    def regroup(t):  # (C, draws, rows, 2, d) -> (C, K, draws/K * rows, 2, d): replicates of whole weight draws
        return t.reshape(n, k, (draws // k) * rows, 2, t.shape[-1])

    return forward_backward_estimates(regroup(y.detach()), regroup(x.grad))


def _weight_var(params):
    return params["weight_gain"] / params["d_in"]


def _predict(params):
    m = Moments(params["mean"], params["var"], params["corr"])
    fwd = linear_forward(m, params["d_in"], _weight_var(params))
    bwd = linear_backward(GradMoments(params["grad_var"], params["grad_corr"]), params["d_out"], _weight_var(params))
    return as_quantities(fwd, bwd)


SPEC = ComponentSpec(
    name="linear",
    title="Linear",
    params=gaussian_input_params(mean=(-10.0, 10.0)) + (
        Param("d_in", 10, 1000, scale="log", levels=7, integer=True, doc="input width (Table 22: [10, 1000])"),
        Param("d_out", 10, 1000, scale="log", levels=7, integer=True, doc="output width (Table 22: [10, 1000])"),
        Param("weight_gain", 1e-2, 1e2, scale="log", doc="σ²_w·d_in (Table 22: σ²_w ∈ [1e-2, 1e2]/d_in)"),
    ),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=_predict,
    shape_params=("d_in", "d_out"),
    max_group=max_group,
    paper={"mean": (0.0, 0.4, 1.3), "var": (0.4, 1.4, 2.8), "grad_var": (0.2, 1.0, 2.2), "corr": (0.4, 1.4, 2.8),
           "grad_corr": (0.2, 1.0, 2.2)},
    note="A linear map acts on each token separately, so Table 22's sequence length L does not enter its rules; the "
         "sweep draws token pairs and many independent weight matrices per configuration (the rules are "
         "expectations over the weight ensemble).",
)
