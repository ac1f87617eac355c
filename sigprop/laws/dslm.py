"""DeepScaleLM (DSLM): residual scaling λ, β, unit-output initialisation and its model-level laws (Kedia et al.
Sec. 3.5, App. E.3–E.6, App. M).

DSLM adds every block as x ← λ x + β f(x) with λ² + β² = 1 and β² = k/N^α (Sec. 3.5; App. M uses k = 2, α = 1:
λ² = 1 − 2/N, β² = 2/N), and initialises the weights so that every block's output variance is 1 (App. M, Figs. 14
and 15):

* embeddings: σ²_e = (1 − p)/n_embd (the sum of n_embd embedding types, then dropout, has variance 1);
* FFN: σ²_w1 = σ²_w2 = σ²_f = (1/d)·√((1 − p)/2) — a *variance* (Fig. 15's ``gain = σ_f`` is its square root, the
  std): with d_ff = 4d, C2 = 2d² σ⁴_f/(1 − p) = 1 (see :func:`sigprop.laws.rank_collapse.block_constants`). Read as
  a std it would give C2 = (1 − p)/(2d²) ≪ 1, so the variance reading is the consistent one;
* attention V and O of layer n: σ²_{n,o} = (1/d)·√((1 − p)/r_n), r_n the token correlation at the layer's input, so
  C1 = 1/r_n and the attention output variance C1 r_n = 1;
* Q and K: σ²_qk = 1/d.

The *simplified* DSLM (Fig. 14) gives V and O the FFN's σ²_f instead, so C1 = 1/2 and the attention output variance
is r/2 (App. E.5).
"""

from __future__ import annotations

import numpy as np

from ..core.validate import check_range
from .checks import check_dropout, check_n_layers, float_or_array, per_layer
from .rank_collapse import ffn_corr_exact, ffn_corr_kedia

__all__ = [
    "dslm_scales",
    "dslm_embedding_var",
    "dslm_ffn_var",
    "dslm_attention_var",
    "dslm_qk_var",
    "dslm_correlation_schedule",
    "dslm_forward_variance",
    "dslm_simple_preln_forward",
    "dslm_simple_preln_eq45",
    "dslm_simple_preln_bounds",
    "dslm_preln_gradient_factor",
    "dslm_preln_gradient_limit",
    "dslm_postln_gradient_factor",
    "dslm_simple_preln_gradient_bounds",
    "dslm_simple_postln_gradient_factor",
]

FFN_APPROX = ("exact", "kedia")


def _check_scales(lam2, beta2):
    lam2 = check_range(lam2, "lam2 (λ²)", lo=0.0, hi=1.0)
    beta2 = check_range(beta2, "beta2 (β²)", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]")
    return lam2, beta2


def dslm_scales(n_layers, k=2.0, alpha=1.0):
    """DSLM residual scales (λ², β²) with β² = k/N^α and λ² = 1 − β² (Kedia et al. Sec. 3.5; App. M: k = 2, α = 1).

    Sec. 3.5 recommends α = 1 for Pre-LN (bounded gradient fall, depth-independent sensitivity) and notes that
    Post-LN needs β² ≤ k/N² in theory (App. E.6). Raises ``ValueError`` unless k > 0, α ≥ 0 and k/N^α ≤ 1.
    """
    n = check_n_layers(n_layers)
    k = check_range(k, "k", lo=0.0, lo_open=True, allowed="(0, inf)")
    alpha = check_range(alpha, "alpha", lo=0.0)
    beta2 = np.asarray(k) / float(n) ** np.asarray(alpha)
    if np.any(beta2 > 1.0):
        raise ValueError(f"k/N^alpha must be <= 1 so that lam2 = 1 - beta2 >= 0 (got beta2 = {np.max(beta2)!r} "
                         f"for N = {n})")
    return float_or_array(1.0 - beta2), float_or_array(beta2)


def dslm_embedding_var(p, n_embedding_types=3):
    """DSLM embedding-weight variance σ²_e = (1 − p)/n_embd (Kedia et al. Sec. 3.5 item 1; App. M: n_embd = 3).

    The n_embd embedding types (token, position, segment) are summed, then dropped out: variance
    n_embd σ²_e/(1 − p) = 1.
    """
    p = check_dropout(p)
    n = check_range(n_embedding_types, "n_embedding_types", lo=1.0)
    return float_or_array((1.0 - np.asarray(p)) / n)


def dslm_ffn_var(d, p, d_ff=None):
    """DSLM FFN weight variance σ²_f (both W1 and W2) making the ReLU FFN block's output variance 1.

    Solves C2 = d · d_ff · σ⁴_f/(2(1 − p)) = 1: σ²_f = √(2(1 − p)/(d · d_ff)), which for d_ff = 4d is Kedia et al.'s
    σ²_f = (1/d)·√((1 − p)/2) (Sec. 3.5 item 2; App. M, Figs. 14, 15). A variance, not a std (module docstring).
    """
    d = check_range(d, "d", lo=0.0, lo_open=True, allowed="(0, inf)")
    p = check_dropout(p)
    d_ff = 4.0 * np.asarray(d) if d_ff is None else check_range(d_ff, "d_ff", lo=0.0, lo_open=True, allowed="(0, inf)")
    return float_or_array(np.sqrt(2.0 * (1.0 - np.asarray(p)) / (np.asarray(d) * d_ff)))


def dslm_attention_var(d, p, r_in):
    """DSLM variance of the attention V and O weights of a layer with input token correlation r_in (App. M, Fig. 15).

        σ²_{l,o} = (1/d)·√((1 − p)/r_in),   so C1 = d² σ⁴_{l,o}/(1 − p) = 1/r_in and the block output C1 r_in = 1.

    ``r_in`` is the correlation at the layer's *input* (see :func:`dslm_correlation_schedule`). Requires r_in ∈ (0, 1].
    """
    d = check_range(d, "d", lo=0.0, lo_open=True, allowed="(0, inf)")
    p = check_dropout(p)
    r_in = check_range(r_in, "r_in", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]")
    return float_or_array(np.sqrt((1.0 - np.asarray(p)) / np.asarray(r_in)) / np.asarray(d))


def dslm_qk_var(d):
    """DSLM variance of the Q and K weights, σ²_qk = 1/d (App. M, Figs. 14, 15)."""
    d = check_range(d, "d", lo=0.0, lo_open=True, allowed="(0, inf)")
    return float_or_array(1.0 / np.asarray(d))


def dslm_correlation_schedule(n_layers, p, r0, lam2=None, beta2=None, d_ff_ratio=4, ffn_approx="exact",
                              var_in=1.0, include_final=False):
    """Token correlation r_in[n] at the input of each layer's attention block (Kedia et al. App. M, Fig. 15).

    Per layer (``corr_input_layerwise``), with unit-variance blocks (full DSLM) and a stream of variance v:

        attention:  r ← (λ² v r + β² (1 − p)) / (λ² v + β²),                     v ← λ² v + β²
        FFN:        r ← (λ² v r + β² (1 − p) F(r)) / (λ² v + β²),                 v ← λ² v + β²

    the variance-weighted average of the skip correlation and the block output correlation (attention: 1 − p;
    ReLU FFN: (1 − p) F(r), with F = :func:`~sigprop.laws.rank_collapse.ffn_corr_exact` as in Fig. 15
    (``ffn_approx="exact"``) or Table 2's quadratic fit (``"kedia"``)). With λ² + β² = 1 and var_in = 1 the stream
    variance stays 1 and this is exactly Fig. 15: r ← λ² r + β²(1 − p), then r ← λ² r + β²(1 − p) F(r). The FFN
    sees the correlation *after* the attention update (Fig. 15 writes r^l_xin inside the FFN line; the FFN's input
    is the attention-plus-skip stream).

    Off-by-one fix: Fig. 15 appends r *after* layer i and initialises layer n with ``corr_input_layerwise(r, N)[n]``,
    i.e. with the correlation at the layer's output. Here r_in[0] = r0 and r_in[n] is the value after layer n − 1
    (n = 1..N−1): the correlation the attention block of layer n actually receives. ``include_final=True`` appends the
    output correlation of the last layer (shape (N + 1,)).

    ``lam2``/``beta2`` default to :func:`dslm_scales` (k = 2, α = 1). ``d_ff_ratio`` does not enter (the ReLU-FFN
    correlation map is width-independent); it is validated and kept for signature symmetry with the init code.
    The layer map is increasing in r, so the returned sequence is monotone and stays in [0, 1].
    """
    n = check_n_layers(n_layers)
    p = float(check_dropout(p))
    r = float(check_range(r0, "r0", lo=0.0, hi=1.0))
    check_range(d_ff_ratio, "d_ff_ratio", lo=0.0, lo_open=True, allowed="(0, inf)")
    if ffn_approx not in FFN_APPROX:
        raise ValueError(f"ffn_approx must be one of {FFN_APPROX} (got {ffn_approx!r})")
    if lam2 is None or beta2 is None:
        lam2_d, beta2_d = dslm_scales(n)
        lam2 = lam2_d if lam2 is None else lam2
        beta2 = beta2_d if beta2 is None else beta2
    lam2, beta2 = _check_scales(lam2, beta2)
    lam2, beta2 = float(lam2), float(beta2)
    v = float(check_range(var_in, "var_in", lo=0.0, lo_open=True, allowed="(0, inf)"))
    ffn = ffn_corr_exact if ffn_approx == "exact" else ffn_corr_kedia
    out = np.empty(n + 1)
    out[0] = r
    for i in range(n):
        tot = lam2 * v + beta2
        r = (lam2 * v * r + beta2 * (1.0 - p)) / tot
        v = tot
        tot = lam2 * v + beta2
        r = (lam2 * v * r + beta2 * (1.0 - p) * ffn(min(max(r, -1.0), 1.0))) / tot
        v = tot
        out[i + 1] = r
    return np.clip(out if include_final else out[:n], 0.0, 1.0)


def dslm_forward_variance(n_layers, lam2, beta2, var_in=1.0, attn_var=1.0, ffn_var=1.0):
    """Pre-LN residual-stream variance after each layer with λ/β scaling (Kedia et al. App. E.3.1, E.5.1).

        v ← λ² v + β² σ²_attn,n,   then   v ← λ² v + β² σ²_ffn,n      (Pre-LN: blocks see LayerNorm'd input)

    assuming no covariance between block output and skip stream (initialisation). Full DSLM: σ²_attn = σ²_ffn = 1 and
    var_in = 1, so v = λ² + β² = 1 at every layer (App. E.3.1). ``attn_var``/``ffn_var`` are scalars or length-N
    arrays. Post-LN needs no function: its stream variance is 1 by construction (App. E.4.1). Returns shape (N,).
    """
    n = check_n_layers(n_layers)
    lam2, beta2 = _check_scales(lam2, beta2)
    a = per_layer(attn_var, n, "attn_var")
    f = per_layer(ffn_var, n, "ffn_var")
    v = float(check_range(var_in, "var_in", lo=0.0))
    out = np.empty(n)
    for i in range(n):
        v = lam2 * v + beta2 * a[i]
        v = lam2 * v + beta2 * f[i]
        out[i] = v
    return out


def dslm_simple_preln_forward(n_layers, r_in, var_in=1.0, beta2=None):
    """Simplified-DSLM Pre-LN forward variance after each layer, the recurrence of Kedia et al. App. E.5.1.

        σ²_{n} = λ⁴ σ²_{n−1} + λ² β² r_n/2 + β²      (σ²_attn = r_n/2 since C1 = 1/2; σ²_ffn = 1),

    with β² = 2/N by default and λ² = 1 − β². ``r_in`` is the input token correlation of each layer (scalar or
    length-N array in [0, 1]). Returns shape (N,). Its N → ∞ limits are eq. 6 (:func:`dslm_simple_preln_bounds`).
    """
    n = check_n_layers(n_layers)
    beta2 = dslm_scales(n)[1] if beta2 is None else beta2
    beta2 = check_range(beta2, "beta2 (β²)", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]")
    r = per_layer(r_in, n, "r_in", lo=0.0, hi=1.0)
    return dslm_forward_variance(n, 1.0 - beta2, beta2, var_in=var_in, attn_var=r / 2.0, ffn_var=1.0)


def dslm_simple_preln_eq45(n_layers, r=1.0, var_in=1.0, beta2=None, form="eq4"):
    """Kedia et al. eqs. 4 and 5 (App. E.5.1): closed forms of the simplified-DSLM forward variance after N layers.

    With q = (1 − β²)² and the per-layer input bounded using λ² ≤ 1, c = β² (1 + r/2) (the paper takes r = 1,
    c = 3β²/2, for the upper bound and r = 0, c = β², for the lower bound):

        eq. 4:  σ²_N = q^N σ²_0 + c (1 − q^N)/(1 − q),
        eq. 5:  σ²_N ≈ q^N σ²_0 + (c/(2β²)) (1 − q^N)    (1 − q ≈ 2β²; = 3/4 (1 − q^N) at r = 1).

    eq. 4 is the exact solution of σ²_n = q σ²_{n−1} + c, an upper bound on :func:`dslm_simple_preln_forward` at the
    same r (which has λ² β² r/2 in place of β² r/2) and equal to it at r = 0. Scalar r only; broadcasts over r.
    """
    n = check_n_layers(n_layers)
    beta2 = dslm_scales(n)[1] if beta2 is None else beta2
    beta2 = np.asarray(check_range(beta2, "beta2 (β²)", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]"))
    r = np.asarray(check_range(r, "r", lo=0.0, hi=1.0))
    var0 = check_range(var_in, "var_in", lo=0.0)
    if form not in ("eq4", "eq5"):
        raise ValueError(f"form must be one of ('eq4', 'eq5') (got {form!r})")
    q = (1.0 - beta2) ** 2
    qn = q**n
    c = beta2 * (1.0 + r / 2.0)
    if form == "eq4":
        return float_or_array(qn * var0 + c * (1.0 - qn) / (1.0 - q))
    return float_or_array(qn * var0 + c / (2.0 * beta2) * (1.0 - qn))


def dslm_simple_preln_bounds(var_in=1.0, k=2.0):
    """Kedia et al. eq. 6 (App. E.5.1): N → ∞ bounds on the simplified-DSLM Pre-LN output variance with β² = k/N.

        e^{−2k} σ²_0 + (1/2)(1 − e^{−2k})  ≤  σ²_N  ≤  e^{−2k} σ²_0 + (3/4)(1 − e^{−2k}),

    i.e. 1/2 + 1/(2e⁴) ≤ σ²_N ≤ 3/4 + 1/(4e⁴) for the paper's k = 2, σ²_0 = 1 ((1 − 2/N)^{2N} → e^{−4}). These are
    limits of eq. 4 at r = 0 and r = 1; finite N deviates by O(1/N) (see the tests for the explicit bound).
    Returns (lower, upper).
    """
    var0 = np.asarray(check_range(var_in, "var_in", lo=0.0))
    k = np.asarray(check_range(k, "k", lo=0.0, lo_open=True, allowed="(0, inf)"))
    e = np.exp(-2.0 * k)
    return float_or_array(e * var0 + 0.5 * (1.0 - e)), float_or_array(e * var0 + 0.75 * (1.0 - e))


def dslm_preln_gradient_factor(C6, N, k=1.0):
    """Per-layer gradient-variance factor of DSLM Pre-LN, σ²_{g,n−1} = (1 + k (C6,n − 1)/N) σ²_{g,n} (App. E.3.2).

    From λ² + β² C6 with λ² + β² = 1 and β² = k/N; C6,n = r^l_{g,out,n}/r^l_{x,in,n} (the attention's C1 r_x = 1).
    App. E.3.2 prints 1 + (C6 − 1)/N, i.e. k = 1 (although DSLM itself uses β² = 2/N, k = 2). The FFN sub-layer
    contributes a factor 1. Broadcasts; requires C6 ≥ 0, N ≥ 1, k/N ≤ 1.
    """
    C6 = np.asarray(check_range(C6, "C6", lo=0.0))
    N = np.asarray(check_range(N, "N", lo=1.0))
    k = np.asarray(check_range(k, "k", lo=0.0, lo_open=True, allowed="(0, inf)"))
    if np.any(k / N > 1.0):
        raise ValueError("k/N must be <= 1 (beta2 = k/N)")
    return float_or_array(1.0 + k * (C6 - 1.0) / N)


def dslm_preln_gradient_limit(C6, k=1.0):
    """N → ∞ limit of the whole-model DSLM Pre-LN gradient ratio σ²_{g,1}/σ²_{g,N} = (1 + k(C6 − 1)/N)^(N−1)
    → e^{k (C6 − 1)} (App. E.3.2, with k = 1 as printed); ≈ 1 for C6 ≈ 1. Broadcasts."""
    C6 = np.asarray(check_range(C6, "C6", lo=0.0))
    k = np.asarray(check_range(k, "k", lo=0.0, lo_open=True, allowed="(0, inf)"))
    return float_or_array(np.exp(k * (C6 - 1.0)))


def dslm_postln_gradient_factor(lam2, beta2, r_g, r_x):
    """Per-layer gradient-variance factor of DSLM Post-LN, λ² + β² r_g/r_x (Kedia et al. App. E.4.2).

    The attention sub-layer gives λ² + β² C1 r_g with C1 = 1/r_x (DSLM init), the FFN sub-layer 1. With
    λ² + β² = 1 it equals 1 when r_g = r_x (C6 = 1). Requires r_x ∈ (0, 1], r_g ∈ [0, 1]; broadcasts.
    """
    lam2, beta2 = _check_scales(lam2, beta2)
    r_g = check_range(r_g, "r_g", lo=0.0, hi=1.0)
    r_x = check_range(r_x, "r_x", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]")
    return float_or_array(np.asarray(lam2) + np.asarray(beta2) * np.asarray(r_g) / np.asarray(r_x))


def dslm_simple_preln_gradient_bounds(C6):
    """Kedia et al. App. E.5.2: simplified-DSLM Pre-LN gradient ratio bounds e^{−4} ≤ σ²_{g,n}/σ²_{g,N} ≤ e^{2 C6 + 2}
    (β² = 2/N, stream variance ≥ 1/2). Returns (lower, upper); broadcasts over C6 ≥ 0."""
    C6 = np.asarray(check_range(C6, "C6", lo=0.0))
    return float_or_array(np.full(C6.shape, np.exp(-4.0))), float_or_array(np.exp(2.0 * C6 + 2.0))


def dslm_simple_postln_gradient_factor(beta2, r_g, r_x, form="eq7"):
    """Per-layer gradient-variance factor of simplified-DSLM Post-LN (Kedia et al. App. E.6.2).

    ``form="exact"``: (λ² + β² r_g/2)/(λ² + β² r_x/2) with λ² = 1 − β² (attention gain C1 = 1/2);
    ``form="eq7"``: its first-order expansion 1 + (β²/2)(r_g − r_x) (eq. 7). Over N layers with β² = 2/N the ratio
    stays within [e^{−2}, e^{2}] (App. E.6.2). Broadcasts; r_g, r_x ∈ [0, 1], β² ∈ (0, 1].
    """
    beta2 = np.asarray(check_range(beta2, "beta2 (β²)", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]"))
    r_g = np.asarray(check_range(r_g, "r_g", lo=0.0, hi=1.0))
    r_x = np.asarray(check_range(r_x, "r_x", lo=0.0, hi=1.0))
    if form == "eq7":
        return float_or_array(1.0 + beta2 / 2.0 * (r_g - r_x))
    if form == "exact":
        lam2 = 1.0 - beta2
        if np.any(lam2 + beta2 * r_x / 2.0 <= 0.0):
            raise ValueError("form='exact' needs lam2 + beta2*r_x/2 > 0 (beta2 = 1 with r_x = 0 divides by 0)")
        return float_or_array((lam2 + beta2 * r_g / 2.0) / (lam2 + beta2 * r_x / 2.0))
    raise ValueError(f"form must be one of ('eq7', 'exact') (got {form!r})")
