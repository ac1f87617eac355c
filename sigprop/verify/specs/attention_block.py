"""Verification sweep of the pre-norm attention block LayerNorm → multi-head attention → projection → dropout:
the composition of the component rules against the real block, on whole sequences (Kedia et al. App. B.1; not in
Table 21/22). Plain Monte Carlo over independent weight draws and sequences: no variance reduction."""

from __future__ import annotations

import math

import numpy as np

from ...components.attention_block import AttentionBlock
from ..sampling import linear_weights
from ..spec import Param
from .common import predict_each
from .weighted import weighted_spec

#: Full budget per configuration: output elements, and independent weight draws (a multiple of the replicates).
ELEMENTS = 2**19
DRAWS = 32
CHUNK_ELEMENTS = 2**23


def _shape(params, i=0):
    return int(params["d"][i]), int(params["heads"][i]), int(params["seq_len"][i])


def _block(params, i=0) -> AttentionBlock:
    d, h, _ = _shape(params, i)
    return AttentionBlock(d, h, p=float(params["p"][i]), attn_dropout=0.0,
                          sigma_q=math.sqrt(params["qk_gain"][i] / d), sigma_k=math.sqrt(params["qk_gain"][i] / d),
                          sigma_v=math.sqrt(params["v_gain"][i] / d), sigma_o=math.sqrt(params["o_gain"][i] / d))


def _batch(d, length, budget):
    draws = budget.replicates * max(1, round(DRAWS * budget.scale / budget.replicates))
    return draws, max(1, math.ceil(ELEMENTS * budget.scale / (draws * length * d)))


def _sizes(shape, budget):
    return _batch(int(shape["d"]), int(shape["seq_len"]), budget)


def _elements(shape, seqs):
    """The weights plus the activations, the attention scores and their gradients of one draw."""
    d, length = int(shape["d"]), int(shape["seq_len"])
    return 4 * d * d + 6 * seqs * length * d + seqs * length * length


def _weights(params, draws, generator, k):
    d, h, _ = _shape(params)
    n, dh = len(params["var"]), d // h
    weights = {
        "attn.w_q": linear_weights(n, draws, d, h * dh, np.sqrt(params["qk_gain"] / d), generator, k, False),
        "attn.w_k": linear_weights(n, draws, d, h * dh, np.sqrt(params["qk_gain"] / d), generator, k, False),
        "attn.w_v": linear_weights(n, draws, d, h * dh, np.sqrt(params["v_gain"] / d), generator, k),
        "proj.weight": linear_weights(n, draws, d, h * dh, np.sqrt(params["o_gain"] / d), generator, k),
    }
    weights["attn.w_q"] = weights["attn.w_q"].transpose(-1, -2)  # MultiHeadAttention stores (d_in, H·d_head)
    weights["attn.w_k"] = weights["attn.w_k"].transpose(-1, -2)
    weights["attn.w_v"] = weights["attn.w_v"].transpose(-1, -2)
    return weights


def _predict(params):
    return predict_each(params, lambda prm, i: (_block(prm, i), {"L": _shape(prm, i)[2]}))


SPEC = weighted_spec(
    "attention_block", "Attention block (pre-LayerNorm)", lambda prm: _block(prm).train(), _weights, _sizes,
    _elements, CHUNK_ELEMENTS,
    params=(
        Param("d", 32, 128, scale="log", levels=3, integer=True, doc="model width d = heads × d_head"),
        Param("heads", 1, 4, values=(1.0, 4.0), doc="number of heads"),
        Param("seq_len", 32, 256, scale="log", levels=4, integer=True, doc="sequence length L"),
        Param("p", 0.0, 0.5, levels=6, doc="dropout after the projection"),
        Param("qk_gain", 0.01, 0.36, scale="log", doc="σ²_q·d = σ²_k·d (Kedia's code: σ_q√d ∈ [0.1, 0.6])"),
        Param("v_gain", 0.3, 3.0, scale="log", doc="σ²_v·d"),
        Param("o_gain", 0.3, 3.0, scale="log", doc="σ²_o·d"),
    ),
    shape_params=("d", "heads", "seq_len", "p"),
    predict=_predict,
    tokens="seq_len",
    n_configs=1024,
    note="Whole sequences through the real block (LayerNorm, SDPA multi-head attention, projection, dropout), "
         "32 independent weight draws per configuration; predictions walk the block's children with their rules. "
         "Dropout on the attention probabilities is left at 0 here (vmap cannot draw SDPA's dropout per weight "
         "draw); the attention and mha sweeps cover it.",
)
