"""Verification sweep of Llama-style attention: rotary position embedding on queries and keys and grouped-query heads
(:class:`sigprop.components.attention.MultiHeadAttention` with ``rope`` and ``n_kv_heads``; rules
:func:`~sigprop.components.attention.mha_forward` / :func:`~sigprop.components.attention.mha_backward` with the
sampled approximation, which rotates every sampled head).

No paper tabulates it; the ranges are ours. Input μ = 0, σ² = 1 (a norm's output), token correlation r ∈ [0, 0.99];
σ_q = σ_k = q_scale/√d_in with q_scale ∈ [0.3, 2] (score variance s² = (1 − r)·q_scale⁴ up to 16: Xavier is
q_scale ≈ 1, Hugging Face's std 0.02 at d = 256 is 0.32), σ_v = v_scale/√d_in, v_scale ∈ [10^−0.5, 10^0.5];
σ²_g ∈ [0.1, 10], r_g ∈ [0, 0.99]; H ∈ {2, 4} query heads, ``kv_group`` ∈ {2, 4} of them sharing a key/value
head (multi-query where it reaches H), d_head ∈ {32, 64}, d_in ∈ {128, 256}, L ∈ {32, 128}, bidirectional or causal,
rotary base 100 or 10 000.

Simulation: the real module (float64), fresh weights for each of 64 draws, 8 sequences of Gaussian input per draw
(shared part r), an output gradient of token correlation r_g and independent units, one autograd pass; statistics as
:mod:`sigprop.measurement` pools them (per element; the token covariance over ordered pairs of each sequence). The
prediction samples 512 heads. Both are Monte Carlo, so the error reported includes both noises (the harness shows the
simulation's).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...components.attention import MultiHeadAttention, mha_backward, mha_forward
from ...core.moments import GradMoments, Moments
from ..spec import ComponentSpec, Estimate, Param
from .common import correlation_and_gradient_params

__all__ = ["SPEC"]

DRAWS = 64
SEQUENCES = 8
RULE_HEADS = 512


def _simulate_one(prm: dict, i: int, draws: int, k: int, gen: torch.Generator) -> dict:
    d, dh, h, L = (int(prm[key][i]) for key in ("d_in", "d_head", "n_heads", "L"))
    kv = max(1, h // int(prm["kv_group"][i]))
    causal, theta = bool(prm["causal"][i]), float(prm["theta"][i])
    r, rg = float(prm["corr"][i]), float(prm["grad_corr"][i])
    sq, sv = float(prm["q_scale"][i]) / math.sqrt(d), float(prm["v_scale"][i]) / math.sqrt(d)
    stats = {key: [] for key in ("var", "cov", "grad_var", "grad_cov")}
    for _ in range(draws):
        mha = MultiHeadAttention(d, h, dh, sigma_q=sq, sigma_k=sq, sigma_v=sv, causal=causal, n_kv_heads=kv,
                                 rope=theta).double()
        mha.reset_parameters(generator=gen)
        x = (math.sqrt(r) * torch.randn(SEQUENCES, 1, d, generator=gen, dtype=torch.float64)
             + math.sqrt(1.0 - r) * torch.randn(SEQUENCES, L, d, generator=gen, dtype=torch.float64))
        x.requires_grad_(True)
        y = mha(x)
        w = h * dh
        gy = math.sqrt(prm["grad_var"][i]) * (
            math.sqrt(rg) * torch.randn(SEQUENCES, 1, w, generator=gen, dtype=torch.float64)
            + math.sqrt(1.0 - rg) * torch.randn(SEQUENCES, L, w, generator=gen, dtype=torch.float64))
        (gx,) = torch.autograd.grad(y, x, gy)
        for prefix, t in (("", y.detach()), ("grad_", gx)):
            m2 = (t * t).mean()
            tot = t.sum(dim=1)
            stats[prefix + "var"].append(float(m2))
            stats[prefix + "cov"].append(float(((tot * tot).mean() - m2 * L) / (L * (L - 1))))
    reps = {key: np.asarray(v).reshape(k, -1).mean(axis=1) for key, v in stats.items()}
    return reps


def _simulate(params, budget, generator):
    n = len(params["corr"])
    k = budget.replicates
    draws = k * max(1, math.ceil(budget.samples(DRAWS) / k))
    out = {q: (np.empty(n), np.empty(n)) for q in ("var", "corr", "grad_var", "grad_corr")}
    for i in range(n):
        reps = _simulate_one(params, i, draws, k, generator)
        per = {"var": reps["var"], "corr": reps["cov"] / reps["var"], "grad_var": reps["grad_var"],
               "grad_corr": reps["grad_cov"] / reps["grad_var"]}
        pooled = {"var": reps["var"].mean(), "corr": reps["cov"].mean() / reps["var"].mean(),
                  "grad_var": reps["grad_var"].mean(), "grad_corr": reps["grad_cov"].mean() / reps["grad_var"].mean()}
        for q in out:
            out[q][0][i] = pooled[q]
            out[q][1][i] = per[q].std(ddof=1) / math.sqrt(k)
    return {q: Estimate(v, se) for q, (v, se) in out.items()}


def _predict(params):
    n = len(params["corr"])
    out = {q: np.empty(n) for q in ("var", "corr", "grad_var", "grad_corr")}
    for i in range(n):
        d, dh, h, L = (int(params[key][i]) for key in ("d_in", "d_head", "n_heads", "L"))
        if h % max(1, h // int(params["kv_group"][i])):
            raise ValueError("kv_group must divide n_heads")
        sq2 = float(params["q_scale"][i]) ** 2 / d
        sv2 = float(params["v_scale"][i]) ** 2 / d
        m = Moments(0.0, 1.0, float(params["corr"][i]))
        g = GradMoments(float(params["grad_var"][i]), float(params["grad_corr"][i]))
        args = (h, d, dh, L, sq2, sq2, sv2, 0.0, bool(params["causal"][i]), "sampled", RULE_HEADS, i,
                float(params["theta"][i]))
        f, b = mha_forward(m, *args), mha_backward(g, m, *args)
        out["var"][i], out["corr"][i] = float(f.var), float(f.corr)
        out["grad_var"][i], out["grad_corr"][i] = float(b.var), float(b.corr)
    return out


SPEC = ComponentSpec(
    name="rope_gqa",
    title="Rotary, grouped-query attention",
    params=(
        Param("q_scale", 0.3, 2.0, scale="log", doc="σ_q = σ_k = q_scale/√d_in (s² = (1 − r)·q_scale⁴)"),
        Param("v_scale", 10**-0.5, 10**0.5, scale="log", doc="σ_v = v_scale/√d_in"),
        *correlation_and_gradient_params(),
        Param("n_heads", 2, 4, values=(2, 4), doc="query heads H"),
        Param("kv_group", 2, 4, values=(2, 4), doc="query heads per key/value head (H/kv_group kv heads, ≥ 1)"),
        Param("d_head", 32, 64, values=(32, 64), doc="head width"),
        Param("d_in", 128, 256, values=(128, 256), doc="input width"),
        Param("L", 32, 128, values=(32, 128), doc="sequence length"),
        Param("causal", 0, 1, values=(0, 1), doc="1: causal mask"),
        Param("theta", 100.0, 10000.0, values=(100.0, 10000.0), doc="rotary base"),
    ),
    quantities=("var", "corr", "grad_var", "grad_corr"),
    simulate=_simulate,
    predict=_predict,
    shape_params=("n_heads", "kv_group", "d_head", "d_in", "L", "causal", "theta"),
    n_configs=200,
    quick_configs=24,
    max_group=8,
    note="No paper row: ranges ours (module docstring). Both sides are Monte Carlo (the module with 64 weight draws, "
         "the sampled rule with 512 heads): the error includes the rule's own sampling noise.",
)
