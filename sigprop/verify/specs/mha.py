"""Verification sweep of multi-head attention (:class:`sigprop.components.attention.MultiHeadAttention`, computed by
``torch.nn.functional.scaled_dot_product_attention``; rules :func:`mha_forward` / :func:`mha_backward`, composed from
the single-head rules of Kedia et al. App. A.8).

Table 22 has no multi-head row. The per-head rules are swept over Table 22's full single-head ranges by the
"attention" sweep; this sweep checks the composition (H heads through SDPA, gradients adding over heads) over
H ∈ {1, 2, 4, 8, 16} and d_head ∈ {32, 64, 128, 256} (the single-head d_k values) with the single-head ranges of
σ_q, σ_v, r, r_g, σ²_g, and, for cost (the work grows with H·d_head·d_in·L), L ∈ [300, 1000], d_in ∈ [100, 464] and
dropout p ∈ {0, 0.45, 0.9} (SDPA takes one probability per call, so p is a shape parameter).

Simulation: as the single-head sweep (module docstring of :mod:`sigprop.verify.specs.attention`: query subsampling,
two backward passes, control variates with exact expectations), per head. SDPA draws its dropout mask from the
global generator; the simulator seeds it (inside ``torch.random.fork_rng``) and regenerates the same Bernoulli mask
with ``torch.dropout`` for the control variate (any Bernoulli(1 − p) mask keeps the estimator unbiased; the same
mask makes it precise; a test checks that the regenerated mask reproduces SDPA's output).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...components.attention import MultiHeadAttention, mha_backward, mha_forward
from ...core.moments import GradMoments, Moments
from ..spec import QUANTITIES, ComponentSpec, Param
from .attention import _class_stats, _col, _extrapolate, estimates_from_replicates, surrogate_expectations
from .common import CORR_MAX

__all__ = ["SPEC", "make_spec", "simulate_mha", "sdpa_dropout_mask"]

#: Query rows per sequence: N_QUERIES // n_heads, at least 32 (the heads multiply the samples).
N_QUERIES = 128
N_OUT_ROWS = 256
REPLICATES = 2
_CHUNK_FLOATS = 2.5e7


def sdpa_dropout_mask(shape, p: float) -> torch.Tensor:
    """The keep-mask SDPA's math path draws from the global generator at its current state (Bernoulli(1 − p))."""
    if p <= 0.0:
        return torch.ones(shape, dtype=torch.bool)
    return torch.dropout(torch.ones(shape), p, True) > 0


def simulate_mha(params: dict, replicates: int, generator: torch.Generator, nq_max: int = N_QUERIES,
                 n_out: int = N_OUT_ROWS) -> dict:
    """Per-replicate (C, K) estimates of y mean/var/cov and the input-gradient var/cov of a full multi-head
    self-attention, for configurations sharing (L, d_in, d_head, n_heads, p)."""
    L, d, dh, h = (int(params[k][0]) for k in ("L", "d_in", "d_head", "n_heads"))
    p = float(params["p"][0])
    n = len(params["L"])
    nq = min(max(32, nq_max // h), L // 2)
    no = min(n_out, L - nq)
    k = replicates
    out: dict = {}
    chunk = max(1, int(_CHUNK_FLOATS // (k * L * max(d, h * dh))))
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk))
        sub = {key: np.asarray(v)[sl] for key, v in params.items()}
        res = _chunk(sub, L, d, dh, h, p, nq, no, k, generator)
        for q in res:
            out.setdefault(q, np.zeros((n, k)))[sl] = res[q]
    return out


def _per_head(w: torch.Tensor, h: int, dh: int) -> torch.Tensor:
    """(c, k, d, H·dh) → (c, k, H, d, dh)."""
    return w.unflatten(-1, (h, dh)).movedim(-2, -3)


def _chunk(prm, L, d, dh, h, p, nq, no, k, gen):
    c = len(prm["L"])
    r = np.asarray(prm["corr"], dtype=np.float64)
    rho, tau = r, 1.0 - r
    sq = np.asarray(prm["q_scale"]) / math.sqrt(d)
    sv = np.asarray(prm["v_scale"]) / math.sqrt(d)
    f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    mod = MultiHeadAttention(d, h, dh, sigma_q=f32(sq), sigma_k=f32(sq), sigma_v=f32(sv), dropout_p=p,
                             batch_shape=(c, k)).train()
    mod.reset_parameters(generator=gen)
    mod.requires_grad_(False)
    shared = torch.randn(1, k, 1, d, generator=gen)
    x = torch.randn(1, k, L, d, generator=gen) * _col(np.sqrt(tau), 3) + shared * _col(np.sqrt(rho), 3)
    rows = nq + no
    xq = x[..., :nq, :].clone().requires_grad_(True)
    x_rows = x[..., :rows, :].clone().requires_grad_(True)
    blocks = (x_rows, x[..., rows:, :]) if rows < L else (x_rows,)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        y = mod(xq, blocks)
        torch.manual_seed(seed)
        keep = sdpa_dropout_mask((c, k, h, nq, L), p)
    he = h * dh
    g1 = torch.randn(c, k, nq, he, generator=gen)
    xi = torch.randn(c, k, 1, he, generator=gen).expand(c, k, nq, he)
    grads = []
    for gout, keep_graph in ((g1, True), (xi, False)):
        gkv, gq = torch.autograd.grad(y, (x_rows, xq), gout, retain_graph=keep_graph)
        gkv[..., :nq, :] += gq
        grads.append(gkv)
    with torch.no_grad():
        y = y.detach()
        xd = x
        wq, wk, wv = (_per_head(w, h, dh) for w in (mod.w_q, mod.w_k, mod.w_v))  # (c, k, H, d, dh)
        u = keep.float() / ((1.0 - p) * L)  # (c, k, H, nq, L)
        tau_t = _col(tau, 4)
        a = (xd[..., None, :nq, :] @ wq) @ wk.transpose(-1, -2) / math.sqrt(dh)  # (c, k, H, nq, d)
        ys = ((u @ xd[..., None, :, :] + tau_t * a) @ wv).transpose(-2, -3).flatten(-2)  # (c, k, nq, H·dh)
        sy = (y * y).sum(dim=(-2, -1)).double()
        sys_ = (ys * ys).sum(dim=(-2, -1)).double()
        col, cols = y.sum(-2), ys.sum(-2)
        e_sur = {key: torch.as_tensor(np.asarray(v)[:, None]) for key, v in
                 surrogate_expectations(L, d, dh, nq, sq**4, sv**2, p, rho, tau).items()}
        var_y = (sy - sys_) / (nq * he) + e_sur["y_var"]
        cov_y = (((col * col).sum(-1).double() - sy - (cols * cols).sum(-1).double() + sys_) / (nq * (nq - 1) * he)
                 + e_sur["y_cov"])
        ymean = (y - ys).mean(dim=(-2, -1)).double()
        stats = {}
        for tag, gx, gout in (("1", grads[0], g1), ("2", grads[1], xi)):
            st = _class_stats(gx, nq)
            w = gout.unflatten(-1, (h, dh)).transpose(-2, -3) @ wv.transpose(-1, -2)  # (c, k, H, nq, d)
            gs = (u[..., :rows].transpose(-1, -2) @ w).sum(dim=2)  # uniform value paths, summed over heads
            gs[..., :nq, :] += (tau_t * ((w @ wk) @ wq.transpose(-1, -2) / math.sqrt(dh))).sum(dim=2)
            ss = _class_stats(gs, nq)
            for key in st:
                st[key] = st[key] - ss[key] + h * e_sur[key[0] + tag + key[1:]]
            for key, v in st.items():
                stats[key[0] + tag + key[1:]] = v.numpy()
        ind_var, com_var, ind_cov, com_cov = _extrapolate(stats, L, nq)
    gvar = np.asarray(prm["grad_var"])[:, None]
    rg = np.asarray(prm["grad_corr"])[:, None]
    return {"mean": ymean.numpy(), "var": var_y.numpy(), "cov": cov_y.numpy(),
            "grad_var": gvar * ((1 - rg) * ind_var + rg * com_var),
            "grad_cov": gvar * ((1 - rg) * ind_cov + rg * com_cov)}


def _simulate(params, budget, generator):
    return estimates_from_replicates(simulate_mha(params, REPLICATES, generator))


def _predict(params, approx="exact"):
    d = params["d_in"]
    sq2 = params["q_scale"] ** 2 / d
    sv2 = params["v_scale"] ** 2 / d
    m = Moments(0.0, 1.0, params["corr"])
    g = GradMoments(params["grad_var"], params["grad_corr"])
    args = (params["n_heads"], d, params["d_head"], params["L"], sq2, sq2, sv2, params["p"])
    f = mha_forward(m, *args, approx=approx)
    b = mha_backward(g, m, *args, approx=approx)
    return {"mean": f.mean, "var": f.var, "corr": f.corr, "grad_var": b.var, "grad_corr": b.corr}


def make_spec(approx: str = "exact") -> ComponentSpec:
    return ComponentSpec(
        name="mha" if approx == "exact" else f"mha[{approx}]",
        title="Multi-head attention (SDPA)",
        params=(
            Param("q_scale", 0.1, 0.6, scale="log", doc="σ_q = σ_k = q_scale/√d_in (as the single-head sweep)"),
            Param("v_scale", 10**-0.5, 10**0.5, scale="log", doc="σ_v = v_scale/√d_in"),
            Param("corr", 0.0, CORR_MAX, doc="input token correlation r"),
            Param("grad_var", 0.1, 10.0, scale="log", doc="output-gradient variance σ²_g"),
            Param("grad_corr", 0.0, CORR_MAX, doc="output-gradient token correlation r_g"),
            Param("p", 0.0, 0.9, values=(0.0, 0.45, 0.9), doc="dropout p: SDPA takes one float, 3 levels in [0, 0.9]"),
            Param("n_heads", 1, 16, values=(1, 2, 4, 8, 16), doc="heads H"),
            Param("d_head", 32, 256, values=(32, 64, 128, 256), doc="head width (the single-head d_k values)"),
            Param("d_in", 100, 464, scale="log", levels=3, integer=True,
                  doc="d_in ∈ [100, 464] (3 log levels; single-head sweep: [100, 1000]) for cost"),
            Param("L", 300, 1000, scale="log", levels=3, integer=True,
                  doc="L ∈ [300, 1000] (3 log levels; single-head sweep: [300, 1e4]) for cost"),
        ),
        quantities=QUANTITIES,
        simulate=_simulate,
        predict=lambda prm: _predict(prm, approx),
        shape_params=("L", "d_in", "d_head", "n_heads", "p"),
        n_configs=1000,
        quick_configs=48,
        quick_scale=0.25,
        note=("No Table 21/22 row exists for multi-head attention; ranges reduced for cost as documented per "
              "parameter. Same unbiased variance-reduced estimator as the single-head sweep."),
    )


SPEC = make_spec()
