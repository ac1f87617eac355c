"""Verification sweep of the gated linear unit (SwiGLU / GeGLU, :class:`sigprop.components.glu.GLU`; rules
:func:`~sigprop.components.glu.glu_forward` / :func:`~sigprop.components.glu.glu_backward`).

No paper tabulates a GLU, so the ranges are ours, chosen where Llama-style blocks live and the rules are stated to
hold: input at μ = 0 (a norm's output) with σ² ∈ [0.25, 4], the gate's and the up projection's gains σ²·d_in ∈
[0.25, 4] each (so the gate's pre-activation variance s_a = σ²_gate d_in σ² ∈ [1/16, 16], the range the module
docstring states), r, r_g ∈ [0, 0.99], σ²_g ∈ [0.1, 10], d_in ∈ {256, 512, 1024} (the rules assume inputs of one
length: for Gaussian rows the spread of |x|² raises E h² by O(2/d_in), below 1% from 256 up), d_ff ∈ {256, 1024}
and both gates. Simulation: the real module's forward and autograd backward on Gaussian token pairs, many
independent weight draws per configuration (the rules are expectations over the weights), as the linear sweep.
"""

from __future__ import annotations

import numpy as np
import torch

from ...components.glu import GLU, glu_backward, glu_forward
from ...core.moments import GradMoments, Moments
from ..spec import Param
from .common import FORWARD_BACKWARD, as_quantities, correlation_and_gradient_params
from .linear import draws_and_rows
from .weighted import weighted_spec

__all__ = ["SPEC"]

#: Sampled weights per configuration and matrix (full budget), token pairs × d_ff output samples.
WEIGHTS = 2**21
TOKEN_SAMPLES = 2**18
CHUNK_ELEMENTS = 2**24
GATES = ("swiglu", "geglu")


def _sizes(shape, budget):
    return draws_and_rows(int(shape["d_in"]), int(shape["d_ff"]), budget.scale, budget.replicates, WEIGHTS,
                          TOKEN_SAMPLES)


def _elements(shape, rows):
    """The two weight matrices plus the activations and their gradients of one draw."""
    d_in, d_ff = int(shape["d_in"]), int(shape["d_ff"])
    return 2 * d_in * d_ff + 6 * rows * (d_in + d_ff)


def _module(params):
    return GLU(int(params["d_in"][0]), int(params["d_ff"][0]), GATES[int(params["gate"][0])])


def _weights(params, draws, generator, k):
    n, d_in, d_ff = len(params["var"]), int(params["d_in"][0]), int(params["d_ff"][0])

    def draw(gain):
        std = torch.as_tensor(np.sqrt(np.asarray(gain) / d_in), dtype=torch.float32)[:, None, None, None]
        return torch.randn(n, draws, d_in, d_ff, generator=generator) * std

    return {"w_gate": draw(params["gate_gain"]), "w_up": draw(params["up_gain"])}


def _predict(params):
    out = {q: np.empty(len(params["var"])) for q in FORWARD_BACKWARD}
    for gi, gate in enumerate(GATES):
        sel = np.asarray(params["gate"]) == gi
        if not sel.any():
            continue
        p = {key: np.asarray(v)[sel] for key, v in params.items()}
        d_in, d_ff = p["d_in"], p["d_ff"]
        m = Moments(np.zeros_like(p["var"]), p["var"], p["corr"])
        gv, uv = p["gate_gain"] / d_in, p["up_gain"] / d_in
        fwd = glu_forward(m, d_in, gv, uv, gate)
        bwd = glu_backward(GradMoments(p["grad_var"], p["grad_corr"]), m, d_in, d_ff, gv, uv, gate)
        for q, v in as_quantities(fwd, bwd).items():
            out[q][sel] = v
    return out


SPEC = weighted_spec(
    "glu", "Gated linear unit (SwiGLU, GeGLU)", _module, _weights, _sizes, _elements, CHUNK_ELEMENTS,
    inputs=(Param("var", 0.25, 4.0, scale="log", doc="input variance σ² (μ = 0: a norm's output)"),
            *correlation_and_gradient_params()),
    params=(
        Param("gate_gain", 0.25, 4.0, scale="log", doc="σ²_gate·d_in (s_a = gate_gain·σ² ∈ [1/16, 16])"),
        Param("up_gain", 0.25, 4.0, scale="log", doc="σ²_up·d_in"),
        Param("d_in", 256, 1024, values=(256, 512, 1024), doc="input width (O(2/d_in) length-spread bias)"),
        Param("d_ff", 256, 1024, values=(256, 1024), doc="hidden width"),
        Param("gate", 0, 1, values=(0, 1), doc="0: SwiGLU (SiLU gate), 1: GeGLU (GELU gate)"),
    ),
    quantities=("var", "corr", "grad_var", "grad_corr"),
    shape_params=("d_in", "d_ff", "gate"),
    predict=_predict,
    width="d_in",
    n_configs=600,
    quick_configs=48,
    note="No paper row: ranges ours (module docstring). The output mean is exactly 0 (b is zero-mean and independent "
         "of the gate), so it is not swept; token pairs through the real module, many weight draws per "
         "configuration.",
)
