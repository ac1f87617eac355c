"""How fast a step runs: the arithmetic (bf16 autocast on a GPU, float32 on a CPU) and compiling one transformer layer
for all the layers of its shape."""

from __future__ import annotations

import contextlib

import torch

from .config import Arithmetic

__all__ = ["autocast_for", "precision_used", "compile_layers"]


def precision_used(config, device: torch.device) -> Arithmetic:
    """``config.precision`` resolved (:func:`~sigprop.train.config.resolve_precision`): "auto" is bf16 on a GPU, fp32
    elsewhere."""
    from .config import resolve_precision

    return resolve_precision(config.precision, device.type)


def autocast_for(precision: str, device: torch.device):
    """The context of a forward pass: bf16 autocast, or nothing for fp32. The loss is summed in float32
    (:func:`sigprop.model.objective.objective_sums`)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def compile_layers(model) -> int:
    """Compile every transformer layer with ``torch.compile`` (regional compilation): layers of one shape share the
    compiled code, because the compiler treats a module's parameters as inputs, so a 192-layer model compiles one
    layer instead of unrolling 192 (far slower to compile: docs/results/performance.md). Returns the number of
    layers."""
    n = 0
    for stack in model.stacks():
        for layer in stack.layers:
            layer.compile()
            n += 1
    return n
