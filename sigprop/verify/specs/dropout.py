"""Verification sweep of dropout (Kedia et al. App. A.3; ranges of Table 22)."""

from __future__ import annotations

from ...components.dropout import Dropout, dropout_backward, dropout_forward
from ...core.moments import GradMoments, Moments
from ..spec import ComponentSpec, Param
from ..tokenwise import CHUNK, ELEMENTWISE_HIDDEN, ELEMENTWISE_NOTE, simulate_tokenwise
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params


def _simulate(params, budget, generator):
    p = float(params["p"][0])  # p is a shape parameter: one real nn.Dropout per batch of configurations
    return simulate_tokenwise(Dropout(p).train(), params, budget, generator, ELEMENTWISE_HIDDEN)


def _predict(params):
    fwd = dropout_forward(Moments(params["mean"], params["var"], params["corr"]), params["p"])
    bwd = dropout_backward(GradMoments(params["grad_var"], params["grad_corr"]), params["p"])
    return as_quantities(fwd, bwd)


SPEC = ComponentSpec(
    name="dropout",
    title="Dropout",
    params=gaussian_input_params(mean=(-10.0, 10.0)) + (
        Param("p", 0.0, 0.95, levels=20, doc="dropout probability; Table 22: [0, 1), swept to 0.95"),
    ),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=_predict,
    shape_params=("p",),
    paper={"mean": (0.0, 0.1, 0.5), "var": (0.1, 0.5, 1.5), "grad_var": (0.1, 0.7, 1.5), "corr": (0.0, 0.4, 1.3),
           "grad_corr": (0.1, 0.5, 1.2)},
    max_group=CHUNK,
    note=ELEMENTWISE_NOTE,
)
