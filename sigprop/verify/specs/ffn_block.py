"""Verification sweep of the pre-norm FFN block LayerNorm → Linear(d, 4d) → act → Linear(4d, d) → dropout: the
composition of the component rules against the real block (Kedia et al. App. B.2; not in Table 21/22)."""

from __future__ import annotations

import math

import numpy as np
from torch.func import functional_call, vmap

from ...components.ffn import FFNBlock
from ..sampling import correlated_gaussian, forward_backward_estimates, linear_weights
from ..spec import ComponentSpec, Param
from .common import FORWARD_BACKWARD, gaussian_input_params, predict_each
from .linear import CHUNK_WEIGHTS, weight_draws

#: Token pairs × d per configuration at full budget (weight draws: see linear.weight_draws).
TOKEN_SAMPLES = 2**17
ACTIVATION = {0.0: "relu", 1.0: "gelu"}


def _block(params, i: int = 0) -> FFNBlock:
    d = int(params["d"][i])
    return FFNBlock(d, 4 * d, activation=ACTIVATION[float(params["act"][i])], p=float(params["p"][i]),
                    w1_std=1.0, w2_std=1.0)


def _draws_rows(d, budget):
    draws = weight_draws(4 * d * d, budget.scale, budget.replicates)
    return draws, max(1, math.ceil(TOKEN_SAMPLES * budget.scale / (2 * d * draws)))


def _max_group(shape, budget):
    d = int(shape["d"])
    draws, rows = _draws_rows(d, budget)
    return CHUNK_WEIGHTS // (draws * (8 * d * d + 8 * rows * d))  # weights + activations and their gradients


def _simulate(params, budget, generator):
    d = int(params["d"][0])
    n, k = len(params["var"]), budget.replicates
    draws, rows = _draws_rows(d, budget)
    block = _block(params).train()
    weights = {
        "fc1.weight": linear_weights(n, draws, 4 * d, d, np.sqrt(params["w1_gain"] / d), generator, k),
        "fc2.weight": linear_weights(n, draws, d, 4 * d, np.sqrt(params["w2_gain"] / (4 * d)), generator, k),
    }
    x = correlated_gaussian(n, draws, rows, 2, d, params["mean"], params["var"], params["corr"], generator)
    x.requires_grad_(True)

    def run(w, xi):
        return functional_call(block, w, (xi,))

    # The real block's forward, one weight draw per (config, draw); dropout masks differ per draw.
    y = vmap(vmap(run, randomness="different"), randomness="different")(weights, x)
    g = correlated_gaussian(n, draws, rows, 2, d, np.zeros(n), params["grad_var"], params["grad_corr"], generator)
    y.backward(g)

    def regroup(t):
        return t.reshape(n, k, (draws // k) * rows, 2, d)

    return forward_backward_estimates(regroup(y.detach()), regroup(x.grad))


def _build(params, i):
    block = _block(params, i)
    d = int(params["d"][i])
    block.fc1.weight_std = math.sqrt(params["w1_gain"][i] / d)
    block.fc2.weight_std = math.sqrt(params["w2_gain"][i] / (4 * d))
    return block, {}


def _predict(params):
    return predict_each(params, _build)


SPEC = ComponentSpec(
    name="ffn_block",
    title="FFN block (pre-LayerNorm)",
    params=gaussian_input_params(mean=(-10.0, 10.0)) + (
        Param("d", 16, 256, scale="log", levels=5, integer=True, doc="model width d (d_ff = 4d)"),
        Param("act", 0, 1, values=(0.0, 1.0), doc="activation: 0 = ReLU, 1 = GeLU"),
        Param("p", 0.0, 0.9, levels=10, doc="dropout probability"),
        Param("w1_gain", 0.1, 10.0, scale="log", doc="σ²_w1·d"),
        Param("w2_gain", 0.1, 10.0, scale="log", doc="σ²_w2·4d"),
    ),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=_predict,
    shape_params=("d", "act", "p"),
    max_group=_max_group,
    n_configs=1200,
    note="Predictions walk the block's children (LayerNorm, Linear, activation, Linear, Dropout) with their rules; "
         "token pairs, many weight draws per configuration.",
)
