"""Verification sweep of ReLU (Kedia et al. App. A.4; ranges of Table 22, paper errors of Table 21)."""

from __future__ import annotations

import numpy as np

from ...components.relu import ReLU, relu_backward, relu_forward
from ...moments import GradMoments, Moments
from ..spec import ComponentSpec
from ..tokenwise import CHUNK, ELEMENTWISE_HIDDEN, ELEMENTWISE_NOTE, simulate_tokenwise
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params

NOTE = (
    ELEMENTWISE_NOTE + " Ranges as Table 22: μ = 0, σ² ∈ [0.1, 10], σ²_g ∈ [0.1, 10], r, r_g ∈ [0, 0.99]. The "
    "rules also handle μ ≠ 0 (closed forms); that path is checked by tests/components/test_relu.py against "
    "quadrature and Monte Carlo on the real module."
)


def _simulate(params, budget, generator):
    return simulate_tokenwise(ReLU(), params, budget, generator, ELEMENTWISE_HIDDEN)


def predict(params, approx: str = "exact"):
    """The rules' prediction with the named approximation (``sigprop verify --approx``)."""
    mean = params.get("mean", np.zeros_like(params["var"]))
    m = Moments(mean, params["var"], params["corr"])
    fwd = relu_forward(m, approx=approx)
    bwd = relu_backward(GradMoments(params["grad_var"], params["grad_corr"]), m, approx=approx)
    return as_quantities(fwd, bwd)


SPEC = ComponentSpec(
    name="relu",
    title="ReLU",
    params=gaussian_input_params(),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=predict,
    paper={"mean": (0.3, 1.3, 2.3), "var": (0.5, 1.9, 3.4), "grad_var": (0.6, 1.5, 2.6), "corr": (0.3, 1.6, 3.1),
           "grad_corr": (0.2, 1.1, 2.3)},
    max_group=CHUNK,
    note=NOTE,
)
