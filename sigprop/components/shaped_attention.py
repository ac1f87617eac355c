"""Shaped attention: the module and its moment rules (Noci et al. 2023, Secs. 4.1–4.2, Eqs. 1, 8–11, Thm. 4.2,
Lemmas C.1–C.3; App. D, Eq. 33).

Module. Per head, with X ∈ R^{m×n} (m tokens, width n = ``d_in``), Q = X W_Q, K = X W_K ∈ R^{m×n_k}:

    A = γ₁ I + Softmax(Q Kᵀ/τ) − γ₂ W,     τ = τ₀ √(n n_k)                          (Eq. 9; γ₁, γ₂ of Eq. 33)
    head output = A X W_V

where W is the uniform attention over each query's visible keys: W_αδ = 1/m_α for the m_α keys that row α may see
(all m without masking; δ ≤ α with causal masking, Sec. 4.2: "centering each i-th row of the Softmax matrix by a
different factor 1/m_i"), zero elsewhere; the softmax is masked the same way, so A is zero above the diagonal when
causal. Every row of Softmax − W sums to 0, so a row of A sums to γ₁ + 1 − γ₂ (= 1 at γ₁ = γ₂ = 1). Heads are
concatenated (width H·n_k); compose with :class:`~sigprop.components.linear.Linear` for W_O.

Parametrisation. The paper writes the weights as W/√n with W ~ N(0, 1) (Eqs. 1, 2); here each weight carries its own
standard deviation, default σ_q = σ_k = σ_v = 1/√n, which is the same map. App. D instead folds √n into the Q/K
init (std n^{-3/4}) with τ = √n_k; at initialisation the two are equal — pass ``sigma_q``, ``sigma_k`` and
``tau`` to build either. Eq. 1's single-head block X_{l+1} = λX + γ A X W_V/√n is ``n_heads=1, d_head=n`` with no
output projection; with an output projection W_O (the sigprop attention block), σ_v² σ_o² n_k H = 1/n gives the
same second moments.

Who owns λ and γ: the residual, not this module. X_{l+1} = λ X + γ·ShapedAttention(X) is
:class:`~sigprop.components.residual.Residual` with ``lam=λ, beta=γ``; the condition λ² + γ² = 1 (Sec. 2,
Thm. 4.2) is the caller's (the init scheme's) to impose. γ₁, γ₂ (Eq. 33) belong to this module: ``gamma_mode``
"fixed" (buffers), "learn" (parameters, App. D "Learn") or "recover" (buffers annealed linearly from their initial
values to 0 over ``anneal_steps`` optimiser steps by :meth:`ShapedAttention.anneal`, App. D "Recover"; at γ₁ = γ₂ =
0 the layer is standard softmax attention with temperature τ).

Moment rules (what is exact and what is leading order). Let the input have per-element mean μ, variance σ² and token
correlation r; the Gram matrix V = X Xᵀ/n then has expectation q = σ² + μ² on the diagonal and p = rσ² + μ² off it;
s = q − p = (1 − r)σ². Over W_Q, W_K the logits L = QKᵀ/τ have E L = 0 and (Lemma C.1, exact for Gaussian weights)

    E[L^{αδ} L^{βω}] = κ V^{αβ} V^{δω},     κ = n_k σ_q² σ_k² n²/τ²      (= 1/(τ₀² n) at the default init).

The softmax is expanded around the uniform row (Eq. 8; Eq. 8 prints the second-order bracket with a sign slip —
Eq. 10's S₂ has the correct u² − mean(u²)): A = A₀ + E₁ + E₂ + O(L³), A₀ = γ₁ I + (1−γ₂) W,
E₁^{αδ} = W_αδ u^{αδ}, E₂^{αδ} = W_αδ (u^{αδ 2} − Σ_δ' W_αδ' u^{αδ' 2})/2, u^{αδ} = L^{αδ} − Σ_δ' W_αδ' L^{αδ'}.
Odd powers of L vanish in expectation (L is odd in W_Q), so

    E[A V Aᵀ] = A₀ V A₀ᵀ + E[E₁ V E₁ᵀ] + A₀ V E[E₂]ᵀ + E[E₂] V A₀ᵀ + O(κ²q⁵).

For an exchangeable V (V = sI + pJ, the covariance model of :mod:`sigprop.core.moments`) E[E₂] = 0 exactly, and

    E[E₁ V E₁ᵀ]^{αβ} = κ s² V^{αβ} (a − 1)/(a b),    a = min(m_α, m_β), b = max(m_α, m_β)

(bidirectional: a = b = m; this is Thm. 4.2's drift term (1/m²)Σ V^{νκ} S₁^{αν,βκ} at τ₀² n = 1/κ, and its S₂
term vanishes). A head's output element is Σ_k (AX)_αk W_V[k, i], so over W_V (exact):
σ²_out = n σ_v² · mean_α E[AVAᵀ]^{αα}, Cov_out = n σ_v² · mean_{α≠β} E[AVAᵀ]^{αβ}, μ_out = 0, r^d_out = 0.
The token averages are closed forms in the harmonic numbers H_m, H_m^{(2)} (causal) — see
:func:`shaped_attention_gram`. Hence:

* the A₀ part (all orders in γ₁, γ₂; the κ⁰ term) is exact given V;
* the κ term is exact at first order in κ; the error is O(κ²) relative to the κ⁰ term (the logit variance κq²
  must be small: the rules are a *large-τ* expansion, as is Thm. 4.2);
* V is replaced by its expectation. Its O(n^{-1/2}) fluctuations change E[AVAᵀ] only at O(κ/n), but across many
  layers they are what Thm. 4.2's diffusion term describes: a walk of expected moments (``sigprop.predict``)
  captures the drift, not the spread of the per-network covariance, which is of the same order over d ∝ n layers;
* causal: the output's token covariance is not exchangeable; the rule returns its token averages, and the next rule
  assumes exchangeability again (exact at κ⁰ when γ₂ = 1, an approximation otherwise).

Backward (:func:`shaped_attention_backward`): **zeroth order in κ only** — the value path through A₀,
σ²_gin = n_out σ_v² mean_δ (A₀ᵀ Γ A₀)^{δδ} with Γ the output-gradient token covariance (exact given A = A₀). The
O(κ) corrections (E[E₁ᵀ Γ E₁] in the value path, the query/key paths through the softmax, and their cross term with
the value path) are not derived here; they are O(κ) relative, the same order as the forward's κ term.

Assumes: Gaussian weights independent of the input (initialisation), exchangeable tokens, L ≥ 1, no dropout.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from scipy import special
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import Rules
from .shaped_relu import check_shaped_mode, linear_anneal

__all__ = [
    "ShapedAttention",
    "shaped_temperature",
    "shaped_kappa",
    "shaped_attention",
    "shaped_attention_matrix",
    "shaped_mask_sums",
    "shaped_attention_gram",
    "shaped_attention_forward",
    "shaped_attention_backward",
]


# ------------------------------------------------------------------------------------------------------------
# tensors
# ------------------------------------------------------------------------------------------------------------

def shaped_temperature(n: Stat, d_head: Stat, tau0: Stat = 1.0) -> Stat:
    """τ = τ₀ √(n n_k) (Noci et al. Eq. 9). Raises ``ValueError`` unless n, n_k ≥ 1 and τ₀ > 0."""
    n = check_range(n, "width n", lo=1.0, allowed="[1, inf)")
    d_head = check_range(d_head, "d_head", lo=1.0, allowed="[1, inf)")
    tau0 = check_range(tau0, "tau0", lo=0.0, lo_open=True, allowed="(0, inf)")
    return tau0 * np.sqrt(n * d_head)


def _visible(lq: int, lk: int, causal: bool, key_padding_mask: torch.Tensor | None,
             device: torch.device | str | None) -> torch.Tensor | None:
    """Boolean (…, L_q, L_k) mask of the keys each query may see, or None when it sees all of them."""
    mask = None
    if causal:
        mask = torch.ones(lq, lk, dtype=torch.bool, device=device).tril()
    if key_padding_mask is not None:
        kp = key_padding_mask.bool()[..., None, :]
        mask = kp if mask is None else mask & kp
    return mask


def shaped_attention_matrix(q: torch.Tensor, k: torch.Tensor, tau: float, gamma1: float | torch.Tensor = 1.0,
                            gamma2: float | torch.Tensor = 1.0, causal: bool = False,
                            key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """A = γ₁ I + Softmax(q kᵀ/τ) − γ₂ W (Noci et al. Eqs. 9, 33; Sec. 4.2 for masking), shape (…, L, L).

    ``q``, ``k``: (…, L, n_k) projected queries and keys (leading dimensions broadcast, e.g. heads or weight
    draws). W_αδ = 1/m_α over the m_α keys row α may see (causal: δ ≤ α; ``key_padding_mask`` (…, L), True at real
    tokens, removes padded keys), zero elsewhere; the softmax is masked alike. A row with no visible key gets
    Softmax − W = 0.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (got {q.shape[-1]} and {k.shape[-1]})")
    lq, lk = q.shape[-2], k.shape[-2]
    if causal and lq != lk:
        raise ValueError(f"causal shaped attention needs as many queries as keys (got {lq} and {lk})")
    logits = (q @ k.transpose(-1, -2)) / tau
    mask = _visible(lq, lk, causal, key_padding_mask, q.device)
    if mask is None:
        centred = torch.softmax(logits, dim=-1) - 1.0 / lk
    else:
        logits = logits.masked_fill(~mask, float("-inf"))
        count = mask.sum(-1, keepdim=True)
        probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)
        centred = torch.where(mask, probs - 1.0 / count.clamp(min=1).to(probs.dtype), 0.0)
        centred = torch.where(count > 0, centred, 0.0)
    eye = torch.eye(lq, lk, dtype=centred.dtype, device=centred.device)
    return gamma1 * eye + centred + (1.0 - gamma2) * _uniform(mask, lq, lk, centred)


def _uniform(mask: torch.Tensor | None, lq: int, lk: int, like: torch.Tensor) -> torch.Tensor:
    """W: the uniform attention over each row's visible keys (…, L_q, L_k)."""
    if mask is None:
        return torch.full((lq, lk), 1.0 / lk, dtype=like.dtype, device=like.device)
    m = mask.to(like.dtype)
    return m / m.sum(-1, keepdim=True).clamp(min=1.0)


def _mean_visible(v: torch.Tensor, causal: bool, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """W v without forming W: (…, H, L, d) → (…, H, L, d), the mean of v over each query's visible keys."""
    if key_padding_mask is not None:
        kp = key_padding_mask.to(v.dtype)[..., None, :, None]  # (…, 1 head, L, 1)
        v = v * kp
        count = kp.expand(*v.shape[:-1], 1)
    else:
        count = torch.ones_like(v[..., :1])
    if causal:
        return v.cumsum(-2) / count.cumsum(-2).clamp(min=1.0)
    return (v.sum(-2, keepdim=True) / count.sum(-2, keepdim=True).clamp(min=1.0)).expand_as(v)


def shaped_attention(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, n_heads: int, tau: float,
                     gamma1: float | torch.Tensor = 1.0, gamma2: float | torch.Tensor = 1.0, causal: bool = False,
                     key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Multi-head shaped self-attention, heads concatenated: (…, L, d_in) → (…, L, H·n_k).

    Per head A X W_V with A from :func:`shaped_attention_matrix`, computed as γ₁ V + SDPA(Q, K, V; scale 1/τ)
    − γ₂ W V (``torch.nn.functional.scaled_dot_product_attention`` for the softmax part, a (cumulative) mean for
    W V), so no L×L matrix is formed for the centring. The weights (d_in, H·n_k) may carry leading batch dimensions
    that broadcast against x's leading dimensions (independent weight draws for Monte Carlo).
    """
    hd = w_q.shape[-1]
    if hd % n_heads:
        raise ValueError(f"the projection width {hd} must be divisible by n_heads={n_heads}")
    if x.shape[-1] != w_q.shape[-2]:
        raise ValueError(f"input width {x.shape[-1]} does not match the weights' d_in {w_q.shape[-2]}")

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(-1, (n_heads, hd // n_heads)).transpose(-2, -3)

    q, k, v = heads(x @ w_q), heads(x @ w_k), heads(x @ w_v)
    mask = None
    if key_padding_mask is not None:
        mask = _visible(q.shape[-2], k.shape[-2], causal, key_padding_mask[..., None, :], x.device)
    soft = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None,
                                          scale=1.0 / float(tau))
    if mask is not None:  # rows without any visible key: Softmax − W = 0 by definition
        soft = torch.where(mask.any(-1, keepdim=True), soft.nan_to_num(0.0), 0.0)
    out = gamma1 * v + soft - gamma2 * _mean_visible(v, causal, key_padding_mask)
    return out.transpose(-2, -3).flatten(-2)


# ------------------------------------------------------------------------------------------------------------
# moment rules
# ------------------------------------------------------------------------------------------------------------

def shaped_kappa(d_in: Stat, d_head: Stat, sigma_q2: Stat, sigma_k2: Stat, tau: Stat) -> Stat:
    """κ = n_k σ_q² σ_k² n²/τ² with E[L^{αδ}L^{βω}] = κ V^{αβ}V^{δω} for the logits L = X W_Q W_Kᵀ Xᵀ/τ and
    V = XXᵀ/n (Noci et al. Lemma C.1, exact for Gaussian weights); 1/(τ₀² n) at the paper's init."""
    d_in = check_range(d_in, "d_in", lo=1.0, allowed="[1, inf)")
    d_head = check_range(d_head, "d_head", lo=1.0, allowed="[1, inf)")
    sq = check_range(sigma_q2, "sigma_q2", lo=0.0, lo_open=True, allowed="(0, inf)")
    sk = check_range(sigma_k2, "sigma_k2", lo=0.0, lo_open=True, allowed="(0, inf)")
    tau = check_range(tau, "tau", lo=0.0, lo_open=True, allowed="(0, inf)")
    return d_head * sq * sk * d_in**2 / tau**2


def _harmonic(L: Stat) -> tuple[Stat, Stat]:
    """(H_L, H_L^{(2)}) for arrays of L ≥ 1 (digamma / trigamma)."""
    L = np.asarray(L, dtype=np.float64)
    return special.digamma(L + 1.0) + np.euler_gamma, np.pi**2 / 6.0 - special.polygamma(1, L + 1.0)


def shaped_mask_sums(L: Stat, causal: bool = False) -> dict:
    """Traces and total sums of the matrices built from W (the uniform attention over visible keys, L tokens):

    ``tr_w`` = tr W; ``tr_wwt`` = tr WWᵀ = Σ_α 1/m_α; ``sum_wwt`` = 1ᵀWWᵀ1 = Σ_δ c_δ² (c = column sums of W);
    ``sum_w`` = 1ᵀW1 = L. Bidirectional (m_α = L): 1, 1, L. Causal (m_α = α + 1): H_L, H_L, 2L − H_L
    (c_δ = H_L − H_δ and Σ_{δ<L} (H_L − H_δ)² = 2L − H_L). Also the κ-term sums
    ``k_diag`` = Σ_α (m_α − 1)/m_α² and ``k_off`` = Σ_{α≠β} (a − 1)/(ab), a = min(m_α, m_β), b = max:
    bidirectional (L−1)/L and (L−1)²/L; causal H_L − H_L^{(2)} and 2(L − H_L) − H_L² + H_L^{(2)}.
    """
    L = check_range(L, "sequence length L", lo=1.0, allowed="[1, inf)")
    L = np.asarray(L, dtype=np.float64)
    if causal:
        h1, h2 = _harmonic(L)
        return {"tr_w": h1, "tr_wwt": h1, "sum_wwt": 2.0 * L - h1, "sum_w": L,
                "k_diag": h1 - h2, "k_off": 2.0 * (L - h1) - h1**2 + h2}
    one = np.ones_like(L)
    return {"tr_w": one, "tr_wwt": one, "sum_wwt": L, "sum_w": L,
            "k_diag": (L - 1.0) / L, "k_off": (L - 1.0) ** 2 / L}


def _avg(trace: Stat, total: Stat, L: Stat) -> tuple[Stat, Stat]:
    """(mean diagonal entry, mean off-diagonal entry) from a matrix's trace and total sum (L ≥ 2 for the latter)."""
    off = np.where(L > 1, (total - trace) / np.maximum(L * (L - 1.0), 1.0), 0.0)
    return trace / L, off


def shaped_attention_gram(q2: Stat, p2: Stat, L: Stat, kappa: Stat, gamma1: Stat = 1.0, gamma2: Stat = 1.0,
                          causal: bool = False) -> tuple[Stat, Stat]:
    """Token averages of E[A V Aᵀ] for an exchangeable V (diagonal q, off-diagonal p), to first order in κ.

    Returns (mean diagonal entry, mean off-diagonal entry). With s = q − p, c = 1 − γ₂ and the sums of
    :func:`shaped_mask_sums` (A₀ = γ₁ I + cW, V = sI + pJ, WJ = J):

        tr  = γ₁² L q + γ₁c (2s tr_w + 2pL) + c² (s tr_wwt + pL) + κ q s² k_diag
        sum = γ₁² (sL + pL²) + γ₁c (2sL + 2pL²) + c² (s sum_wwt + pL²) + κ p s² k_off + (κ-diagonal term)

    (module docstring: the κ⁰ part is exact, the κ term exact at first order, E[E₂] = 0 for exchangeable V).
    """
    t = shaped_mask_sums(L, causal)
    L = np.asarray(L, dtype=np.float64)
    s = q2 - p2
    c = 1.0 - gamma2
    tr0 = gamma1**2 * L * q2 + gamma1 * c * (2.0 * s * t["tr_w"] + 2.0 * p2 * L) + c**2 * (s * t["tr_wwt"] + p2 * L)
    sum0 = (gamma1**2 * (s * L + p2 * L**2) + gamma1 * c * (2.0 * s * L + 2.0 * p2 * L**2)
            + c**2 * (s * t["sum_wwt"] + p2 * L**2))
    k_tr = kappa * q2 * s**2 * t["k_diag"]
    k_off = kappa * p2 * s**2 * t["k_off"]
    return _avg(tr0 + k_tr, sum0 + k_tr + k_off, L)


def _gram_input(m: Moments) -> tuple[Stat, Stat]:
    """(q, p) = (σ² + μ², rσ² + μ²): the expected Gram entries of the input."""
    return m.var + m.mean**2, m.corr * m.var + m.mean**2


def shaped_attention_forward(m: Moments, d_in: Stat, d_head: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat,
                             sigma_v2: Stat, tau: Stat, gamma1: Stat = 1.0,
                             gamma2: Stat = 1.0, causal: bool = False) -> Moments:
    """Moments of one shaped-attention head's output A X W_V (the residual *branch*; Noci et al. Eqs. 9, 33,
    Thm. 4.2's drift; module docstring for what is exact and what is leading order):

        σ²_out = d_in σ_v² D,  Cov_out = d_in σ_v² O,  μ_out = 0,  r^d_out = 0,

    with (D, O) = :func:`shaped_attention_gram` (q = σ² + μ², p = rσ² + μ², κ = :func:`shaped_kappa`). At
    γ₁ = γ₂ = 1, bidirectional: D = q(1 + κ s²(L−1)/L²), O = p(1 + κ s²(L−1)/L²). Multi-head: every output
    element belongs to one head, so the same formula holds with d_head = n_k per head.
    Raises ``ValueError`` outside the domain (dimensions < 1, non-positive σ² or τ).
    """
    kappa = shaped_kappa(d_in, d_head, sigma_q2, sigma_k2, tau)
    sv = check_range(sigma_v2, "sigma_v2", lo=0.0, lo_open=True, allowed="(0, inf)")
    q2, p2 = _gram_input(m)
    diag, off = shaped_attention_gram(q2, p2, L, kappa, gamma1, gamma2, causal)
    scale = d_in * sv
    zero = 0.0 * diag
    return Moments(mean=zero, var=scale * diag, corr=clip_corr(off / diag), corr_hidden=zero)


def shaped_attention_backward(g: GradMoments, m_in: Moments, d_out: Stat, L: Stat, sigma_v2: Stat, gamma1: Stat = 1.0,
                              gamma2: Stat = 1.0,
                              causal: bool = False) -> GradMoments:
    """Input-gradient moments of a shaped-attention layer's value path at **zeroth order in κ** (A = A₀ =
    γ₁ I + (1 − γ₂) W): g_X = A₀ᵀ G W_Vᵀ, so with Γ = σ²_g((1 − r_g) I + r_g J), c = 1 − γ₂,

        tr/σ²_g  = γ₁² L + γ₁c ((1−r_g) 2 tr_w + 2 r_g L) + c² ((1−r_g) tr_wwt + r_g sum_wwt),
        sum/σ²_g = γ₁² (L + r_g L(L−1)) + γ₁c ((1−r_g) 2L + 2 r_g L²) + c² ((1−r_g) L + r_g L²),
        σ²_gin = d_out σ_v² tr/L,   Cov_gin = d_out σ_v² (sum − tr)/(L(L−1))

    d_out = H·n_k (all heads' value outputs). Exact when κ → 0; the O(κ) corrections (value-path softmax
    fluctuations and the query/key paths) are omitted (module docstring). ``m_in`` is accepted for the common
    backward signature; at this order the rule does not depend on it.
    """
    sv = check_range(sigma_v2, "sigma_v2", lo=0.0, lo_open=True, allowed="(0, inf)")
    d_out = check_range(d_out, "d_out", lo=1.0, allowed="[1, inf)")
    t = shaped_mask_sums(L, causal)
    L = np.asarray(L, dtype=np.float64)
    r = g.corr
    c = 1.0 - gamma2
    # A₀ᵀ Γ A₀ = γ₁² Γ + γ₁c (ΓW + WᵀΓ) + c² WᵀΓW with Γ/σ²_g = (1−r) I + r J; WᵀW has trace Σ 1/m_α = tr_wwt and
    # sum ‖W1‖² = L; WᵀJW = ccᵀ has trace Σ c_δ² = sum_wwt and sum L²; JW + WᵀJ has trace 2L and sum 2L².
    tr = (gamma1**2 * L + gamma1 * c * ((1.0 - r) * 2.0 * t["tr_w"] + r * 2.0 * L)
          + c**2 * ((1.0 - r) * t["tr_wwt"] + r * t["sum_wwt"]))
    total = (gamma1**2 * (L + r * L * (L - 1.0)) + gamma1 * c * ((1.0 - r) * 2.0 * L + r * 2.0 * L**2)
             + c**2 * ((1.0 - r) * L + r * L**2))
    diag, off = _avg(tr, total, L)
    scale = d_out * sv * g.var
    return GradMoments(var=scale * diag, corr=clip_corr(off / diag))


# ------------------------------------------------------------------------------------------------------------
# module
# ------------------------------------------------------------------------------------------------------------

class ShapedAttention(nn.Module):
    """Multi-head shaped self-attention (Noci et al. Eqs. 9, 33), heads concatenated to width H·d_head.

    ``d_in`` (= n, the width in τ = τ₀√(n n_k) unless ``width`` is given), ``n_heads``, ``d_head`` (= n_k);
    ``tau0`` (default 1) or an explicit ``tau``; ``sigma_q``, ``sigma_k``, ``sigma_v`` (default 1/√n, the paper's
    W/√n); ``gamma1``, ``gamma2`` (Eq. 33, default 1) and ``gamma_mode`` ∈ {"fixed", "learn", "recover"} with
    ``anneal_steps`` for "recover" (:meth:`anneal`); ``causal`` (Sec. 4.2 masking). λ and γ of the residual are
    :class:`~sigprop.components.residual.Residual`'s (module docstring).

    ``forward(x, key_padding_mask=None)``; ``attention_matrix(x)`` returns A per head (…, H, L, L).
    ``forward_moments(m, L)`` / ``backward_moments(g, m_in, L)``: :func:`shaped_attention_forward` (first order
    in κ) / :func:`shaped_attention_backward` (zeroth order in κ).
    """

    rules = Rules(context=frozenset({"L"}), inputs=frozenset({"key_padding_mask"}), mixes_tokens=True)
    gamma1: torch.Tensor
    gamma2: torch.Tensor

    def __init__(self, d_in: int, n_heads: int, d_head: int, tau0: float = 1.0, tau: float | None = None,
                 sigma_q: float | None = None, sigma_k: float | None = None, sigma_v: float | None = None,
                 gamma1: float = 1.0, gamma2: float = 1.0, gamma_mode: str = "fixed",
                 anneal_steps: int | None = None, causal: bool = False, width: int | None = None) -> None:
        super().__init__()
        for v, name in ((d_in, "d_in"), (n_heads, "n_heads"), (d_head, "d_head")):
            check_range(v, name, lo=1.0, allowed="integers >= 1")
        check_shaped_mode(gamma_mode, anneal_steps, "gamma_mode")
        check_range(gamma1, "gamma1")
        check_range(gamma2, "gamma2")
        self.d_in, self.n_heads, self.d_head = int(d_in), int(n_heads), int(d_head)
        self.width = self.d_in if width is None else int(check_range(width, "width", lo=1.0, allowed="[1, inf)"))
        if tau is None:
            self.tau = float(shaped_temperature(self.width, self.d_head, tau0))
        else:
            self.tau = float(check_range(tau, "tau", lo=0.0, lo_open=True, allowed="(0, inf)"))
        default = 1.0 / math.sqrt(self.width)
        self.sigma_q, self.sigma_k, self.sigma_v = (
            float(check_range(default if s is None else s, name, lo=0.0, lo_open=True, allowed="(0, inf)"))
            for s, name in ((sigma_q, "sigma_q"), (sigma_k, "sigma_k"), (sigma_v, "sigma_v")))
        self.causal, self.gamma_mode, self.anneal_steps = bool(causal), gamma_mode, anneal_steps
        self.gamma_init = (float(gamma1), float(gamma2))
        for name, val in (("gamma1", gamma1), ("gamma2", gamma2)):
            t = torch.tensor(float(val))
            if gamma_mode == "learn":
                setattr(self, name, nn.Parameter(t))
            else:
                self.register_buffer(name, t)
        shape = (self.d_in, self.n_heads * self.d_head)
        self.w_q = nn.Parameter(torch.empty(shape))
        self.w_k = nn.Parameter(torch.empty(shape))
        self.w_v = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Draw W_Q, W_K, W_V from N(0, σ²) with the declared σs (nothing on the meta device)."""
        if self.w_q.is_meta:
            return
        with torch.no_grad():
            for w, s in ((self.w_q, self.sigma_q), (self.w_k, self.sigma_k), (self.w_v, self.sigma_v)):
                w.normal_(0.0, s, generator=generator)

    @torch.no_grad()
    def anneal(self, step: int) -> tuple[float, float]:
        """App. D "Recover": set γᵢ = γᵢ⁰·max(0, 1 − step/anneal_steps) (:func:`~sigprop.components.shaped_relu.
        linear_anneal`) for optimiser step ``step`` and return (γ₁, γ₂); both are 0 from step = anneal_steps on.
        Raises ``ValueError`` unless ``gamma_mode="recover"``."""
        if self.gamma_mode != "recover":
            raise ValueError(f"anneal() needs gamma_mode='recover' (got gamma_mode={self.gamma_mode!r})")
        g1 = float(linear_anneal(self.gamma_init[0], step, cast(int, self.anneal_steps)))
        g2 = float(linear_anneal(self.gamma_init[1], step, cast(int, self.anneal_steps)))
        self.gamma1.fill_(g1)
        self.gamma2.fill_(g2)
        return g1, g2

    def _check_input(self, x: torch.Tensor) -> None:
        if x.dim() < 2 or x.shape[-1] != self.d_in:
            raise ValueError(f"input must have shape (..., L, {self.d_in}), got {tuple(x.shape)}")

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(…, L, d_in) → (…, L, H·d_head); ``key_padding_mask`` (…, L), True at real tokens."""
        self._check_input(x)
        return shaped_attention(x, self.w_q, self.w_k, self.w_v, self.n_heads, self.tau, self.gamma1.to(x.dtype),
                                self.gamma2.to(x.dtype), self.causal, key_padding_mask)

    def queries_and_keys(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q, K) per head, (…, H, L, d_head) each: what the softmax part's scores are made of."""
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (self.n_heads, self.d_head)).transpose(-2, -3)

        return heads(x @ self.w_q), heads(x @ self.w_k)

    def attention_matrix(self, x: torch.Tensor) -> torch.Tensor:
        """A per head, shape (…, H, L, L) (:func:`shaped_attention_matrix`)."""
        self._check_input(x)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (self.n_heads, self.d_head)).transpose(-2, -3)

        return shaped_attention_matrix(heads(x @ self.w_q), heads(x @ self.w_k), self.tau,
                                       self.gamma1.to(x.dtype), self.gamma2.to(x.dtype), self.causal)

    def _gammas(self) -> tuple[float, float]:
        return float(self.gamma1.detach()), float(self.gamma2.detach())

    def forward_moments(self, m: Moments, L: Stat) -> Moments:
        g1, g2 = self._gammas()
        return shaped_attention_forward(m, self.d_in, self.d_head, L, self.sigma_q**2, self.sigma_k**2,
                                        self.sigma_v**2, self.tau, g1, g2, self.causal)

    def backward_moments(self, g: GradMoments, m_in: Moments, L: Stat) -> GradMoments:
        g1, g2 = self._gammas()
        return shaped_attention_backward(g, m_in, self.n_heads * self.d_head, L, self.sigma_v**2, g1, g2,
                                         self.causal)

    def extra_repr(self) -> str:
        return (f"d_in={self.d_in}, n_heads={self.n_heads}, d_head={self.d_head}, tau={self.tau:.6g}, "
                f"causal={self.causal}, gamma_mode={self.gamma_mode!r}")
