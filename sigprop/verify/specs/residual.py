"""Verification sweep of the residual add y = λx + β·Linear(x): checks the rules' independence assumption between
the skip path and a branch that ends in a random zero-mean linear layer (not in Kedia et al. Table 21/22)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.func import functional_call, vmap

from ...components.linear import Linear, linear_backward, linear_forward
from ...components.residual import Residual, residual_backward, residual_forward
from ...core.moments import GradMoments, Moments
from ..sampling import column, correlated_gaussian, forward_backward_estimates, linear_weights
from ..spec import ComponentSpec, Param
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params
from .linear import CHUNK_WEIGHTS, TOKEN_SAMPLES, weight_draws


def _draws_rows(d, budget):
    draws = weight_draws(d * d, budget.scale, budget.replicates)
    return draws, max(1, math.ceil(TOKEN_SAMPLES * budget.scale / (2 * d * draws)))


def _max_group(shape, budget):
    d = int(shape["d"])
    draws, rows = _draws_rows(d, budget)
    return CHUNK_WEIGHTS // (draws * (d * d + 8 * rows * d))  # weights + activations and their gradients


def _simulate(params, budget, generator):
    d = int(params["d"][0])
    n, k = len(params["var"]), budget.replicates
    draws, rows = _draws_rows(d, budget)
    block = Residual(Linear(d, d, bias=False))
    state = {
        "branch.weight": linear_weights(n, draws, d, d, np.sqrt(params["weight_gain"] / d), generator, k),
        "lam": column(params["lam"], 2, torch.float32).expand(n, draws),
        "beta": column(params["beta"], 2, torch.float32).expand(n, draws),
    }
    x = correlated_gaussian(n, draws, rows, 2, d, params["mean"], params["var"], params["corr"], generator)
    x.requires_grad_(True)

    def run(s, xi):
        return functional_call(block, s, (xi,))

    y = vmap(vmap(run))(state, x)  # the real Residual(Linear) forward, one weight draw per (config, draw)
    g = correlated_gaussian(n, draws, rows, 2, d, np.zeros(n), params["grad_var"], params["grad_corr"], generator)
    y.backward(g)

    def regroup(t):
        return t.reshape(n, k, (draws // k) * rows, 2, d)

    return forward_backward_estimates(regroup(y.detach()), regroup(x.grad))


def _predict(params):
    m = Moments(params["mean"], params["var"], params["corr"])
    w = params["weight_gain"] / params["d"]
    g = GradMoments(params["grad_var"], params["grad_corr"])
    fwd = residual_forward(m, linear_forward(m, params["d"], w), params["lam"], params["beta"])
    bwd = residual_backward(g, linear_backward(g, params["d"], w), params["lam"], params["beta"])
    return as_quantities(fwd, bwd)


SPEC = ComponentSpec(
    name="residual",
    title="Residual add λx + β·Linear(x)",
    params=gaussian_input_params(mean=(-10.0, 10.0)) + (
        Param("d", 16, 1024, scale="log", levels=7, integer=True, doc="width"),
        Param("weight_gain", 0.1, 10.0, scale="log", doc="σ²_w·d of the branch's linear layer"),
        Param("lam", 0.1, 2.0, doc="skip scale λ"),
        Param("beta", 0.1, 2.0, doc="branch scale β"),
    ),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=_predict,
    shape_params=("d",),
    max_group=_max_group,
    note="The branch is a random zero-mean linear layer, as at the end of every transformer block; token pairs "
         "and many weight draws per configuration.",
)
