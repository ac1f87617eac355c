"""Verification sweep of the linear layer (Kedia et al. App. A.2; Table 22 row "FFN")."""

from __future__ import annotations

import math

import numpy as np

from ...components.linear import Linear, linear_backward, linear_forward
from ...core.moments import GradMoments, Moments
from ..sampling import linear_weights
from ..spec import Param
from .common import as_quantities
from .weighted import weighted_spec

#: Full-budget targets per configuration: sampled weights (the squared row norms of W fluctuate with relative
#: standard error sqrt(2/weights)) and token pairs × min(d_in, d_out) (input- and output-side samples). The per-row
#: sums that carry an input mean are stratified (:func:`~sigprop.verify.sampling.linear_weights`), so they need no
#: extra draws.
WEIGHTS = 2**18
TOKEN_SAMPLES = 2**17
#: Bound on the elements held at once (weights plus activations and gradients) when configurations share a tensor.
CHUNK_WEIGHTS = 2**24


def weight_draws(weights_per_draw: int, scale: float, replicates: int, weights: int = WEIGHTS) -> int:
    """Independent weight draws per configuration: enough for ``weights`` sampled weights, at least one per
    replicate, a multiple of ``replicates``."""
    draws = max(replicates, math.ceil(weights * scale / weights_per_draw))
    return replicates * math.ceil(draws / replicates)


def draws_and_rows(d_in: int, d_out: int, scale: float, replicates: int, weights: int = WEIGHTS,
                   token_samples: int = TOKEN_SAMPLES) -> tuple[int, int]:
    """Independent weight matrices per configuration (a multiple of ``replicates``, enough for ``weights`` sampled
    weights) and token pairs per matrix (``token_samples`` token pairs × min(d_in, d_out) at full budget)."""
    draws = weight_draws(d_in * d_out, scale, replicates, weights)
    rows = max(1, math.ceil(token_samples * scale / (2 * min(d_in, d_out) * draws)))
    return draws, rows


def _sizes(shape: dict, budget) -> tuple[int, int]:
    return draws_and_rows(int(shape["d_in"]), int(shape["d_out"]), budget.scale, budget.replicates)


def _elements(shape: dict, rows: int) -> int:
    """The weights plus the activations (input, output and their gradients) of one draw."""
    d_in, d_out = int(shape["d_in"]), int(shape["d_out"])
    return d_in * d_out + 4 * rows * (d_in + d_out)


def _weights(params, draws, generator, k):
    d_in, d_out = int(params["d_in"][0]), int(params["d_out"][0])
    return {"weight": linear_weights(len(params["var"]), draws, d_out, d_in, np.sqrt(_weight_var(params)), generator,
                                     k)}


def _weight_var(params):
    return params["weight_gain"] / params["d_in"]


def _predict(params):
    m = Moments(params["mean"], params["var"], params["corr"])
    fwd = linear_forward(m, params["d_in"], _weight_var(params))
    bwd = linear_backward(GradMoments(params["grad_var"], params["grad_corr"]), params["d_out"], _weight_var(params))
    return as_quantities(fwd, bwd)


SPEC = weighted_spec(
    "linear", "Linear", lambda prm: Linear(int(prm["d_in"][0]), int(prm["d_out"][0]), bias=False), _weights, _sizes,
    _elements, CHUNK_WEIGHTS,
    params=(
        Param("d_in", 10, 1000, scale="log", levels=7, integer=True, doc="input width (Table 22: [10, 1000])"),
        Param("d_out", 10, 1000, scale="log", levels=7, integer=True, doc="output width (Table 22: [10, 1000])"),
        Param("weight_gain", 1e-2, 1e2, scale="log", doc="σ²_w·d_in (Table 22: σ²_w ∈ [1e-2, 1e2]/d_in)"),
    ),
    shape_params=("d_in", "d_out"),
    predict=_predict,
    width="d_in",
    paper={"mean": (0.0, 0.4, 1.3), "var": (0.4, 1.4, 2.8), "grad_var": (0.2, 1.0, 2.2), "corr": (0.4, 1.4, 2.8),
           "grad_corr": (0.2, 1.0, 2.2)},
    note="A linear map acts on each token separately, so Table 22's sequence length L does not enter its rules; the "
         "sweep draws token pairs and many independent weight matrices per configuration (the rules are "
         "expectations over the weight ensemble).",
)
