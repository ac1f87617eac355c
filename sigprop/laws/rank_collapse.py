"""Block constants C1, C2 and the stable token correlations of a deep transformer (Kedia et al. App. E.1, App. F).

Kedia et al. summarise one transformer layer by two numbers (App. E.1, App. F):

    C1 = d² σ²_o σ²_v / (1 − p)          the attention block's gain (its output variance is C1 · r^l_xin · σ²_xin),
    C2 = d · d_ff · σ²_w1 σ²_w2 / (2(1 − p))   the ReLU FFN block's gain (its output variance is C2 · σ²_xin),

and, weighting the attention and FFN output correlations by these variances, obtain the stable (maximum) token
correlation r^l_xmax of the residual stream and r^l_gmax of its gradient (App. F). Everything here is a pure
float64 function that broadcasts over numpy arrays.

The ReLU-FFN correlation maps (Table 2, App. M) live here too, because App. F and the DSLM schedule both need them:

* :func:`ffn_corr_kedia` — Table 2's quadratic fit 1/π + r/2 + (1/2 − 1/π) r² (exact at r = 0 and r = 1);
* :func:`ffn_corr_exact` — the arc-cosine kernel r + (√(1 − r²) − r·acos r)/π that App. M (Fig. 15) iterates.

Both are the correlation E[relu(h_t) relu(h_s)]/E[relu(h)²] of the ReLU output *uncentred*: the second linear
layer's weights are shared by all tokens, so E[out_t out_s] = d_ff σ²_w2 E[relu(h_t) relu(h_s)] keeps the ReLU mean.
Dropout then multiplies the token correlation by (1 − p) (App. A.3).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.validate import check_range
from .checks import check_dropout, check_gains, float_or_array

__all__ = [
    "block_constants",
    "xavier_block_constants",
    "ffn_corr_kedia",
    "ffn_corr_exact",
    "r_max",
    "r_g_max",
]


def _check_corr(r, name, lo=0.0, lo_open=False):
    return check_range(r, name, lo=lo, hi=1.0, lo_open=lo_open)


def block_constants(d, sigma_v2, sigma_o2, sigma_w1_2, sigma_w2_2, p=0.0, d_ff=None):
    """Kedia et al.'s layer gains (C1, C2) from the weight variances (App. E.1, App. F; Table 2).

        C1 = d² σ²_o σ²_v / (1 − p),
        C2 = d · d_ff · σ²_w1 σ²_w2 / (2(1 − p))     (d_ff defaults to 4d, giving the paper's 2d² σ²_w1 σ²_w2/(1 − p)).

    Derivation of C2 (general d_ff): for a zero-mean input of variance σ²_in, fc1 (d → d_ff) gives variance
    d σ²_w1 σ²_in; ReLU of a zero-mean Gaussian has E[relu²] = σ²/2; fc2 (d_ff → d) multiplies the *second moment*
    by d_ff σ²_w2 (its zero-mean weights remove the ReLU mean from the output); dropout divides by (1 − p). So
    σ²_out = d_ff σ²_w2 · (1/2) · d σ²_w1 σ²_in / (1 − p) = C2 σ²_in, and d_ff = 4d reproduces the paper's
    "2d²σ²_w1σ²_w2/(1 − p)" (Table 2, App. E.1). (The factor is d·d_ff/2, not 2·d·d_ff.)
    C1 is Table 2's attention block, σ²_out = C1 r^l_xin σ²_xin: V and O are d × d, and near-uniform attention
    over L ≫ 1 tokens averages the values, keeping the fraction r^l of their variance that is shared by all tokens.

    Assumes: zero-mean Gaussian block input (true after LayerNorm), ReLU FFN, L ≫ 1. Arguments broadcast.
    Raises ``ValueError`` for d ≤ 0, d_ff ≤ 0, a negative weight variance, or p ∉ [0, 1).
    """
    d = check_range(d, "d", lo=0.0, lo_open=True, allowed="(0, inf)")
    d_ff = 4.0 * np.asarray(d) if d_ff is None else check_range(d_ff, "d_ff", lo=0.0, lo_open=True, allowed="(0, inf)")
    sv = check_range(sigma_v2, "sigma_v2", lo=0.0)
    so = check_range(sigma_o2, "sigma_o2", lo=0.0)
    s1 = check_range(sigma_w1_2, "sigma_w1_2", lo=0.0)
    s2 = check_range(sigma_w2_2, "sigma_w2_2", lo=0.0)
    p = check_dropout(p)
    C1 = np.asarray(d) ** 2 * so * sv / (1.0 - p)
    C2 = np.asarray(d) * d_ff * s1 * s2 / (2.0 * (1.0 - p))
    return float_or_array(C1), float_or_array(C2)


def xavier_block_constants(d, p=0.0, d_ff=None, n_heads=None):
    """(C1, C2) under Xavier-normal initialisation σ² = 2/(fan_in + fan_out) (Kedia et al. App. E.1, App. F).

    With ``n_heads=None`` every matrix uses its full shape: σ²_v = σ²_o = 2/(d + d) = 1/d and
    σ²_w1 = σ²_w2 = 2/(d + d_ff), so

        C1 = 1/(1 − p),     C2 = 2 d d_ff / ((d + d_ff)² (1 − p))  (= 0.32/(1 − p) for d_ff = 4d).

    At p = 0.1: C1 = 1.11, C2 = 0.36. The paper quotes "C1 = 2.2, C2 = 0.4" for Xavier with 0.1 dropout (App. E.1,
    App. F): C2 agrees to the one decimal printed, C1 does not (factor 2).
    With ``n_heads=H`` the value matrix is initialised per head, fan_out = d/H, i.e. σ²_v = 2/(d + d/H), while
    σ²_o = 1/d — the "xavier_flag_sigma" branch of the authors' released Megatron code
    (github.com/akhilkedia/TranformersGetStable, xavier_signal_propagation_figures/megatron/model/transformer.py).
    Then C1 = 2/((1 + 1/H)(1 − p)), which tends to 2/(1 − p) = 2.22 for many heads (2.09 at H = 16, p = 0.1): this
    is the most likely origin of the paper's C1 = 2.2.
    """
    d = check_range(d, "d", lo=0.0, lo_open=True, allowed="(0, inf)")
    d_ff = 4.0 * np.asarray(d) if d_ff is None else check_range(d_ff, "d_ff", lo=0.0, lo_open=True, allowed="(0, inf)")
    d_arr = np.asarray(d)
    if n_heads is None:
        sv = 1.0 / d_arr
    else:
        h = check_range(n_heads, "n_heads", lo=1.0)
        sv = 2.0 / (d_arr + d_arr / h)
    so = 1.0 / d_arr
    sw = 2.0 / (d_arr + d_ff)
    return block_constants(d, sv, so, sw, sw, p=p, d_ff=d_ff)


def ffn_corr_kedia(r):
    """Table 2's ReLU-FFN token-correlation map without dropout: 1/π + r/2 + (1/2 − 1/π) r² (Kedia et al. App. L.1).

    A quadratic fit of :func:`ffn_corr_exact`, equal to it at r = 0 (1/π) and r = 1 (1). Input r ∈ [−1, 1].
    """
    r = check_range(r, "correlation r", lo=-1.0, hi=1.0)
    return float_or_array(1.0 / math.pi + np.asarray(r) / 2.0 + (0.5 - 1.0 / math.pi) * np.asarray(r) ** 2)


def ffn_corr_exact(r):
    """Arc-cosine kernel of ReLU (Kedia et al. App. M, Fig. 15; App. C): the ReLU-FFN token-correlation map.

        E[relu(x) relu(y)] / E[relu(x)²] = r + (√(1 − r²) − r·acos r)/π     for (x, y) standard bivariate normal
                                                                             with correlation r.
    Exact for zero-mean Gaussian pre-activations; uncentred (see the module docstring). Input r ∈ [−1, 1].
    """
    r = np.asarray(check_range(r, "correlation r", lo=-1.0, hi=1.0))
    return float_or_array(r + (np.sqrt(np.clip(1.0 - r**2, 0.0, None)) - r * np.arccos(r)) / math.pi)


def r_max(C1, C2, p):
    """Stable token correlation r^l_xmax of the residual stream (Kedia et al. App. F).

    App. F weights the attention output correlation (1 − p) and the FFN output correlation
    (1 − p)(1/π + r/2 + (1/2 − 1/π) r²) by the block variances C1 and C2:

        r = [C1 (1 − p) + C2 (1 − p)(1/π + r/2 + (1/2 − 1/π) r²)] / (C1 + C2).

    This is the quadratic a r² + b r + c = 0 with a = C2 (1 − p)(1/2 − 1/π) ≥ 0, b = C2 (1 − p)/2 − (C1 + C2) < 0,
    c = (C1 + C2/π)(1 − p) > 0. Since g(0) = c > 0 and g(1) = −p (C1 + C2) ≤ 0, exactly one root lies in [0, 1]
    (the smaller one). It is computed as r = 1 − u, u = 2p(C1 + C2)/(B + √(B² + 4a p (C1 + C2))) with
    B = −(2a + b) > 0 — the positive root of the same quadratic in u = 1 − r, free of cancellation, exact at p = 0
    (r = 1: rank collapse) and valid at a = 0 (C2 = 0: r = 1 − p). Depends on C1, C2 only through C1/C2.

    The paper states r_max ≈ 0.88 for C1 = 2.2, C2 = 0.4, p = 0.1 (App. F; App. E.1 uses 0.85 for the same
    constants); the formula gives 0.8868.
    Assumes: C1, C2 ≥ 0, C1 + C2 > 0, 0 ≤ p < 1. Broadcasts.
    """
    C1, C2 = check_gains(C1, C2)
    p = check_dropout(p)
    C1, C2, p = np.broadcast_arrays(np.asarray(C1), np.asarray(C2), np.asarray(p))
    q = 1.0 - p
    a = C2 * q * (0.5 - 1.0 / math.pi)
    # In u = 1 − r the quadratic is a u² + B u − p (C1 + C2) = 0 with B = −(2a + b) = C1 + C2 − C2 q (3/2 − 2/π) > 0:
    # its one positive root, in a form free of cancellation, gives r to full precision even as r → 1.
    B = C1 + C2 - C2 * q * (1.5 - 2.0 / math.pi)
    s = p * (C1 + C2)
    u = 2.0 * s / (B + np.sqrt(B * B + 4.0 * a * s))
    return float_or_array(np.clip(1.0 - u, 0.0, 1.0))


def r_g_max(C1, C2, p, r_x=None):
    """Stable token correlation r^l_gmax of the backward gradient (Kedia et al. App. F).

        r_g = [C1 (1 − p) + C2 (1 − p)(1/2 + asin(r_x)/π) r_g] / (C1 + C2),

    linear in r_g, so r_g = C1 (1 − p) / (C1 + C2 − C2 (1 − p)(1/2 + asin(r_x)/π)); the denominator is
    ≥ C1 + p C2, > 0 except for C1 = 0, p = 0, r_x = 1 (FFN only, no dropout: every r_g is a fixed point; raises
    ``ValueError``). ``r_x`` (the forward correlation feeding the ReLU derivative) defaults to :func:`r_max`.

    The paper states r_gmax = 0.87 for C1 = 2.2, C2 = 0.4, p = 0.1; the formula gives 0.8627. Each of 0.88 and 0.87
    is reachable within ±0.005 from some (C1, C2) inside the printed precision of 2.2 and 0.4, but no single pair
    gives both (tests/laws/test_rank_collapse.py).
    Assumes: C1, C2 ≥ 0, C1 + C2 > 0, 0 ≤ p < 1, r_x ∈ [−1, 1]. Broadcasts.
    """
    C1, C2 = check_gains(C1, C2)
    p = check_dropout(p)
    r_x = r_max(C1, C2, p) if r_x is None else check_range(r_x, "r_x", lo=-1.0, hi=1.0)
    q = 1.0 - np.asarray(p)
    C1, C2 = np.asarray(C1), np.asarray(C2)
    den = C1 + C2 - C2 * q * (0.5 + np.arcsin(r_x) / math.pi)
    if np.any(den <= 0.0):
        raise ValueError("r_g_max is undetermined for C1 = 0 with p = 0 and r_x = 1 (every r_g is a fixed point)")
    return float_or_array(np.clip(C1 * q / den, 0.0, 1.0))


