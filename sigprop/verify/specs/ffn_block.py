"""Verification sweep of the pre-norm FFN block LayerNorm → Linear(d, 4d) → act → Linear(4d, d) → dropout: the
composition of the component rules against the real block (Kedia et al. App. B.2; not in Table 21/22)."""

from __future__ import annotations

import math

import numpy as np

from ...components.ffn import FFNBlock
from ..sampling import linear_weights
from ..spec import Param
from .common import predict_each
from .linear import CHUNK_WEIGHTS, draws_and_rows
from .weighted import weighted_spec

ACTIVATION = {0.0: "relu", 1.0: "gelu"}


def _block(params, i: int = 0) -> FFNBlock:
    d = int(params["d"][i])
    return FFNBlock(d, 4 * d, activation=ACTIVATION[float(params["act"][i])], p=float(params["p"][i]),
                    w1_std=1.0, w2_std=1.0)


def _sizes(shape, budget):
    return draws_and_rows(int(shape["d"]), 4 * int(shape["d"]), budget.scale, budget.replicates)


def _elements(shape, rows):
    """The weights plus the activations and their gradients of one draw."""
    d = int(shape["d"])
    return 8 * d * d + 8 * rows * d


def _weights(params, draws, generator, k):
    n, d = len(params["var"]), int(params["d"][0])
    return {
        "fc1.weight": linear_weights(n, draws, 4 * d, d, np.sqrt(params["w1_gain"] / d), generator, k),
        "fc2.weight": linear_weights(n, draws, d, 4 * d, np.sqrt(params["w2_gain"] / (4 * d)), generator, k),
    }


def _build(params, i):
    block = _block(params, i)
    d = int(params["d"][i])
    block.fc1.weight_std = math.sqrt(params["w1_gain"][i] / d)
    block.fc2.weight_std = math.sqrt(params["w2_gain"][i] / (4 * d))
    return block, {}


def _predict(params):
    return predict_each(params, _build)


SPEC = weighted_spec(
    "ffn_block", "FFN block (pre-LayerNorm)", lambda prm: _block(prm).train(), _weights, _sizes, _elements,
    CHUNK_WEIGHTS,
    params=(
        Param("d", 16, 256, scale="log", levels=5, integer=True, doc="model width d (d_ff = 4d)"),
        Param("act", 0, 1, values=(0.0, 1.0), doc="activation: 0 = ReLU, 1 = GeLU"),
        Param("p", 0.0, 0.9, levels=10, doc="dropout probability"),
        Param("w1_gain", 0.1, 10.0, scale="log", doc="σ²_w1·d"),
        Param("w2_gain", 0.1, 10.0, scale="log", doc="σ²_w2·4d"),
    ),
    shape_params=("d", "act", "p"),
    predict=_predict,
    n_configs=1200,
    note="Predictions walk the block's children (LayerNorm, Linear, activation, Linear, Dropout) with their rules; "
         "token pairs, many weight draws per configuration.",
)
