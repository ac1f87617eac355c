"""Monte Carlo building blocks of the sweeps: Gaussian inputs with an exact token correlation, and estimates
with standard errors from independent replicates."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from ..core.stats import MomentSums, moment_sums
from .spec import Estimate

__all__ = ["correlated_gaussian", "column", "estimates", "forward_backward_estimates", "linear_weights",
           "simulate_weight_draws"]


def column(values, ndim: int, dtype=torch.float64) -> torch.Tensor:
    """A per-configuration parameter array of shape (C,) as a tensor broadcastable against (C, *rest[ndim-1])."""
    t = torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=dtype)
    return t.reshape(t.shape + (1,) * (ndim - 1))


def correlated_gaussian(n_configs: int, replicates: int, batch: int, tokens: int, hidden: int, mean, var, corr,
                        generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Gaussian tensor of shape (C, K, batch, tokens, hidden) with the given per-configuration moments.

    x = μ + σ(√r ε + √(1−r) δ), with ε shared by all tokens of one sequence (one draw per batch item and hidden
    unit) and δ independent: every element is N(μ, σ²), two tokens of one sequence have correlation exactly r, and
    hidden units are independent. For token pairs (T = 2) the same law is drawn as x_0 = μ + σa,
    x_1 = μ + σ(ra + √(1−r²)b). ``mean``, ``var``, ``corr`` are arrays of shape (C,).
    """
    shape = (n_configs, replicates, batch, tokens, hidden)
    x = torch.randn(shape, generator=generator, dtype=dtype)
    s = column(np.sqrt(var), 5, dtype)
    if tokens == 2:  # x_1 = r x_0 + √(1−r²) b: the same law from one normal per element instead of 1.5
        r = column(corr, 4, dtype)
        x[:, :, :, 1].mul_(torch.sqrt(1.0 - r * r)).add_(x[:, :, :, 0] * r)
    else:
        r = column(corr, 5, dtype)
        eps = torch.randn(shape[:3] + (1, hidden), generator=generator, dtype=dtype)
        x.mul_(torch.sqrt(1.0 - r)).add_(eps * torch.sqrt(r))
    return x.mul_(s).add_(column(mean, 5, dtype))


def estimates(sums: MomentSums, prefix: str = "") -> dict[str, Estimate]:
    """Pooled mean / var / corr per configuration with standard errors, from sums with leading dims (C, K).

    The value pools all K replicates; the standard error is the spread of the K per-replicate statistics / √K.
    """
    k = sums.s1.shape[1]
    pooled = sums.sum_over(1)
    out = {}
    for name, fn in (("mean", MomentSums.mean), ("var", MomentSums.var), ("corr", MomentSums.corr)):
        value = fn(pooled).numpy()
        per_rep = fn(sums).numpy()
        se = per_rep.std(axis=1, ddof=1) / np.sqrt(k) if k > 1 else np.full_like(value, np.nan)
        out[prefix + name] = Estimate(value, se)
    return out


def forward_backward_estimates(y: torch.Tensor, grad_in: torch.Tensor) -> dict[str, Estimate]:
    """mean/var/corr of an output ``y`` and var/corr of an input gradient, both shaped (C, K, batch, T, D)."""
    lead = y.shape[:2]
    center = y.mean(dim=(1, 2, 3, 4)).double()[:, None].expand(lead)
    out = estimates(moment_sums(y, lead=2, center=center))
    g = estimates(moment_sums(grad_in, lead=2, center=torch.zeros(grad_in.shape[:2], dtype=torch.float64)),
                  prefix="grad_")
    out["grad_var"] = g["grad_var"]
    out["grad_corr"] = g["grad_corr"]
    return out


def linear_weights(n_configs: int, draws: int, d_out: int, d_in: int, std, generator: torch.Generator,
                   replicates: int = 1, stratify: bool = True) -> torch.Tensor:
    """Weight matrices (C, draws, d_out, d_in) of a linear layer initialised N(0, std²), std per configuration.

    With ``stratify`` the sums over the inputs of each output row, c_j = Σ_i W_ji ~ N(0, d_in std²), are drawn by
    stratified sampling (one normal quantile per stratum, strata randomly permuted) across the rows of each replicate
    — the draws are split into ``replicates`` contiguous blocks — while the rest of each row stays i.i.d. Gaussian.
    Every row keeps exactly the N(0, std² I) law and rows are only weakly dependent, so per-row sums of any function
    keep their expectation (estimates stay unbiased), but the sample second moment of the c_j, which carries an input
    mean into the output variance as μ²c_j², no longer fluctuates. Stratifying within each replicate keeps the
    replicates independent, so their spread still measures the estimator's noise.
    """
    if draws % replicates:
        raise ValueError(f"draws ({draws}) must be a multiple of replicates ({replicates})")
    z = torch.randn(n_configs, draws, d_out, d_in, generator=generator)
    if stratify:
        groups, rows = n_configs * replicates, (draws // replicates) * d_out
        u = (torch.arange(rows, dtype=torch.float64) + torch.rand(groups, rows, generator=generator,
                                                                    dtype=torch.float64)) / rows
        order = torch.argsort(torch.rand(groups, rows, generator=generator), dim=1)
        u = torch.gather(u, 1, order)
        c = (torch.special.ndtri(u) * np.sqrt(d_in)).to(z.dtype).reshape(n_configs, draws, d_out, 1)
        z = z - z.mean(dim=-1, keepdim=True) + c / d_in
    return z.mul_(column(std, 4, z.dtype))


def simulate_weight_draws(module: nn.Module, weights: dict[str, torch.Tensor], params: dict, width: int, rows: int,
                          tokens: int, replicates: int, generator: torch.Generator) -> dict[str, Estimate]:
    """Output and input-gradient moments of ``module`` over many independent weight draws per configuration.

    ``weights`` maps names of the module's parameters (or buffers) to tensors (C, draws, …): one value per
    configuration and draw. Each draw sees ``rows`` sequences of ``tokens`` Gaussian tokens of ``width`` units with
    the configuration's ``mean`` (0 if absent), ``var`` and ``corr``, and sends back a Gaussian output gradient with
    ``grad_var`` and ``grad_corr``, independent of the input. The real module runs once per (configuration, draw)
    under ``vmap``, random operations (dropout) drawing differently in each; the replicates behind the standard
    errors are blocks of whole weight draws (``draws`` a multiple of ``replicates``).
    """
    n = len(params["var"])
    draws = next(iter(weights.values())).shape[1]
    mean = params.get("mean", np.zeros(n))
    x = correlated_gaussian(n, draws, rows, tokens, width, mean, params["var"], params["corr"], generator)
    x.requires_grad_(True)

    def run(w, xi):
        return functional_call(module, w, (xi,))

    y = vmap(vmap(run, randomness="different"), randomness="different")(weights, x)
    g = correlated_gaussian(n, draws, rows, tokens, y.shape[-1], np.zeros(n), params["grad_var"], params["grad_corr"],
                            generator)
    y.backward(g)

    def regroup(t):  # (C, draws, rows, T, D) -> (C, K, draws/K * rows, T, D): replicates of whole weight draws
        return t.reshape(n, replicates, (draws // replicates) * rows, tokens, t.shape[-1])

    return forward_backward_estimates(regroup(y.detach()), regroup(x.grad))
