"""Verification sweep of GeLU (Kedia et al. App. A.5; ranges of Table 22, paper errors of Table 21)."""

from __future__ import annotations

import numpy as np

from ...components.gelu import GELU, gelu_backward, gelu_forward
from ...moments import GradMoments, Moments
from ..spec import ComponentSpec
from ..tokenwise import CHUNK, ELEMENTWISE_HIDDEN, ELEMENTWISE_NOTE, simulate_tokenwise
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params

NOTE = (
    ELEMENTWISE_NOTE + " Ranges as Table 22: μ = 0, σ² ∈ [0.1, 10], σ²_g ∈ [0.1, 10], r, r_g ∈ [0, 0.99]. The "
    "rules also handle μ ≠ 0 (Price-theorem integral of a closed form; see gelu.py); that path is checked by "
    "tests/components/test_gelu.py against quadrature and Monte Carlo on the real module."
)


def _simulate(params, budget, generator):
    return simulate_tokenwise(GELU(), params, budget, generator, ELEMENTWISE_HIDDEN)


def predict(params, approx: str = "exact"):
    """The rules' prediction with the named approximation (``sigprop verify --approx``)."""
    mean = params.get("mean", np.zeros_like(params["var"]))
    m = Moments(mean, params["var"], params["corr"])
    fwd = gelu_forward(m, approx=approx)
    bwd = gelu_backward(GradMoments(params["grad_var"], params["grad_corr"]), m, approx=approx)
    return as_quantities(fwd, bwd)


SPEC = ComponentSpec(
    name="gelu",
    title="GeLU (exact erf form)",
    params=gaussian_input_params(),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=predict,
    paper={"mean": (0.1, 1.0, 2.4), "var": (0.2, 0.6, 1.3), "grad_var": (0.2, 0.6, 1.1), "corr": (0.1, 0.5, 1.2),
           "grad_corr": (0.1, 0.4, 0.9)},
    max_group=CHUNK,
    note=NOTE,
)
