"""Verification sweep of LayerNorm (Kedia et al. App. A.6; ranges of Table 22, paper errors of Table 21).

Also holds :func:`simulate_norm`, the batched simulation shared with the RMSNorm sweep.
"""

from __future__ import annotations

import numpy as np
import torch

from ...components.layernorm import LayerNorm, layernorm_backward, layernorm_forward
from ...moments import GradMoments, Moments
from ...stats import MomentSums
from ..sampling import column, estimates
from ..spec import Budget, ComponentSpec, Estimate, Param
from .common import FORWARD_BACKWARD, gaussian_input_params

__all__ = ["SPEC", "simulate_norm", "token_pairs", "NORM_NOTE", "ELEMENTS_PER_REPLICATE", "width_param"]

#: Elements per replicate and configuration at full budget (8 replicates: 2^19 ≈ 5.2e5 elements per configuration,
#: as the elementwise sweeps). Token pairs per replicate = ELEMENTS_PER_REPLICATE / (2 d).
ELEMENTS_PER_REPLICATE = 2**16

#: Configurations simulated per tensor: bounds a tensor to ~34 MB, which keeps the allocator from returning
#: memory to the system between batches (page faults cost ~30% at 64 configurations per tensor, measured).
_CHUNK = 16

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


def _sums(x: torch.Tensor, center: torch.Tensor | None) -> MomentSums:
    """Per-(config, replicate) sums of a (C, K, batch, 2, d) tensor for two tokens: mean, var and token pairs.

    Equivalent to :func:`sigprop.stats.moment_sums` for T = 2 (Σ_{t≠s} x_t x_s = 2 Σ x_0 x_1) but cheaper: the
    centre is a float32 mean (any centre is exact, it only limits cancellation) and the pair sum is one product.
    """
    c, k, b, t, d = x.shape
    if t != 2:
        raise ValueError("expected token pairs (T = 2)")
    if center is None:
        xc = x
        center = torch.zeros(c, dtype=torch.float64)
    else:
        xc = x - center.to(x.dtype).reshape(c, 1, 1, 1, 1)
    red = (2, 3, 4)
    s1 = xc.sum(dim=red).double()
    s2 = xc.square().sum(dim=red).double()
    pairs = 2.0 * (xc[:, :, :, 0] * xc[:, :, :, 1]).sum(dim=(2, 3)).double()
    n = float(b * t * d)
    return MomentSums(center[:, None].expand(c, k), n, s1, s2, pairs, float(b * d * t * (t - 1)),
                      torch.zeros_like(s1), float("nan"))


def token_pairs(n_configs: int, replicates: int, batch: int, hidden: int, mean, var, corr,
                generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Gaussian token pairs of shape (C, K, batch, 2, hidden): x_0 = μ + σa, x_1 = μ + σ(ra + √(1−r²)b) with a, b
    independent standard normal, so every element is N(μ, σ²), the two tokens have correlation exactly r and hidden
    units are independent. Same law as :func:`sigprop.verify.sampling.correlated_gaussian` with T = 2, from one
    normal draw per element instead of 1.5."""
    x = torch.randn((n_configs, replicates, batch, 2, hidden), generator=generator, dtype=dtype)
    r = column(corr, 4, dtype)
    x[:, :, :, 1].mul_(torch.sqrt(1.0 - r * r)).add_(x[:, :, :, 0] * r)
    return x.mul_(column(np.sqrt(var), 5, dtype)).add_(column(mean, 5, dtype))


def simulate_norm(module: torch.nn.Module, params: dict, budget: Budget, generator: torch.Generator,
                  dtype=torch.float32, elements: int = ELEMENTS_PER_REPLICATE) -> dict[str, Estimate]:
    """Push Gaussian token pairs (mean, var, corr per configuration, independent hidden units) of width
    d = params["d"][0] through the real ``module``, back-propagate Gaussian output gradients (grad_var,
    grad_corr; independent of the input) by autograd, and estimate output and input-gradient moments.

    ``elements`` is the number of elements per replicate and configuration at full budget (token pairs per
    replicate = elements/(2d)). Configurations are processed in chunks of 16 (one tensor each, no per-configuration
    loop).
    """
    d = int(params["d"][0])
    if not np.all(params["d"] == d):
        raise ValueError("simulate_norm needs one width per batch (d is a shape parameter)")
    n = len(params["var"])
    k = budget.replicates
    batch = max(1, round(budget.samples(elements) / (2 * d)))
    mean = params.get("mean", np.zeros(n))
    out: dict[str, list] = {}
    for start in range(0, n, _CHUNK):
        sl = slice(start, start + _CHUNK)
        c = len(params["var"][sl])
        x = token_pairs(c, k, batch, d, mean[sl], params["var"][sl], params["corr"][sl], generator, dtype)
        x.requires_grad_(True)
        y = module(x)
        g = token_pairs(c, k, batch, d, np.zeros(c), params["grad_var"][sl], params["grad_corr"][sl], generator,
                        dtype)
        y.backward(g)
        y = y.detach()
        center = y.mean(dim=(1, 2, 3, 4)).double()
        est = estimates(_sums(y, center))
        est.update({"grad_" + q: e for q, e in estimates(_sums(x.grad, None)).items() if q in ("var", "corr")})
        for q, e in est.items():
            out.setdefault(q, []).append(e)
        del x, y, g
    return {q: Estimate(np.concatenate([e.value for e in es]), np.concatenate([e.se for e in es]))
            for q, es in out.items()}


def _frozen(module: torch.nn.Module) -> torch.nn.Module:
    """The module with its (initial-valued) affine parameters excluded from autograd: the sweep needs input
    gradients only, and skipping the weight/bias reductions saves time. The forward computation is unchanged."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def _simulate(params, budget, generator):
    d = int(params["d"][0])  # d is a shape parameter: one real nn.LayerNorm per batch of configurations
    return simulate_norm(_frozen(LayerNorm(d, elementwise_affine=True)), params, budget, generator)


def _predict(params):
    m = Moments(params["mean"], params["var"], params["corr"])
    fwd = layernorm_forward(m, params["d"])
    bwd = layernorm_backward(GradMoments(params["grad_var"], params["grad_corr"]), m, params["d"])
    return {"mean": fwd.mean, "var": fwd.var, "corr": fwd.corr, "grad_var": bwd.var, "grad_corr": bwd.corr}


SPEC = ComponentSpec(
    name="layernorm",
    title="LayerNorm",
    params=gaussian_input_params(mean=(-10.0, 10.0)) + (width_param(),),
    quantities=FORWARD_BACKWARD,
    simulate=_simulate,
    predict=_predict,
    shape_params=("d",),
    paper={"mean": (0.0, 0.0, 0.0), "var": (0.0, 0.0, 0.0), "grad_var": (0.4, 1.5, 3.2), "corr": (0.1, 0.5, 1.0),
           "grad_corr": (0.2, 0.9, 2.2)},
    note=NORM_NOTE + " Module: torch.nn.LayerNorm(d) (eps = 1e-5, elementwise affine at its initial values).",
)
