"""Verification sweep of softmax (Kedia et al. App. A.7; ranges of Table 22, paper's errors of Table 21).

The real module (:class:`sigprop.components.softmax.Softmax` along the token axis) is run in float64 (the variance is
~s²/L², which float32 rounding of p ≈ 1/L would swamp). Each softmax row is an independent problem, so a replicate is
a block of rows; the standard error is the spread of K independent replicates.

Variance reduction (unbiased): the simulator knows the i.i.d. part δ of its own input, x = σ(√r ε + √(1−r) δ), so
with s² = σ²(1 − r), u_i = e^{s δ_i}, M = (L − 1)e^{s²/2} and S'_i = Σ_{k≠i} u_k the real p_i = u_i/(u_i + S'_i). The
surrogate q'_i = u_i/(u_i + M) is a bounded function of one score; per softmax row the control variates are
cv = Σ_i [(q'_i − 1/L)² − 2(q'_i − 1/L) q'_i (S'_i − M)/(u_i + M)] (the expansion of Σ(p_i − 1/L)² to first order in
S'_i − M) and, with γ the independent part of the output gradient and Γ' = Σ_j q'_j γ_j,
cv_g = Σ_i q'_i² (γ_i − Γ')² (1 − 2(S'_i − M)/(u_i + M)). Their expectations are one-dimensional Gaussian integrals
(:func:`surrogate_moments`), so each estimate, mean(statistic − cv) + E[cv], is unbiased; the residual is second
order in (S' − M)/M and bounded, which removes most of the element- and row-level noise.
"""

from __future__ import annotations

import numpy as np
import torch

from ...components.softmax import SOFTMAX_APPROX, Softmax, softmax_backward, softmax_forward
from ...core.gaussian import expect_1d
from ...core.moments import GradMoments, Moments
from ...core.stats import moment_sums
from ..sampling import column, estimates
from ..spec import ComponentSpec, Estimate, Param
from .common import CORR_MAX, as_quantities

#: The approximations ``sigprop verify --approx`` may score (checked before any sweep).
APPROXIMATIONS = SOFTMAX_APPROX

#: Softmax elements per replicate at full budget (8 replicates per configuration).
ELEMENTS_PER_REPLICATE = 2**13
_COLUMNS = 64


def surrogate_moments(s2, L, grad_indep_var) -> dict:
    """Exact expectations (per softmax row) of the surrogate statistics of the module docstring.

    With u = e^{sz}, m = e^{s²/2}, M = (L−1)m and q' = u/(u + M) (one function of one score; different positions are
    independent): E[cv] = L E[(q' − 1/L)²] (the S'-term has mean zero: S'_i is independent of u_i, E S'_i = M) and
    E[cv_g] = σ²_γ [L(E q'² − 2E q'³ + E q'⁴) + L(L−1)(E q'²)² − 2L(L−1) E[q'²/(u+M)] E[(u − m) q'²]].
    One-dimensional Gaussian expectations of smooth bounded functions (64-point Gauss–Hermite, exact to rounding).
    """
    s2, L, gvar = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (s2, L, grad_indep_var)))
    M = (L - 1.0) * np.exp(s2 / 2.0)
    z = np.zeros_like(s2)
    Mx = M[..., None]
    Lx = L[..., None]
    mx = np.exp(s2 / 2.0)[..., None]

    def e(f):
        return expect_1d(f, z, s2, n=64)

    qd = e(lambda y: ((Lx - 1.0) * mx * np.expm1(y - np.log(mx)) / (Lx * (np.exp(y) + Mx))) ** 2)
    q2 = e(lambda y: (np.exp(y) / (np.exp(y) + Mx)) ** 2)
    q3 = e(lambda y: (np.exp(y) / (np.exp(y) + Mx)) ** 3)
    q4 = e(lambda y: (np.exp(y) / (np.exp(y) + Mx)) ** 4)
    a2 = e(lambda y: (np.exp(y) / (np.exp(y) + Mx)) ** 2 / (np.exp(y) + Mx))
    c2 = e(lambda y: mx * np.expm1(y - np.log(mx)) * (np.exp(y) / (np.exp(y) + Mx)) ** 2)
    return {
        "cv": L * qd,
        "cv_g": gvar * (L * (q2 - 2.0 * q3 + q4) + L * (L - 1.0) * q2**2 - 2.0 * L * (L - 1.0) * a2 * c2),
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
        stat = ((y - 1.0 / L) ** 2).sum(dim=-2)  # per softmax row
        stat_g = (gin**2).sum(dim=-2)
        if control_variates:
            sd = column(np.sqrt(s2), 5, dt)
            m = column(np.exp(s2 / 2.0), 5, dt)
            big_m = (L - 1.0) * m
            u = torch.exp(sd * delta)
            den = u + big_m
            qp = u / den
            dev = (L - 1.0) * m * torch.expm1(sd * delta - torch.log(m)) / (L * den)  # q' − 1/L without cancellation
            srest = u.sum(dim=-2, keepdim=True) - u - big_m  # S'_i − M
            cv = (dev * dev - 2.0 * dev * qp * srest / den).sum(dim=-2)
            gind = gam * torch.sqrt(1.0 - column(rg, 5, dt)) * sg
            resid = gind - (qp * gind).sum(dim=-2, keepdim=True)
            cvg = (qp * qp * resid * resid * (1.0 - 2.0 * srest / den)).sum(dim=-2)
            stat = stat - cv
            stat_g = stat_g - cvg
        dvar = stat.mean(dim=(2, 3)) / L
        dgvar = stat_g.mean(dim=(2, 3)) / L
    if control_variates:
        ex = surrogate_moments(s2, L, gvar * (1.0 - rg))
        fwd_e, bwd_e = ex["cv"] / L, ex["cv_g"] / L
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
    return as_quantities(fwd, bwd)


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
