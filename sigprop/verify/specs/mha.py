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

from ...components.attention import ATTENTION_APPROX, MultiHeadAttention, mha_backward, mha_forward
from ..spec import QUANTITIES, ComponentSpec, Param
from .attention import (
    attention_moments,
    estimates_from_replicates,
    gradient_statistics,
    in_chunks,
    output_moments,
    query_inputs,
    replicate_estimates,
    surrogate_expectations,
    trailing_axes,
    two_pass_gradients,
)
from .common import as_quantities, correlation_and_gradient_params

#: The approximations ``sigprop verify --approx`` may score (checked before any sweep).
APPROXIMATIONS = ATTENTION_APPROX

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
    nq = min(max(32, nq_max // h), L // 2)
    no = min(n_out, L - nq)
    k = replicates
    chunk = max(1, int(_CHUNK_FLOATS // (k * L * max(d, h * dh))))
    return in_chunks(params, chunk, lambda sub: _chunk(sub, L, d, dh, h, p, nq, no, k, generator))


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
    x, xq, x_rows, blocks = query_inputs(L, d, k, nq, no, rho, tau, gen)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        y = mod(xq, blocks)
        torch.manual_seed(seed)
        keep = sdpa_dropout_mask((c, k, h, nq, L), p)
    passes = two_pass_gradients(y, x_rows, xq, nq, gen)
    with torch.no_grad():
        y = y.detach()
        wq, wk, wv = (_per_head(w, h, dh) for w in (mod.w_q, mod.w_k, mod.w_v))  # (c, k, H, d, dh)
        u = keep.float() / ((1.0 - p) * L)  # (c, k, H, nq, L)
        tau_t = trailing_axes(tau, 4)
        a = (x[..., None, :nq, :] @ wq) @ wk.transpose(-1, -2) / math.sqrt(dh)  # (c, k, H, nq, d)
        ys = ((u @ x[..., None, :, :] + tau_t * a) @ wv).transpose(-2, -3).flatten(-2)  # (c, k, nq, H·dh)
        e_sur = {key: torch.as_tensor(np.asarray(v)[:, None]) for key, v in
                 surrogate_expectations(L, d, dh, nq, sq**4, sv**2, p, rho, tau).items()}
        ymean, var_y, cov_y = output_moments(y, ys, nq)
        var_y = var_y + e_sur["y_var"]
        cov_y = cov_y + e_sur["y_cov"]

        def surrogate(gout):
            w = gout.unflatten(-1, (h, dh)).transpose(-2, -3) @ wv.transpose(-1, -2)  # (c, k, H, nq, d)
            gs = (u[..., :nq + no].transpose(-1, -2) @ w).sum(dim=2)  # uniform value paths, summed over heads
            gs[..., :nq, :] += (tau_t * ((w @ wk) @ wq.transpose(-1, -2) / math.sqrt(dh))).sum(dim=2)
            return gs

        # every head's surrogate has the single-head expectation: their sum, h times it
        stats, _ = gradient_statistics(passes, nq, surrogate, {key: h * v for key, v in e_sur.items()})
    return replicate_estimates(prm, ymean, var_y, cov_y, stats, L, nq)


def _simulate(params, budget, generator):
    nq_max = max(32, int(round(N_QUERIES * min(1.0, budget.scale))))  # --quick: fewer query rows, as attention's
    return estimates_from_replicates(simulate_mha(params, REPLICATES, generator, nq_max=nq_max))


def _predict(params, approx="exact"):
    m, g, sq2, sv2 = attention_moments(params)
    args = (params["n_heads"], params["d_in"], params["d_head"], params["L"], sq2, sq2, sv2, params["p"])
    return as_quantities(mha_forward(m, *args, approx=approx), mha_backward(g, m, *args, approx=approx))


def make_spec(approx: str = "exact") -> ComponentSpec:
    return ComponentSpec(
        name="mha" if approx == "exact" else f"mha[{approx}]",
        title="Multi-head attention (SDPA)",
        params=(
            Param("q_scale", 0.1, 0.6, scale="log", doc="σ_q = σ_k = q_scale/√d_in (as the single-head sweep)"),
            Param("v_scale", 10**-0.5, 10**0.5, scale="log", doc="σ_v = v_scale/√d_in"),
            *correlation_and_gradient_params(),
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
        replicates=REPLICATES,
        note=("No Table 21/22 row exists for multi-head attention; ranges reduced for cost as documented per "
              "parameter. Same unbiased variance-reduced estimator as the single-head sweep."),
    )


SPEC = make_spec()
