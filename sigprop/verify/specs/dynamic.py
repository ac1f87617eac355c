"""The sweep shared by DyT and Derf, the elementwise maps y = γ·φ(αx + s) + β that replace a norm: Table 22's GeLU
ranges of σ², r, σ²_g, r_g, the scale α and the input mean swept through the pre-activation mean αμ."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ...core.moments import GradMoments, Moments
from ..spec import ComponentSpec, Param
from ..tokenwise import CHUNK, ELEMENTWISE_HIDDEN, simulate_tokenwise
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params

__all__ = ["dynamic_spec"]


def _input_mean(params):
    return params["pre_mean"] / params["alpha"]


def dynamic_spec(name: str, title: str, module: Callable[[dict], nn.Module], forward, backward,
                 rule_args: Callable[[dict], tuple], params: tuple[Param, ...], note: str) -> ComponentSpec:
    """The spec of an elementwise map swept over ``params`` (after the Gaussian input's), which name ``alpha`` and
    ``pre_mean`` (the input mean is μ = pre_mean/α).

    ``module(params)`` builds the real module for a batch of configurations (its parameters broadcast over the
    leading dimension); ``forward(m, *rule_args(params))`` and ``backward(g, m, *rule_args(params))`` are its rules.
    """

    def simulate(prm, budget, generator):
        return simulate_tokenwise(module(prm).requires_grad_(False), dict(prm, mean=_input_mean(prm)), budget,
                                  generator, ELEMENTWISE_HIDDEN)

    def predict(prm):
        m = Moments(_input_mean(prm), prm["var"], prm["corr"])
        fwd = forward(m, *rule_args(prm))
        bwd = backward(GradMoments(prm["grad_var"], prm["grad_corr"]), m, *rule_args(prm))
        return as_quantities(fwd, bwd)

    return ComponentSpec(name=name, title=title, params=gaussian_input_params() + params,
                         quantities=FORWARD_BACKWARD, simulate=simulate, predict=predict, max_group=CHUNK, note=note)
