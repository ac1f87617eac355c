"""Verification sweep of single-head attention (Kedia et al. App. A.8; ranges of Table 22 and of the paper's
simulation code, errors of Table 21).

Table 22 (SHA): μ = 0, σ² = 1, σ²_g ∈ [0.1, 10], r, r_g ∈ [0, 1), d_in ∈ [100, 1000], d_k ∈ {32, 64, 128, 256},
L ∈ [300, 1e4], p ∈ [0, 1); the paper's code (simulations/SHA.py) draws σ_q = σ_k ∈ [0.1, 0.6]/√d_in and
σ_v ∈ [10^−0.5, 10^0.5]/√d_in (log-spaced), which we sweep continuously.

How the real module is simulated (float32, batched over configurations × replicates; one replicate = one sequence
with its own weights, input and gradients):

1. Query subsampling. Tokens are exchangeable, so the module is evaluated for the first n_q = 128 query rows
   against all L keys (``SingleHeadAttention(x[:n_q], x)``, which computes those rows of the self-attention
   exactly). Forward statistics use those rows. The input gradient of a full self-attention is linear in the output
   gradient G and decomposes over queries, J[G]_k = Σ_i J_i[g_i]_k; with G = √r_g ξ 1ᵀ + √(1−r_g) Γ (ξ shared, Γ
   independent) its second moments are exact linear combinations of four per-query quantities (α = E|J_i[g]_k|²,
   β = the same for i = k, κ = E[J_i[ξ]_k·J_j[ξ]_k], λ = the same for j = k) and five for the token covariance.
   Two autograd backward passes through the same forward — G with independent rows, then G = ξ on every query row —
   identify them from the keys outside / inside the query rows, and the full-L moments follow exactly
   (e.g. E|J[Γ]_k|² = (L − 1)α + β). No approximation is involved: the estimator is unbiased for any n_q.
   Gradient statistics use the n_q query rows and the next 256 rows; the keys/values are passed to the module as two
   blocks (those rows, the rest), which it projects separately, so autograd skips the unused rows' input gradient.
2. Control variates with exactly known expectations, computed by the simulator from its own draws (the same
   dropout mask, weights, input and output gradient): the uniform-attention output (Σ_k U_ik x_k + τ a_i) W_V with
   U = mask/((1−p)L), and the uniform-attention input gradient Σ_i U_ik W_V g_i plus the query-path surrogate
   τ M W_V g_k on query rows. Every statistic is estimated as mean(statistic − surrogate statistic) + E[surrogate
   statistic]; E[surrogate] is elementary (:func:`surrogate_expectations`, tested against plain Monte Carlo).
   This removes the common-mode noise of the shared component (only #sequences × d_k independent draws) and the
   weight-norm fluctuations, which otherwise dominate.
Standard errors come from the spread of the K independent replicates (sequences).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ...components.attention import ATTENTION_APPROX, SingleHeadAttention, attention_backward, attention_forward
from ...core.moments import GradMoments, Moments
from ..spec import QUANTITIES, ComponentSpec, Estimate, Param
from .common import as_quantities, correlation_and_gradient_params

#: The approximations ``sigprop verify --approx`` may score (checked before any sweep).
APPROXIMATIONS = ATTENTION_APPROX

__all__ = ["SPEC", "make_spec", "surrogate_expectations", "simulate_attention", "N_QUERIES", "in_chunks",
           "query_inputs", "two_pass_gradients", "output_moments", "gradient_statistics", "replicate_estimates",
           "attention_moments", "trailing_axes"]

#: Query rows evaluated per sequence.
N_QUERIES = 128
#: Rows outside the query rows whose input gradient enters the statistics.
N_OUT_ROWS = 256
#: Replicates (independent sequences) per configuration.
REPLICATES = 2
#: Floats of one (sequences × L × d_in) input block processed at once (memory bound).
_CHUNK_FLOATS = 2.5e7


def surrogate_expectations(L, d, e, nq, sqk2, sv2, p, rho, tau) -> dict:
    """Exact expectations of the surrogate statistics (per element; unit-variance output gradient).

    Forward: E|y^s_i|²/d_k = σ²_v [d(ρ(1 + p/((1−p)L)) + τ/((1−p)L)) + τ² d² σ²_qk σ²] and
    E[y^s_i·y^s_l]/d_k = σ²_v [d(ρ + τ/L) + τ² d² σ²_qk ρ] (i ≠ l), using E T_i² = 1 + p/((1−p)L), E U_ik² =
    1/((1−p)L²), E|a_i|² = d²σ²_qk σ², E a_i·a_l = d²σ²_qk ρ, and E over the zero-mean M of every cross term = 0.
    Backward (per element of the d_in-dim gradient, Ω = σ²_v d_k): pass 1 (independent rows) S_out = Ω n_q/((1−p)L²),
    S_in adds Ω τ² d σ²_qk, every pair class Ω n_q/L²; pass 2 (ξ on every query row) S_out = Ω(n_q/((1−p)L²)
    + n_q(n_q−1)/L²), S_in adds Ω τ² d σ²_qk, pairs Ω n_q²/L² (in-in pairs add Ω τ² d σ²_qk).
    """
    sig2 = rho + tau
    om = sv2 * e
    val1 = om * nq / ((1.0 - p) * L**2)
    qry = om * tau**2 * d * sqk2
    val2 = val1 + om * nq * (nq - 1.0) / L**2
    return {
        "y_var": sv2 * (d * (rho * (1.0 + p / ((1.0 - p) * L)) + tau / ((1.0 - p) * L)) + tau**2 * d * d * sqk2 * sig2),
        "y_cov": sv2 * (d * (rho + tau / L) + tau**2 * d * d * sqk2 * rho),
        "S1_out": val1, "S1_in": val1 + qry,
        "C1_oo": om * nq / L**2, "C1_io": om * nq / L**2, "C1_ii": om * nq / L**2,
        "S2_out": val2, "S2_in": val2 + qry,
        "C2_oo": om * nq**2 / L**2, "C2_io": om * nq**2 / L**2, "C2_ii": om * nq**2 / L**2 + qry,
    }


def trailing_axes(v, n, dtype=torch.float32):
    """``v`` (one value per configuration) as a tensor with ``n`` trailing axes of length 1, to broadcast against
    per-configuration samples."""
    t = torch.as_tensor(np.asarray(v, dtype=np.float64), dtype=dtype)
    return t.reshape(t.shape + (1,) * n)


def _class_stats(g: torch.Tensor, nq: int) -> dict:
    """Per-(config, replicate) second moments (per element, float64) of rows [:nq] ("in") and [nq:] ("out")."""
    d = g.shape[-1]
    gi, go = g[..., :nq, :], g[..., nq:, :]
    n_in, n_out = gi.shape[-2], go.shape[-2]
    si = (gi * gi).sum(dim=(-2, -1)).double()
    so = (go * go).sum(dim=(-2, -1)).double()
    ti = gi.sum(dim=-2)
    to = go.sum(dim=-2)
    return {
        "S_in": si / (n_in * d), "S_out": so / (n_out * d),
        "C_ii": ((ti * ti).sum(-1).double() - si) / (n_in * (n_in - 1) * d),
        "C_oo": ((to * to).sum(-1).double() - so) / (n_out * (n_out - 1) * d),
        "C_io": (ti * to).sum(-1).double() / (n_in * n_out * d),
    }


def _extrapolate(s: dict, L: int, nq: int) -> tuple:
    """Full-sequence gradient (var, cov) for independent (pass 1) and shared (pass 2) output gradients."""
    a = s["S1_out"] / nq
    b = s["S1_in"] - (nq - 1) * a
    ind_var = (L - 1) * a + b
    kap = (s["S2_out"] - s["S1_out"]) / (nq * (nq - 1))
    lam = (s["S2_in"] - s["S1_in"] - (nq - 1) * (nq - 2) * kap) / (2 * (nq - 1))
    com_var = ind_var + (L - 1) * (L - 2) * kap + 2 * (L - 1) * lam
    a2 = s["C1_oo"] / nq
    b2 = s["C1_io"] - (nq - 1) * a2
    ind_cov = (L - 2) * a2 + 2 * b2
    k2 = (s["C2_oo"] - s["C1_oo"]) / (nq * (nq - 1))
    lam2 = (s["C2_io"] - s["C1_io"] - (nq - 1) * (nq - 2) * k2) / (nq - 1)
    nu = s["C2_ii"] - s["C1_ii"] - (nq - 2) * (nq - 3) * k2 - 2 * (nq - 2) * lam2
    com_cov = ind_cov + (L - 2) * (L - 3) * k2 + 2 * (L - 2) * lam2 + nu
    return ind_var, com_var, ind_cov, com_cov


def in_chunks(params: dict, chunk: int, simulate_chunk: Callable[[dict], dict]) -> dict:
    """``simulate_chunk`` over consecutive slices of at most ``chunk`` configurations of ``params``, its
    per-replicate arrays (configurations first) assembled for all of them."""
    n = len(params["L"])
    out: dict = {}
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk))
        res = simulate_chunk({key: np.asarray(v)[sl] for key, v in params.items()})
        for q in res:
            out.setdefault(q, np.zeros((n,) + res[q].shape[1:]))[sl] = res[q]
    return out


def query_inputs(L: int, d: int, k: int, nq: int, no: int, rho, tau, gen: torch.Generator) -> tuple:
    """The input x (1, K, L, d), shared part of variance ``rho`` and independent part ``tau`` per configuration,
    and the leaves autograd differentiates (step 1 of the module docstring): the query copy of the first ``nq`` rows,
    the key/value rows whose gradients enter the statistics (the first ``nq + no``) and the key/value blocks
    (those rows, and the rest if any). Returns (x, queries, rows, blocks)."""
    # common random numbers: the configurations of a chunk share the standard normal draws of the input
    shared = torch.randn(1, k, 1, d, generator=gen)
    x = (torch.randn(1, k, L, d, generator=gen) * trailing_axes(np.sqrt(tau), 3)
         + shared * trailing_axes(np.sqrt(rho), 3))
    # the query rows enter the module twice (as queries and as keys/values): a separate leaf for the query copy,
    # whose gradient is added back to those rows (the chain rule of x_q = x[:n_q])
    rows = nq + no
    xq = x[..., :nq, :].clone().requires_grad_(True)
    # key/value rows in two blocks: the first ``rows`` (whose gradients enter the statistics) and the rest, which
    # needs no gradient; the module projects blocks separately, so autograd skips the second
    x_rows = x[..., :rows, :].clone().requires_grad_(True)
    blocks = (x_rows, x[..., rows:, :]) if rows < L else (x_rows,)
    return x, xq, x_rows, blocks


def two_pass_gradients(y: torch.Tensor, x_rows: torch.Tensor, xq: torch.Tensor, nq: int,
                       gen: torch.Generator) -> tuple:
    """The two backward passes of step 1 (module docstring) through the output ``y`` (C, K, n_q, width): output
    gradients with independent rows, then one vector ξ on every row. Returns ((output gradient, input gradient of
    the key/value rows with the query copy's added), …) for the two passes."""
    c, k, _, width = y.shape
    g1 = torch.randn(c, k, nq, width, generator=gen)
    xi = torch.randn(c, k, 1, width, generator=gen).expand(c, k, nq, width)
    passes = []
    for gout, keep_graph in ((g1, True), (xi, False)):
        gkv, gq = torch.autograd.grad(y, (x_rows, xq), gout, retain_graph=keep_graph)
        gkv[..., :nq, :] += gq
        passes.append((gout, gkv))
    return tuple(passes)


def output_moments(y: torch.Tensor, ys: torch.Tensor, nq: int) -> tuple:
    """Per-replicate (mean, var, cov) per element of the output ``y`` (C, K, n_q, width) less its surrogate ``ys``
    (step 2 of the module docstring; the surrogate's expectations are still to be added to var and cov)."""
    width = y.shape[-1]
    ymean = (y - ys).mean(dim=(-2, -1)).double()
    sy = (y * y).sum(dim=(-2, -1)).double()
    sys_ = (ys * ys).sum(dim=(-2, -1)).double()
    col, cols = y.sum(-2), ys.sum(-2)
    var_y = (sy - sys_) / (nq * width)
    cov_y = ((col * col).sum(-1).double() - sy - (cols * cols).sum(-1).double() + sys_) / (nq * (nq - 1) * width)
    return ymean, var_y, cov_y


def gradient_statistics(passes: tuple, nq: int, surrogate: Callable[[torch.Tensor], torch.Tensor] | None,
                        expected: dict) -> tuple[dict, dict]:
    """The class statistics of both passes' input gradients (keys of :func:`surrogate_expectations`: "S1_in", …),
    each less the statistic of ``surrogate(output gradient)`` plus its exact expectation in ``expected`` (no
    control variate where ``surrogate`` is None). Returns them and the surrogate's own statistics."""
    stats, sur = {}, {}
    for tag, (gout, gx) in zip("12", passes, strict=True):
        st = _class_stats(gx, nq)
        if surrogate is not None:
            ss = _class_stats(surrogate(gout), nq)
            for key, v in ss.items():
                sur[key[0] + tag + key[1:]] = v.numpy()
            for key in st:
                st[key] = st[key] - ss[key] + expected[key[0] + tag + key[1:]]
        for key, v in st.items():
            stats[key[0] + tag + key[1:]] = v.numpy()
    return stats, sur


def replicate_estimates(prm: dict, ymean, var_y, cov_y, stats: dict, L: int, nq: int) -> dict:
    """The per-replicate arrays (C, K) a simulation returns: the output's, and the full-sequence gradient's of
    the configurations' output-gradient variance and correlation (from the two passes' statistics)."""
    ind_var, com_var, ind_cov, com_cov = _extrapolate(stats, L, nq)
    gvar = np.asarray(prm["grad_var"])[:, None]
    rg = np.asarray(prm["grad_corr"])[:, None]
    return {"mean": ymean.numpy(), "var": var_y.numpy(), "cov": cov_y.numpy(),
            "grad_var": gvar * ((1 - rg) * ind_var + rg * com_var),
            "grad_cov": gvar * ((1 - rg) * ind_cov + rg * com_cov)}


def simulate_attention(params: dict, replicates: int, generator: torch.Generator, nq_max: int = N_QUERIES,
                       n_out: int = N_OUT_ROWS, control_variates: bool = True, parts: bool = False) -> dict:
    """Per-replicate estimates (arrays (C, K)) of y mean/var/cov and the gradient var/cov of a full self-attention,
    for configurations sharing (L, d_in, d_k). See the module docstring. Keys: mean, var, cov, grad_var, grad_cov.

    ``nq_max`` query rows are evaluated; gradient statistics use those rows and ``n_out`` of the other rows.
    ``parts=True`` returns instead the raw per-replicate surrogate statistics (keys of
    :func:`surrogate_expectations`), to test their expectations.
    """
    L, d, e = (int(params[k][0]) for k in ("L", "d_in", "d_k"))
    nq = min(nq_max, L // 2)
    no = min(n_out, L - nq)
    k = replicates
    chunk = max(1, int(_CHUNK_FLOATS // (k * L * d)))
    return in_chunks(params, chunk,
                     lambda sub: _simulate_chunk(sub, L, d, e, nq, no, k, generator, control_variates, parts))


def _simulate_chunk(prm, L, d, e, nq, no, k, gen, cv, parts=False):
    c = len(prm["L"])
    var = np.asarray(prm.get("var", np.ones(c)), dtype=np.float64)
    r = np.asarray(prm["corr"], dtype=np.float64)
    rho, tau = r * var, (1.0 - r) * var
    sq = np.asarray(prm["q_scale"]) / math.sqrt(d)
    sv = np.asarray(prm["v_scale"]) / math.sqrt(d)
    p = np.asarray(prm["p"], dtype=np.float64)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    mod = SingleHeadAttention(d, e, sigma_q=f32(sq), sigma_k=f32(sq), sigma_v=f32(sv), dropout_p=f32(p),
                              batch_shape=(c, k))
    mod.reset_parameters(generator=gen)
    mod.requires_grad_(False)
    x, xq, x_rows, blocks = query_inputs(L, d, k, nq, no, rho, tau, gen)
    keep = torch.rand(c, k, nq, L, generator=gen) >= trailing_axes(p, 3)
    y = mod(xq, blocks, dropout_mask=keep)
    passes = two_pass_gradients(y, x_rows, xq, nq, gen)
    with torch.no_grad():
        y = y.detach()
        e_sur = {key: torch.as_tensor(v[:, None]) for key, v in
                 surrogate_expectations(L, d, e, nq, sq**4, sv**2, p, rho, tau).items()}
        wq, wk, wv = mod.w_q, mod.w_k, mod.w_v
        u = keep.float() / trailing_axes((1.0 - p) * L, 3)
        if cv:
            a = (x[..., :nq, :] @ wq) @ wk.transpose(-1, -2) / math.sqrt(e)
            ys = (u @ x + trailing_axes(tau, 3) * a) @ wv
        else:
            ys = torch.zeros_like(y)
        sur = {}
        if parts:
            sur["y_var"] = ((ys * ys).sum(dim=(-2, -1)).double() / (nq * e)).numpy()
            cs = ys.sum(-2)
            sur["y_cov"] = (((cs * cs).sum(-1).double() - (ys * ys).sum(dim=(-2, -1)).double())
                            / (nq * (nq - 1) * e)).numpy()
        ymean, var_y, cov_y = output_moments(y, ys, nq)
        if cv:
            var_y = var_y + e_sur["y_var"]
            cov_y = cov_y + e_sur["y_cov"]

        def surrogate(gout):
            w = gout @ wv.transpose(-1, -2)  # rows w_i = W_V g_i
            gs = u[..., :nq + no].transpose(-1, -2) @ w  # uniform-attention value path on the sampled rows
            gs[..., :nq, :] += trailing_axes(tau, 3) * ((w @ wk) @ wq.transpose(-1, -2) / math.sqrt(e))  # τ M w_k
            return gs

        stats, grad_sur = gradient_statistics(passes, nq, surrogate if cv else None, e_sur)
        if parts:
            return {**sur, **grad_sur}
    return replicate_estimates(prm, ymean, var_y, cov_y, stats, L, nq)


def _pooled(v: np.ndarray) -> Estimate:
    k = v.shape[1]
    return Estimate(v.mean(axis=1), v.std(axis=1, ddof=1) / math.sqrt(k))


def _ratio(num: np.ndarray, den: np.ndarray) -> Estimate:
    k = num.shape[1]
    val = num.mean(axis=1) / den.mean(axis=1)
    per = num / den
    return Estimate(val, per.std(axis=1, ddof=1) / math.sqrt(k))


def estimates_from_replicates(res: dict) -> dict:
    """Pool per-replicate arrays (C, K) into {quantity: Estimate} (ratios for the correlations)."""
    return {"mean": _pooled(res["mean"]), "var": _pooled(res["var"]), "corr": _ratio(res["cov"], res["var"]),
            "grad_var": _pooled(res["grad_var"]), "grad_corr": _ratio(res["grad_cov"], res["grad_var"])}


def _simulate(params, budget, generator):
    nq = max(32, int(round(N_QUERIES * min(1.0, budget.scale))))
    return estimates_from_replicates(simulate_attention(params, REPLICATES, generator, nq_max=nq))


def attention_moments(params: dict) -> tuple:
    """The rules' arguments common to the attention sweeps: the input moments (μ = 0, σ² = ``var`` or 1), the
    output-gradient moments, and σ²_q = σ²_k and σ²_v from ``q_scale`` and ``v_scale`` over d_in."""
    d = params["d_in"]
    sq2 = (params["q_scale"] ** 2) / d
    sv2 = (params["v_scale"] ** 2) / d
    m = Moments(0.0, params.get("var", 1.0), params["corr"])
    g = GradMoments(params["grad_var"], params["grad_corr"])
    return m, g, sq2, sv2


def _predict(params, approx="exact"):
    m, g, sq2, sv2 = attention_moments(params)
    d = params["d_in"]
    f = attention_forward(m, d, params["d_k"], params["L"], sq2, sq2, sv2, params["p"], approx=approx)
    b = attention_backward(g, m, d, params["d_k"], params["L"], sq2, sq2, sv2, params["p"], approx=approx)
    return as_quantities(f, b)


def attention_params(extra=()) -> tuple:
    return (
        Param("q_scale", 0.1, 0.6, scale="log",
              doc="σ_q = σ_k = q_scale/√d_in (the paper's code: log-spaced in [0.1, 0.6])"),
        Param("v_scale", 10**-0.5, 10**0.5, scale="log", doc="σ_v = v_scale/√d_in (paper's code: [10^−0.5, 10^0.5])"),
        Param("p", 0.0, 0.9, doc="attention dropout p; Table 22: [0, 1), swept to 0.9 (the paper's code: ≤ 2/3)"),
        *correlation_and_gradient_params(table_22=True),
        Param("d_in", 100, 1000, scale="log", levels=4, integer=True, doc="d_in ∈ [100, 1000], 4 log levels"),
    ) + tuple(extra) + (
        Param("L", 300, 10000, scale="log", levels=6, integer=True,
              doc="sequence length, Table 22: [300, 1e4], 6 log levels"),
    )


def make_spec(approx: str = "exact") -> ComponentSpec:
    return ComponentSpec(
        name="attention" if approx == "exact" else f"attention[{approx}]",
        title="Single-head attention",
        params=attention_params((Param("d_k", 32, 256, values=(32, 64, 128, 256), doc="d_k ∈ {32, 64, 128, 256}"),)),
        quantities=QUANTITIES,
        simulate=_simulate,
        predict=lambda prm: _predict(prm, approx),
        shape_params=("L", "d_in", "d_k"),
        paper={"mean": (0.2, 1.0, 2.5), "var": (1.4, 4.1, 7.8), "grad_var": (2.2, 13.3, 44.5),
               "corr": (1.3, 3.9, 7.4), "grad_corr": (1.6, 4.5, 8.2)},
        n_configs=1024,
        quick_configs=48,
        quick_scale=0.25,
        replicates=REPLICATES,
        note=("Input μ = 0, σ² = 1 as in Table 22. Query-subsampled, two-pass, control-variate Monte Carlo "
              "(module docstring): unbiased for the full self-attention. The paper's Table 21 'corr' columns are "
              "covariance errors; here corr is judged in correlation units."),
    )


SPEC = make_spec()
