"""Ranges shared by several sweeps (Kedia et al. Table 22)."""

from __future__ import annotations

import numpy as np

from ...core.moments import GradMoments, Moments
from ..spec import QUANTITIES, Param

__all__ = ["FORWARD_BACKWARD", "CORR_MAX", "gaussian_input_params", "correlation_and_gradient_params",
           "as_quantities", "predict_each"]

FORWARD_BACKWARD = QUANTITIES

#: Table 22's correlations range over [0, 1); the sweep's upper corner is 0.99.
CORR_MAX = 0.99


def gaussian_input_params(mean=(0.0, 0.0), var=(0.1, 10.0), grad_var=(0.1, 10.0)) -> tuple[Param, ...]:
    """Input mean μ, variance σ², token correlation r, output-gradient variance and correlation (Table 22).

    A mean range of (0, 0) means the component is swept at μ = 0 only, as in Table 22.
    """
    params = []
    if mean != (0.0, 0.0):
        params.append(Param("mean", mean[0], mean[1], doc="input mean μ"))
    params += [Param("var", var[0], var[1], scale="log", doc="input variance σ²"),
               *correlation_and_gradient_params(grad_var, table_22=True)]
    return tuple(params)


def correlation_and_gradient_params(grad_var=(0.1, 10.0), table_22: bool = False) -> tuple[Param, ...]:
    """The input's token correlation r ∈ [0, 0.99], the output gradient's variance σ²_g (log-uniform over
    ``grad_var``) and its token correlation r_g ∈ [0, 0.99]; ``table_22``: the correlations' docs name Table 22's
    range, which they come from."""
    source = " (Table 22: [0, 1))" if table_22 else ""
    return (
        Param("corr", 0.0, CORR_MAX, doc="input token correlation r" + source),
        Param("grad_var", grad_var[0], grad_var[1], scale="log", doc="output-gradient variance σ²_g"),
        Param("grad_corr", 0.0, CORR_MAX, doc="output-gradient token correlation r_g" + source),
    )


def as_quantities(fwd: Moments, bwd: GradMoments) -> dict:
    """A forward and a backward prediction as the sweep's {quantity: value} dict."""
    return {"mean": fwd.mean, "var": fwd.var, "corr": fwd.corr, "grad_var": bwd.var, "grad_corr": bwd.corr}


def predict_each(params: dict, build) -> dict:
    """Predictions for configurations whose module structure differs (activation, widths, heads): ``build(params,
    i)`` returns the i-th module and the context its rules need (e.g. {"L": 128}); its rules are walked once each."""
    n = len(params["var"])
    out = {q: np.empty(n) for q in FORWARD_BACKWARD}
    for i in range(n):
        module, context = build(params, i)
        m = Moments(params["mean"][i], params["var"][i], params["corr"][i])
        g = GradMoments(params["grad_var"][i], params["grad_corr"][i])
        pred = as_quantities(module.forward_moments(m, **context), module.backward_moments(g, m, **context))
        for q in FORWARD_BACKWARD:
            out[q][i] = pred[q]
    return out
