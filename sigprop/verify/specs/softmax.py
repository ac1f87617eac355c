"""Verification sweep of softmax (Kedia et al. App. A.7; ranges of Table 22, paper's errors of Table 21).

The real module (:class:`sigprop.components.softmax.Softmax` along the token axis) is run in float64 (the variance is
~s²/L², which float32 rounding of p ≈ 1/L would swamp). Each softmax row is an independent problem, so a replicate is
a block of rows; the standard error is the spread of K independent replicates.

Variance reduction (unbiased): the simulator knows the i.i.d. part δ of its own input, x = σ(√r ε + √(1−r) δ), and
forms the log-normal surrogate q_i = e^{s δ_i − s²/2}/L (s² = σ²(1 − r)); the real p_i = q_i/(1 + ε) with the
row-level ε = Σ_k q_k − 1. Per softmax row the surrogate statistics are the first two terms of the expansion in ε,
cv1 = Σ(q_i − 1/L)², cv2 = −2ε(Σq_i² − 1/L) (and for the gradient, with γ the independent part of the output
gradient, cv1_g = Σ_i q_i²(γ_i − Σ_j q_j γ_j)², cv2_g = −2ε cv1_g), whose expectations are elementary log-normal
moments (:func:`surrogate_moments`). Each estimate is mean(statistic − cv1 − cv2) + E[cv1 + cv2]: unbiased, and
the residual is O(ε²), which removes most of the element- and row-level noise.
"""

from __future__ import annotations

import numpy as np
import torch

from ...components.softmax import Softmax, softmax_backward, softmax_forward
from ...moments import GradMoments, Moments
from ...stats import moment_sums
from ..sampling import column, estimates
from ..spec import ComponentSpec, Estimate, Param
from .common import CORR_MAX

#: Softmax elements per replicate at full budget (8 replicates per configuration).
ELEMENTS_PER_REPLICATE = 2**14
_COLUMNS = 64


def surrogate_moments(s2, L, grad_indep_var) -> dict:
    """Exact expectations (per softmax row) of the surrogate statistics of the module docstring.

    With a = e^{s²} and E[Π q_i^{n_i}] = Π a^{n_i(n_i−1)/2}/L^{n_i} over distinct indices (log-normal moments):
    cv1 = Σ(q−1/L)², E = (a−1)/L; cv2 = −2(Q1−1)(Q2−1/L), E = −2(a³−a)/L²; and for the gradient
    cv1_g = Σ_i q_i²(γ_i − Σ_j q_j γ_j)², E = σ²_γ E[Q2 − 2Q3 + Q2²]; cv2_g = −2(Q1−1)·cv1_g,
    E = −2σ²_γ E[(Q1−1)(Q2 − 2Q3 + Q2²)], where Qn = Σ_i q_iⁿ.
    """
    a = np.exp(s2)
    L = np.asarray(L, dtype=np.float64)
    eq2, eq3 = a / L, a**3 / L**2
    eq1q2 = a**3 / L**2 + (L - 1.0) * a / L**2
    eq1q3 = a**6 / L**3 + (L - 1.0) * a**3 / L**3
    eq2sq = a**6 / L**3 + (L - 1.0) * a**2 / L**3
    eq1q2sq = (a**10 + (L - 1.0) * a**6 + 2.0 * (L - 1.0) * a**4 + (L - 1.0) * (L - 2.0) * a**2) / L**4
    return {
        "cv1": (a - 1.0) / L,
        "cv2": -2.0 * (a**3 - a) / L**2,
        "cv1_g": grad_indep_var * (eq2 - 2.0 * eq3 + eq2sq),
        "cv2_g": -2.0 * grad_indep_var * (eq1q2 - eq2 - 2.0 * (eq1q3 - eq3) + eq1q2sq - eq2sq),
    }


def _per_replicate(stat: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(C, K) per-replicate means -> pooled value and standard error over K."""
    v = stat.numpy()
    k = v.shape[1]
    return v.mean(axis=1), v.std(axis=1, ddof=1) / np.sqrt(k)


def _simulate(params, budget, generator, control_variates: bool = True):
    n = len(params["var"])
    L = int(params["L"][0])
    k = budget.replicates
    dt = torch.float64
    cols = max(1, min(_COLUMNS, budget.samples(ELEMENTS_PER_REPLICATE) // L))
    shape = (n, k, 1, L, cols)
    var, r = params["var"], params["corr"]
    s2 = var * (1.0 - r)
    delta = torch.randn(shape, generator=generator, dtype=dt)
    eps = torch.randn(shape[:3] + (1, cols), generator=generator, dtype=dt)
    sig = column(np.sqrt(var), 5, dt)
    x = (delta * torch.sqrt(1.0 - column(r, 5, dt)) + eps * torch.sqrt(column(r, 5, dt))) * sig
    x.requires_grad_(True)
    y = Softmax(dim=-2)(x)
    gvar, rg = params["grad_var"], params["grad_corr"]
    gam = torch.randn(shape, generator=generator, dtype=dt)
    xi = torch.randn(shape[:3] + (1, cols), generator=generator, dtype=dt)
    sg = column(np.sqrt(gvar), 5, dt)
    g = (gam * torch.sqrt(1.0 - column(rg, 5, dt)) + xi * torch.sqrt(column(rg, 5, dt))) * sg
    y.backward(g)
    gin = x.grad
    y = y.detach()
    with torch.no_grad():
        stat = ((y - 1.0 / L) ** 2).sum(dim=-2)  # per row
        stat_g = (gin**2).sum(dim=-2)
        if control_variates:
            s = column(np.sqrt(s2), 5, dt)
            q = torch.exp(s * delta - s * s / 2.0) / L
            gind = gam * torch.sqrt(1.0 - column(rg, 5, dt)) * sg
            q1, q2 = q.sum(dim=-2), (q * q).sum(dim=-2)
            cv1 = ((q - 1.0 / L) ** 2).sum(dim=-2)
            cv2 = -2.0 * (q1 - 1.0) * (q2 - 1.0 / L)
            cv1g = ((q * (gind - (q * gind).sum(dim=-2, keepdim=True))) ** 2).sum(dim=-2)
            cv2g = -2.0 * (q1 - 1.0) * cv1g
            stat = stat - cv1 - cv2
            stat_g = stat_g - cv1g - cv2g
        dvar = stat.mean(dim=(2, 3)) / L
        dgvar = stat_g.mean(dim=(2, 3)) / L
    if control_variates:
        ex = surrogate_moments(s2, L, gvar * (1.0 - rg))
        fwd_e, bwd_e = (ex["cv1"] + ex["cv2"]) / L, (ex["cv1_g"] + ex["cv2_g"]) / L
    else:
        fwd_e = bwd_e = 0.0
    out = estimates(moment_sums(y, lead=2))  # mean and corr (exact identities; var overwritten below)
    g_est = estimates(moment_sums(gin, lead=2, center=torch.zeros(n, k, dtype=dt)), prefix="grad_")
    v, se = _per_replicate(dvar)
    out["var"] = Estimate(v + fwd_e, se)
    v, se = _per_replicate(dgvar)
    out["grad_var"] = Estimate(v + bwd_e, se)
    out["grad_corr"] = g_est["grad_corr"]
    return out


def _predict(params, approx="exact"):
    m = Moments(0.0, params["var"], params["corr"])
    fwd = softmax_forward(m, params["L"], approx)
    bwd = softmax_backward(GradMoments(params["grad_var"], params["grad_corr"]), m, params["L"], approx)
    return {"mean": fwd.mean, "var": fwd.var, "corr": fwd.corr, "grad_var": bwd.var, "grad_corr": bwd.corr}


def make_spec(approx: str = "exact") -> ComponentSpec:
    """The softmax sweep judging the rules' ``approx`` (default "exact"; "kedia" reproduces the paper's rule)."""
    return ComponentSpec(
        name="softmax" if approx == "exact" else f"softmax[{approx}]",
        title="Softmax",
        params=(
            Param("var", 1e-4, 1.0, scale="log", doc="input variance σ² (Table 22: [1e-4, 1])"),
            Param("corr", 0.0, CORR_MAX, doc="input correlation along the softmax axis r (Table 22: [0, 1))"),
            Param("grad_var", 0.1, 10.0, scale="log", doc="output-gradient variance σ²_g (Table 22: [0.1, 10])"),
            Param("grad_corr", 0.0, CORR_MAX,
                  doc="output-gradient correlation r_g: Table 22 gives none (the paper used 0); swept over [0, 1) "
                      "because the rule has a (1 − r_g) factor"),
            Param("L", 300, 10000, scale="log", levels=12, integer=True,
                  doc="length of the softmax axis (Table 22: [300, 1e4]); 12 log-spaced levels"),
        ),
        quantities=("mean", "var", "corr", "grad_var", "grad_corr"),
        simulate=_simulate,
        predict=lambda p: _predict(p, approx),
        shape_params=("L",),
        paper={"mean": (0.0, 0.0, 0.0), "var": (0.2, 0.9, 4.0), "grad_var": (0.1, 0.6, 4.5)},
        note=("corr and grad_corr along the softmax axis are exactly −1/(L−1) (rows sum to one; input gradients sum "
              "to zero); the paper reports no correlation for softmax. Float64 simulation; variance-reduced by the "
              "log-normal surrogate described in the module docstring."),
    )


SPEC = make_spec()
