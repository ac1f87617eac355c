"""Helper mathematics of the single-head attention rules (see :mod:`sigprop.components.attention`).

Notation (all per configuration, float64, broadcasting): input x_k = c + δ_k with c shared by the tokens of a
sequence (variance ρ = rσ² per unit) and δ_k i.i.d. (variance τ = (1 − r)σ²); d = d_in, e = d_k;
M = W_Q W_Kᵀ/√e; a_i = Mᵀx_i, so that the score of query i on key k is s_ik = a_i·x_k = a_i·c + z_ik with
z_ik = a_i·δ_k; σ²_qk = σ²_q σ²_k. The shared part a_i·c is constant over keys and cancels in the softmax.

Exact Gaussian-weight moments used below (W entries i.i.d. N(0, σ²), checked by Monte Carlo in the tests):

* E‖M‖²_F = d² σ²_qk,  Var‖M‖²_F = σ⁴_qk d² (4d/e + 2 + 2/e),
* E tr((MMᵀ)²) = d σ⁴_qk [d² + 2d/e + d(d+1)(d+1+e)/e],
* E|a_i|² = d² σ²_qk σ² and Var|a_i|²/(E|a_i|²)² = (2 E tr((MMᵀ)²) + Var‖M‖²_F)/(d⁴σ⁴_qk),
* κ_il = τ a_i·a_l (the covariance of the scores that two queries give one key):
  E κ = τ ρ d² σ²_qk,  Var κ = τ² [(σ⁴ + ρ²) E tr((MMᵀ)²) + ρ² Var‖M‖²_F].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.moments import Stat
from .softmax import softmax_power_moments

__all__ = ["AttentionTerms", "QueryGradient", "attention_terms", "mm_moments", "query_gradient", "query_variance",
           "score_variance", "softmax_participation"]

#: 3-point Gauss–Hermite rule (exact for polynomials of degree ≤ 5) over the per-query score variance.
_GH3_Z = np.array([-np.sqrt(3.0), 0.0, np.sqrt(3.0)])
_GH3_W = np.array([1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0])


def score_variance(var: Stat, corr: Stat, d: Stat, sqk2: Stat) -> Stat:
    """s² = τσ²d²σ²_qk = (1 − r)σ⁴d²σ²_qσ²_k: the mean variance of a query's scores over generic keys (input of
    variance ``var`` = σ², token correlation ``corr`` = r, mean already absorbed; d = d_in; ``sqk2`` = σ²_qσ²_k)."""
    return (1.0 - corr) * var * var * d * d * sqk2


def mm_moments(d: Stat, e: Stat, sqk2: Stat) -> tuple[Stat, Stat]:
    """(E tr((MMᵀ)²), Var‖M‖²_F) for M = W_Q W_Kᵀ/√e with W_Q, W_K ∈ R^{d×e} Gaussian, σ²_q σ²_k = ``sqk2``.

    Derivation: with B = W_KᵀW_K (Wishart), E[B²] = σ⁴_k d(d+1+e) I and E(tr B)² = σ⁴_k (d²e² + 2de); averaging
    W_Q first gives E[(MMᵀ)²] = σ⁴_q/e² E[(tr B)² + (d+1) tr B²] I. Var‖M‖²_F follows from E(tr AB)² with two
    independent Wisharts A = W_QᵀW_Q, B. Exact.
    """
    trb2 = d * sqk2**2 * (d * d + 2.0 * d / e + d * (d + 1.0) * (d + 1.0 + e) / e)
    vartrb = sqk2**2 * d * d * (4.0 * d / e + 2.0 + 2.0 / e)
    return trb2, vartrb


def softmax_score_weights(t2_mean: Stat, t2_var: Stat, L: Stat) -> tuple[Stat, Stat, Stat]:
    """(P2, K, Q) for a softmax over L keys with i.i.d. N(0, t²) scores, t² random (as in
    :func:`softmax_participation`): P2 = E Σ_k A_k², Q = E(Σ_k A_k²)² = L E p⁴ + L(L − 1) E p_i²p_j² and the weight
    of the score paths K = E Σ_k A_k²(1 − 2A_k + Σ_m A_m²) = P2 − 2L E p³ + Q.

    K is what the key and query paths carry (module :mod:`~sigprop.components.attention`): the gradient through the
    score s_ik is A_ik w·(x_k − o_i), and averaging the i.i.d. parts u_k = w·δ_k gives E(u_k − Σ_m A_m u_m)² ∝
    1 − 2A_k + Σ_m A_m²; K → P2(1 − 1/L) for small scores, and ~ P2/2 for two keys."""
    t2_mean = np.asarray(t2_mean, dtype=np.float64)
    sd = np.sqrt(np.maximum(np.asarray(t2_var, dtype=np.float64), 0.0))
    L = np.asarray(L, dtype=np.float64)
    p2 = k = qq = 0.0
    for z, w in zip(_GH3_Z, _GH3_W, strict=True):
        t2 = np.maximum(t2_mean + sd * z, 0.0)
        mom = softmax_power_moments(t2, L, orders=(2, 3, 4), pair=True)
        q = L * mom["p4"] + L * (L - 1.0) * mom["p2p2"]
        p2 = p2 + w * L * mom["p2"]
        k = k + w * (L * mom["p2"] - 2.0 * L * mom["p3"] + q)
        qq = qq + w * q
    return p2, k, qq


def softmax_participation(t2_mean: Stat, t2_var: Stat, L: Stat) -> Stat:
    """P2 = E Σ_k A_ik² = L E[p²] for a softmax over L keys whose scores are i.i.d. N(0, t²) given the query, with
    t² random (mean ``t2_mean``, variance ``t2_var``): a 3-point Gauss–Hermite rule over t² (t² fluctuates by a
    relative ~√(2/e + 4/d) between queries and weight draws; P2 is convex in t², which adds ~½P2''Var t²)."""
    t2_mean = np.asarray(t2_mean, dtype=np.float64)
    sd = np.sqrt(np.maximum(np.asarray(t2_var, dtype=np.float64), 0.0))
    L = np.asarray(L, dtype=np.float64)
    out = 0.0
    for z, w in zip(_GH3_Z, _GH3_W, strict=True):
        t2 = np.maximum(t2_mean + sd * z, 0.0)
        out = out + w * L * softmax_power_moments(t2, L, orders=(2,), pair=False)["p2"]
    return out


@dataclass(frozen=True)
class AttentionTerms:
    """The building blocks of the attention rules (per element; see :func:`attention_terms`)."""

    rho: Stat  # shared input variance r σ²
    tau: Stat  # independent input variance (1 − r) σ²
    sig2: Stat  # σ²
    s2: Stat  # mean score variance of a query over generic keys, τ σ² d² σ²_qk
    vrel: Stat  # relative variance of |a_i|² (hence of a query's score variance)
    P2: Stat  # E Σ_k A_ik²
    K: Stat  # E Σ_k A_ik²(1 − 2A_ik + Σ_m A_im²), the score paths' weight
    Q: Stat  # E(Σ_k A_ik²)²
    kappa: Stat  # E κ (score covariance of two queries on one key)
    vkappa: Stat  # Var κ
    ekappa: Stat  # E e^κ ≈ exp(E κ + Var κ / 2)
    ms: Stat  # mean-shift scale τ² d σ²_qk σ² = τ² E|a|²/d
    sqk2: Stat
    d: Stat
    e: Stat
    L: Stat
    p: Stat


def attention_terms(var: Stat, corr: Stat, d: Stat, e: Stat, L: Stat, sqk2: Stat, p: Stat) -> AttentionTerms:
    """Evaluate the shared building blocks for input variance ``var``, token correlation ``corr`` (zero mean),
    widths d = d_in, e = d_k, sequence length L, σ²_q σ²_k = ``sqk2`` and attention dropout ``p``."""
    var, corr, d, e, L, sqk2, p = np.broadcast_arrays(
        *(np.asarray(v, dtype=np.float64) for v in (var, corr, d, e, L, sqk2, p)))
    rho = corr * var
    tau = (1.0 - corr) * var
    s2 = score_variance(var, corr, d, sqk2)
    trb2, vartrb = mm_moments(d, e, sqk2)
    vrel = (2.0 * trb2 + vartrb) / (d**4 * sqk2**2)
    kappa = tau * rho * d * d * sqk2
    vkappa = tau**2 * ((var**2 + rho**2) * trb2 + rho**2 * vartrb)
    P2, K, Q = softmax_score_weights(s2, vrel * s2**2, L)
    return AttentionTerms(rho=rho, tau=tau, sig2=var, s2=s2, vrel=vrel, P2=P2, K=K, Q=Q, kappa=kappa, vkappa=vkappa,
                          ekappa=np.exp(kappa + 0.5 * vkappa), ms=tau**2 * d * sqk2 * var, sqk2=sqk2, d=d, e=e,
                          L=L, p=p)


def query_variance(t: AttentionTerms) -> Stat:
    """σ²_y/(d_in σ²_v) of one query over its t.L keys (:mod:`~sigprop.components.attention`, forward):
    ρ(1 + P2 p/(1−p)) + τ P2/(1−p) + m(1 − P2 + 4 P2 p/(1−p)), m = τ² d_in σ²_qk σ²."""
    q = t.p / (1.0 - t.p)
    return t.rho * (1.0 + q * t.P2) + t.tau * t.P2 / (1.0 - t.p) + t.ms * (1.0 - t.P2 + 4.0 * q * t.P2)


@dataclass(frozen=True)
class QueryGradient:
    """The input-gradient variance terms that one query's own output gradient w_i carries (weighted by
    Ω = σ²_v d_k σ²_g whatever the gradient's token correlation, since they hold |w_i|² only): the key path's
    Σ_k E dS_ik² |a_i|² (``keys``), the query path (``queries``) and the value-key cross term (``values_keys``)."""

    keys: Stat
    queries: Stat
    values_keys: Stat


def query_gradient(t: AttentionTerms, om: Stat) -> QueryGradient:
    """The per-query gradient terms (:class:`QueryGradient`) of the module docstring's KK, QQ and VK at Ω = ``om``:
    KK₁ = Ω P2 d²_in σ²_qk σ²(1 + v s²)(σ² − ρ(1−p))/(1−p), QQ as printed, VK₁ = 2Ω s² e^{s²}(1+p)/((1−p) L d_in)."""
    p, d = t.p, t.d
    q = p / (1.0 - p)
    keys = om * t.K * d**2 * t.sqk2 * t.sig2 * (1.0 + t.vrel * t.s2) * (t.sig2 - t.rho * (1.0 - p)) / (1.0 - p)
    queries = (om * t.sqk2 * t.tau**2 * d * (1.0 + q * t.P2 - 2.0 * t.P2 + t.Q + (d + 1.0) * t.K / (1.0 - p))
               + om * t.sqk2 * d**2 * t.rho * t.tau * t.P2 * q)
    values_keys = 2.0 * om * t.s2 * np.exp(t.s2) * (1.0 + p) / ((1.0 - p) * t.L * d)
    return QueryGradient(keys=keys, queries=queries, values_keys=values_keys)
