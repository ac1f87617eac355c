"""Ranges shared by several sweeps (Kedia et al. Table 22)."""

from __future__ import annotations

from ..spec import QUANTITIES, Param

__all__ = ["FORWARD_BACKWARD", "CORR_MAX", "gaussian_input_params"]

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
    params += [
        Param("var", var[0], var[1], scale="log", doc="input variance σ²"),
        Param("corr", 0.0, CORR_MAX, doc="input token correlation r (Table 22: [0, 1))"),
        Param("grad_var", grad_var[0], grad_var[1], scale="log", doc="output-gradient variance σ²_g"),
        Param("grad_corr", 0.0, CORR_MAX, doc="output-gradient token correlation r_g (Table 22: [0, 1))"),
    ]
    return tuple(params)
