"""The sweep shared by the components with weights (linear layer, residual add, gated unit, FFN and attention
blocks): each configuration's real module under many independent weight draws (the rules are expectations over the
weights)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..sampling import simulate_weight_draws
from ..spec import Budget, ComponentSpec, Param
from .common import FORWARD_BACKWARD, gaussian_input_params

__all__ = ["weighted_spec"]


def weighted_spec(name: str, title: str, module: Callable[[dict], nn.Module],
                  weights: Callable[[dict, int, torch.Generator, int], dict[str, torch.Tensor]],
                  sizes: Callable[[dict, Budget], tuple[int, int]], elements: Callable[[dict, int], int], bound: int,
                  params: tuple[Param, ...], shape_params: tuple[str, ...], predict, width: str = "d",
                  tokens: str | None = None, inputs: tuple[Param, ...] | None = None,
                  quantities: tuple[str, ...] = FORWARD_BACKWARD, **fields) -> ComponentSpec:
    """The spec of a component with weights, swept over the ranges of its ``inputs`` (default: Table 22's at any
    mean, μ ∈ [−10, 10]) and ``params``.

    ``module(params)``: the real module of a batch of configurations sharing the values of ``shape_params``;
    ``weights(params, draws, generator, replicates)``: its weights, parameter name → (C, draws, …) tensor;
    ``sizes(shape, budget)``: (weight draws per configuration, sequences per draw) for the values of the shape
    parameters; ``elements(shape, sequences)``: the elements one draw holds (weights, activations and their
    gradients), of which at most ``bound`` are held at once; ``width``: the shape parameter that is the input's
    width; ``tokens``: the one that is each sequence's tokens (token pairs if None). ``fields`` go to the
    :class:`~sigprop.verify.spec.ComponentSpec`.
    """

    def simulate(prm, budget, generator):
        shape = {p: prm[p][0] for p in shape_params}
        draws, rows = sizes(shape, budget)
        layer = module(prm)
        return simulate_weight_draws(layer, weights(prm, draws, generator, budget.replicates), prm, int(shape[width]),
                                     rows, 2 if tokens is None else int(shape[tokens]), budget.replicates, generator)

    def max_group(shape, budget):
        draws, rows = sizes(shape, budget)
        return bound // (draws * elements(shape, rows))

    if inputs is None:
        inputs = gaussian_input_params(mean=(-10.0, 10.0))
    return ComponentSpec(name=name, title=title, params=inputs + params, quantities=quantities, simulate=simulate,
                         predict=predict, shape_params=shape_params, max_group=max_group, **fields)
