"""Verification sweep of the pre-norm attention block LayerNorm → multi-head attention → projection → dropout:
the composition of the component rules against the real block, on whole sequences (Kedia et al. App. B.1; not in
Table 21/22). Plain Monte Carlo over independent weight draws and sequences: no variance reduction."""

from __future__ import annotations

import math

import numpy as np
from torch.func import functional_call, vmap

from ...components.attention_block import AttentionBlock
from ..sampling import correlated_gaussian, forward_backward_estimates, linear_weights
from ..spec import ComponentSpec, Param
from .common import FORWARD_BACKWARD, gaussian_input_params, predict_each

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


def _max_group(shape, budget):
    d, length = int(shape["d"]), int(shape["seq_len"])
    draws, seqs = _batch(d, length, budget)
    return CHUNK_ELEMENTS // (draws * (4 * d * d + 6 * seqs * length * d + seqs * length * length))


def _simulate(params, budget, generator):
    d, h, length = _shape(params)
    n, k = len(params["var"]), budget.replicates
    draws, seqs = _batch(d, length, budget)
    block = _block(params).train()
    dh = d // h
    weights = {
        "attn.w_q": linear_weights(n, draws, d, h * dh, np.sqrt(params["qk_gain"] / d), generator, k, False),
        "attn.w_k": linear_weights(n, draws, d, h * dh, np.sqrt(params["qk_gain"] / d), generator, k, False),
        "attn.w_v": linear_weights(n, draws, d, h * dh, np.sqrt(params["v_gain"] / d), generator, k),
        "proj.weight": linear_weights(n, draws, d, h * dh, np.sqrt(params["o_gain"] / d), generator, k),
    }
    weights["attn.w_q"] = weights["attn.w_q"].transpose(-1, -2)  # MultiHeadAttention stores (d_in, H·d_head)
    weights["attn.w_k"] = weights["attn.w_k"].transpose(-1, -2)
    weights["attn.w_v"] = weights["attn.w_v"].transpose(-1, -2)
    x = correlated_gaussian(n, draws, seqs, length, d, params["mean"], params["var"], params["corr"], generator)
    x.requires_grad_(True)

    def run(w, xi):
        return functional_call(block, w, (xi,))

    y = vmap(vmap(run, randomness="different"), randomness="different")(weights, x)
    g = correlated_gaussian(n, draws, seqs, length, d, np.zeros(n), params["grad_var"], params["grad_corr"],
                            generator)
    y.backward(g)

    def regroup(t):
        return t.reshape(n, k, (draws // k) * seqs, length, d)

    return forward_backward_estimates(regroup(y.detach()), regroup(x.grad))


def _predict(params):
    return predict_each(params, lambda prm, i: (_block(prm, i), {"L": _shape(prm, i)[2]}))


SPEC = ComponentSpec(
    name="attention_block",
    title="Attention block (pre-LayerNorm)",
    params=gaussian_input_params(mean=(-10.0, 10.0)) + (
        Param("d", 32, 128, scale="log", levels=3, integer=True, doc="model width d = heads × d_head"),
        Param("heads", 1, 4, values=(1.0, 4.0), doc="number of heads"),
        Param("seq_len", 32, 256, scale="log", levels=4, integer=True, doc="sequence length L"),
        Param("p", 0.0, 0.5, levels=6, doc="dropout after the projection"),
        Param("qk_gain", 0.01, 0.36, scale="log", doc="σ²_q·d = σ²_k·d (Kedia's code: σ_q√d ∈ [0.1, 0.6])"),
        Param("v_gain", 0.3, 3.0, scale="log", doc="σ²_v·d"),
        Param("o_gain", 0.3, 3.0, scale="log", doc="σ²_o·d"),
    ),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=_predict,
    shape_params=("d", "heads", "seq_len", "p"),
    max_group=_max_group,
    n_configs=1024,
    note="Whole sequences through the real block (LayerNorm, SDPA multi-head attention, projection, dropout), "
         "32 independent weight draws per configuration; predictions walk the block's children with their rules. "
         "Dropout on the attention probabilities is left at 0 here (vmap cannot draw SDPA's dropout per weight "
         "draw); the attention and mha sweeps cover it.",
)
