"""The sweep shared by the activations (ReLU, GeLU): Table 22's ranges at μ = 0, token pairs through the module."""

from __future__ import annotations

import functools

import numpy as np

from ...core.moments import GradMoments, Moments
from ..spec import ComponentSpec
from ..tokenwise import CHUNK, ELEMENTWISE_HIDDEN, ELEMENTWISE_NOTE, simulate_tokenwise
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params

__all__ = ["activation_predict", "activation_spec"]


def activation_predict(params, forward, backward, approx: str = "exact"):
    """Prediction of an activation's rules ``forward``/``backward`` with the named approximation."""
    mean = params.get("mean", np.zeros_like(params["var"]))
    m = Moments(mean, params["var"], params["corr"])
    g = GradMoments(params["grad_var"], params["grad_corr"])
    return as_quantities(forward(m, approx=approx), backward(g, m, approx=approx))


def activation_spec(name: str, title: str, module_cls, forward, backward, paper: dict,
                    mean_path: str) -> tuple[ComponentSpec, callable]:
    """The spec of an activation and its ``predict(params, approx)`` (for ``sigprop verify --approx``).
    ``mean_path`` says how the rules handle μ ≠ 0 and where that is tested."""
    predict = functools.partial(activation_predict, forward=forward, backward=backward)
    spec = ComponentSpec(
        name=name,
        title=title,
        params=gaussian_input_params(),
        quantities=FORWARD_BACKWARD,
        simulate=lambda params, budget, gen: simulate_tokenwise(module_cls(), params, budget, gen,
                                                                ELEMENTWISE_HIDDEN),
        predict=predict,
        paper=paper,
        max_group=CHUNK,
        note=ELEMENTWISE_NOTE + " Ranges as Table 22: μ = 0, σ² ∈ [0.1, 10], σ²_g ∈ [0.1, 10], r, r_g ∈ [0, 0.99]. "
             "The rules also handle μ ≠ 0 (" + mean_path + ") against quadrature and Monte Carlo on the real module.",
    )
    return spec, predict
