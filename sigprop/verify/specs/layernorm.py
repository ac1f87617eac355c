"""Verification sweep of LayerNorm (Kedia et al. App. A.6; ranges of Table 22, paper errors of Table 21)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...components.layernorm import LAYERNORM_APPROX, LayerNorm, layernorm_backward, layernorm_forward
from ...core.moments import GradMoments, Moments
from ..spec import ComponentSpec, Param
from ..tokenwise import CHUNK, simulate_tokenwise
from .common import FORWARD_BACKWARD, as_quantities, gaussian_input_params

#: The approximations ``sigprop verify --approx`` may score (checked before any sweep).
APPROXIMATIONS = LAYERNORM_APPROX

__all__ = ["SPEC", "NORM_NOTE", "width_param", "frozen", "norm_spec"]

NORM_NOTE = (
    "A per-token normaliser sees the tokens of a sequence one at a time, so the sequence length L of Table 22 does "
    "not enter its rules; the sweep draws independent token pairs (T = 2), which estimates the same expectations "
    "(output token correlation and gradient token correlation) with the least Monte Carlo noise per element. The "
    "width d is swept on 16 log-spaced integer levels over Table 22's [100, 1000] (a shape parameter: all "
    "configurations of one level run as one batched tensor). Inputs have independent hidden units (corr_hidden = 0)."
)


def width_param(lo: int = 100, hi: int = 1000, levels: int = 16) -> Param:
    return Param("d", lo, hi, scale="log", levels=levels, integer=True,
                 doc="hidden width d (normalised dimension); Table 22: [10², 10³], 16 log-spaced integer levels")


def frozen(module: torch.nn.Module) -> torch.nn.Module:
    """The module with its (initial-valued) affine parameters excluded from autograd: the sweep needs input
    gradients only, and skipping the weight/bias reductions saves time. The forward computation is unchanged."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def norm_spec(name: str, title: str, module: Callable[[int], torch.nn.Module], predict, paper: dict,
              note: str) -> ComponentSpec:
    """The sweep of a per-token normaliser of width d: Table 22's LayerNorm ranges (μ ∈ [−10, 10], the width on
    :func:`width_param`'s levels), ``module(d)`` the real module simulated for each width, ``note`` after
    :data:`NORM_NOTE`."""

    def simulate(params, budget, generator):
        d = int(params["d"][0])  # d is a shape parameter: one real module per batch of configurations
        return simulate_tokenwise(frozen(module(d)), params, budget, generator, hidden=d)

    return ComponentSpec(name=name, title=title, params=gaussian_input_params(mean=(-10.0, 10.0)) + (width_param(),),
                         quantities=FORWARD_BACKWARD, simulate=simulate, predict=predict, shape_params=("d",),
                         max_group=CHUNK, paper=paper, note=NORM_NOTE + " " + note)


def predict(params, approx: str = "exact"):
    """The rules' prediction with the named approximation (``sigprop verify --approx``)."""
    m = Moments(params["mean"], params["var"], params["corr"])
    fwd = layernorm_forward(m, params["d"], approx=approx)
    bwd = layernorm_backward(GradMoments(params["grad_var"], params["grad_corr"]), m, params["d"], approx=approx)
    return as_quantities(fwd, bwd)


SPEC = norm_spec(
    "layernorm", "LayerNorm", lambda d: LayerNorm(d, elementwise_affine=True), predict,
    paper={"mean": (0.0, 0.0, 0.0), "var": (0.0, 0.0, 0.0), "grad_var": (0.4, 1.5, 3.2), "corr": (0.1, 0.5, 1.0),
           "grad_corr": (0.2, 0.9, 2.2)},
    note="Module: torch.nn.LayerNorm(d) (eps = 1e-5, elementwise affine at its initial values).",
)
