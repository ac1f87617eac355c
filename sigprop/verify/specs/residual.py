"""Verification sweep of the residual add y = λx + β·Linear(x): checks the rules' independence assumption between
the skip path and a branch that ends in a random zero-mean linear layer (not in Kedia et al. Table 21/22)."""

from __future__ import annotations

import numpy as np
import torch

from ...components.linear import Linear, linear_backward, linear_forward
from ...components.residual import Residual, residual_backward, residual_forward
from ...core.moments import GradMoments, Moments
from ..sampling import column, linear_weights
from ..spec import Param
from .common import as_quantities
from .linear import CHUNK_WEIGHTS, draws_and_rows
from .weighted import weighted_spec


def _sizes(shape, budget):
    return draws_and_rows(int(shape["d"]), int(shape["d"]), budget.scale, budget.replicates)


def _elements(shape, rows):
    """The weights plus the activations (input, output and their gradients) of one draw."""
    d = int(shape["d"])
    return d * d + 8 * rows * d


def _module(params):
    d = int(params["d"][0])
    return Residual(Linear(d, d, bias=False))


def _weights(params, draws, generator, k):
    n, d = len(params["var"]), int(params["d"][0])
    return {
        "branch.weight": linear_weights(n, draws, d, d, np.sqrt(params["weight_gain"] / d), generator, k),
        "lam": column(params["lam"], 2, torch.float32).expand(n, draws),
        "beta": column(params["beta"], 2, torch.float32).expand(n, draws),
    }


def _predict(params):
    m = Moments(params["mean"], params["var"], params["corr"])
    w = params["weight_gain"] / params["d"]
    g = GradMoments(params["grad_var"], params["grad_corr"])
    fwd = residual_forward(m, linear_forward(m, params["d"], w), params["lam"], params["beta"])
    bwd = residual_backward(g, linear_backward(g, params["d"], w), params["lam"], params["beta"])
    return as_quantities(fwd, bwd)


SPEC = weighted_spec(
    "residual", "Residual add λx + β·Linear(x)", _module, _weights, _sizes, _elements, CHUNK_WEIGHTS,
    params=(
        Param("d", 16, 1024, scale="log", levels=7, integer=True, doc="width"),
        Param("weight_gain", 0.1, 10.0, scale="log", doc="σ²_w·d of the branch's linear layer"),
        Param("lam", 0.1, 2.0, doc="skip scale λ"),
        Param("beta", 0.1, 2.0, doc="branch scale β"),
    ),
    shape_params=("d",),
    predict=_predict,
    note="The branch is a random zero-mean linear layer, as at the end of every transformer block; token pairs "
         "and many weight draws per configuration.",
)
