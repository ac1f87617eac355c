"""Vanilla Pre-LN transformer: linear forward growth and hyperbolic gradient growth (Kedia et al. App. E.1).

Layer n (n = 1..N) maps the residual stream x_{n−1} to x_n = x_{n−1} + Attn(LN(x_{n−1})) + FFN(LN(·)). Because the
blocks see a LayerNorm'd (unit-variance) input, each layer adds a *constant* variance C1 r^l_{x,n} + C2 (App. E.1,
with C1, C2 from :func:`sigprop.laws.rank_collapse.block_constants`). Going backwards, LayerNorm divides the block's
gradient by the forward variance at its input, which grows like n, so the gradient grows by a factor 1 + C/(n − 1)
per layer and hence like (N/n)^C overall — hyperbolically for C = 1 (App. E.1.2).

Indexing used throughout: σ²_{x,n} is the variance at the output of layer n (σ²_{x,0} = σ²_in, the embedding
output); σ²_{g,n} is the gradient variance at the same site; r_x[n−1], r_g[n−1] are the token correlations of the
forward input and of the backward output gradient of layer n.
"""

from __future__ import annotations

import numpy as np

from ..core.validate import check_range
from .checks import check_gains, check_n_layers, float_or_array, per_layer

__all__ = [
    "preln_forward_variance",
    "preln_forward_bounds",
    "preln_gradient_constant",
    "preln_gradient_growth",
    "preln_gradient_bounds",
    "hyperbolic_gradient",
]


def _check_var_in(var_in, allow_zero=True):
    return check_range(var_in, "var_in", lo=0.0, lo_open=not allow_zero,
                       allowed="[0, inf)" if allow_zero else "(0, inf)")


def preln_forward_variance(n_layers, C1, C2, r, var_in=1.0):
    """Variance of the Pre-LN residual stream after each layer, σ²_{x,n} for n = 1..N (Kedia et al. App. E.1.1).

        σ²_{x,n} = σ²_in + Σ_{i=1..n} (C1 r_i + C2)      (= σ²_in + n (C1 r + C2) for a constant r),

    where r_i = r^l_{x_in} of layer i (scalar or length-N array). Each block sees LayerNorm'd input of unit variance,
    so the attention adds C1 r_i and the FFN C2 (Table 2), independently of σ²_{x,i−1}; block outputs are assumed
    uncorrelated with the skip stream (initialisation). Returns an array of shape (N,).
    App. E.1.1's Xavier example (C1 = 2.2, C2 = 0.4, r = 0.85) has C3 = C1 r + C2 = 2.27, printed "≈ 2.2N"; note that
    App. F's own r_max for these constants is 0.887 (C3 = 2.35).
    Raises ``ValueError`` for n_layers < 1, r ∉ [0, 1], var_in < 0 or invalid C1, C2.
    """
    n = check_n_layers(n_layers)
    C1, C2 = check_gains(C1, C2)
    r = per_layer(r, n, "r", hi=1.0)
    var_in = _check_var_in(var_in)
    return var_in + np.cumsum(C1 * r + C2)


def preln_forward_bounds(n_layers, C1, C2, r_min, r_max, var_in=1.0):
    """App. E.1.1's bounds σ²_in + n C4 ≤ σ²_{x,n} ≤ σ²_in + n C3, with C3 = C1 r_max + C2, C4 = C1 r_min + C2.

    Returns (lower, upper), each of shape (N,) for n = 1..N; hence σ²_model = Θ(N) (eq. 2). Requires
    0 ≤ r_min ≤ r_max ≤ 1.
    """
    n = check_n_layers(n_layers)
    C1, C2 = check_gains(C1, C2)
    r_lo = check_range(r_min, "r_min", lo=0.0, hi=1.0)
    r_hi = check_range(r_max, "r_max", lo=0.0, hi=1.0)
    if np.any(np.asarray(r_lo) > np.asarray(r_hi)):
        raise ValueError(f"r_min must be <= r_max (got r_min={r_min!r}, r_max={r_max!r})")
    var_in = _check_var_in(var_in)
    layers = np.arange(1, n + 1, dtype=np.float64)
    return var_in + layers * (C1 * r_lo + C2), var_in + layers * (C1 * r_hi + C2)


def preln_gradient_constant(C1, C2, r_x, r_g):
    """C_gpre = (C1 r_g + C2)/(C1 r_x + C2) (Kedia et al. App. E.1.2), the exponent of the (N/n)^C gradient law.

    Over r_x, r_g ∈ [0, 1] it ranges from C_gpre,min = C2/(C1 + C2) (r_g = 0, r_x = 1) to
    C_gpre,max = (C1 + C2)/C2 (r_g = 1, r_x = 0); C_gpre = 1 when r_g = r_x. Broadcasts.
    """
    C1, C2 = check_gains(C1, C2)
    r_x = check_range(r_x, "r_x", lo=0.0, hi=1.0)
    r_g = check_range(r_g, "r_g", lo=0.0, hi=1.0)
    return float_or_array((C1 * np.asarray(r_g) + C2) / (C1 * np.asarray(r_x) + C2))


def preln_gradient_growth(n_layers, C1, C2, r_x, r_g, var_in=1.0, denominator="exact", include_input=False):
    """Gradient variance of a Pre-LN model relative to the top, σ²_{g,n}/σ²_{g,N} (Kedia et al. App. E.1.2).

    App. E.1.2's recurrence, one factor per layer (attention and FFN merged to first order, as in the paper):

        σ²_{g,n−1} = (1 + (C1 r_g,n + C2) / σ²_{x,n−1}) σ²_{g,n}.

    ``denominator`` chooses the forward variance at layer n's input:

    * ``"paper"``: σ²_{x,n−1} ≈ C3 (n − 1) with C3 = C1 r_x,n + C2, i.e. the factor is 1 + C_gpre,n/(n − 1),
      C_gpre,n = (C1 r_g,n + C2)/(C1 r_x,n + C2) — exactly the printed recurrence. It is undefined at n = 1
      (division by 0), so it cannot produce the gradient at the embedding output (``include_input=True`` raises).
      With C_gpre = 1 it gives N/n exactly (telescoping product), i.e. :func:`hyperbolic_gradient`.
    * ``"exact"`` (default): σ²_{x,n−1} = σ²_in + Σ_{i<n} (C1 r_x,i + C2), the forward variance
      :func:`preln_forward_variance` actually predicts, finite at n = 1 when σ²_in > 0. (The paper drops σ²_in for
      large d.) For a constant r_x and σ²_in = 0 it coincides with ``"paper"`` for n ≥ 2.

    Returns an array of shape (N,) holding σ²_{g,n}/σ²_{g,N} for n = 1..N (last entry 1), or of shape (N + 1,) for
    n = 0..N with ``include_input=True`` (entry 0: gradient at the embedding output). ``r_x``, ``r_g`` are scalars or
    length-N arrays in [0, 1]; ``var_in`` must be > 0 when the exact denominator reaches n = 1.
    """
    n = check_n_layers(n_layers)
    C1, C2 = check_gains(C1, C2)
    rx = per_layer(r_x, n, "r_x", hi=1.0)
    rg = per_layer(r_g, n, "r_g", hi=1.0)
    if denominator not in ("exact", "paper"):
        raise ValueError(f"denominator must be one of ('exact', 'paper') (got {denominator!r})")
    layers = np.arange(1, n + 1, dtype=np.float64)  # layer index n of each factor (maps g_n to g_{n-1})
    num = C1 * rg + C2
    if denominator == "paper":
        if include_input:
            raise ValueError("include_input=True needs the factor of layer 1, whose paper denominator C3*(n-1) is 0; "
                             "use denominator='exact' with var_in > 0")
        den = (C1 * rx + C2) * (layers - 1.0)  # 0 for layer 1, whose factor is never used here
    else:
        var_in = _check_var_in(var_in)
        den = var_in + np.concatenate([[0.0], np.cumsum(C1 * rx + C2)[:-1]])
        if include_input and den[0] <= 0.0:
            raise ValueError("var_in must be > 0 for include_input=True (the layer-1 factor divides by var_in)")
    factors = np.ones(n)
    factors[1:] = 1.0 + num[1:] / den[1:]  # factors of layers 2..N
    # ratio at the output of layer n (n = 1..N) = product of the factors of layers n+1..N
    tail = np.cumprod(factors[::-1])[::-1]  # tail[k] = product of the factors of layers k+1..N
    ratio = np.append(tail[1:], 1.0)
    if include_input:
        ratio = np.concatenate([[ratio[0] * (1.0 + num[0] / den[0])], ratio])
    return ratio


def hyperbolic_gradient(n, N):
    """App. E.1.2's hyperbolic law σ²_{g,n}/σ²_{g,N} = N/n (C_gpre = 1). Broadcasts; requires 1 ≤ n ≤ N."""
    n_arr = np.asarray(check_range(n, "n", lo=1.0))
    N_arr = np.asarray(check_range(N, "N", lo=1.0))
    if np.any(n_arr > N_arr):
        raise ValueError(f"n must be <= N (got n={n!r}, N={N!r})")
    return float_or_array(N_arr / n_arr)


def preln_gradient_bounds(n, N, C1, C2):
    """App. E.1.2's bounds (N/n)^C_gpre,min ≤ σ²_{g,n}/σ²_{g,N} ≤ (N/n)^C_gpre,max.

    C_gpre,min = C2/(C1 + C2) ≤ 1 and C_gpre,max = (C1 + C2)/C2 ≥ 1 (0.15 and 6.5 for the paper's C1 = 2.2,
    C2 = 0.4). The paper prints C_gpre,min in both bounds of its discrete inequality (a typo). The bounds are
    rigorous for the ``denominator="paper"`` recurrence of :func:`preln_gradient_growth`: by Bernoulli's inequality
    (1 + 1/k)^C ≤ 1 + C/k for C ≤ 1 and ≥ for C ≥ 1, so the discrete product lies between the continuous laws.
    Returns (lower, upper); broadcasts; requires 1 ≤ n ≤ N and C2 > 0.
    """
    C1, C2 = check_gains(C1, C2)
    C2 = check_range(C2, "C2", lo=0.0, lo_open=True, allowed="(0, inf) (C_gpre,max = (C1 + C2)/C2)")
    ratio = np.asarray(hyperbolic_gradient(n, N))
    c_min = np.asarray(C2) / (np.asarray(C1) + C2)
    c_max = (np.asarray(C1) + C2) / np.asarray(C2)
    return float_or_array(ratio**c_min), float_or_array(ratio**c_max)
