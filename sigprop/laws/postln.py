"""Vanilla Post-LN transformer: exponential gradient growth or decay (Kedia et al. App. E.2).

In Post-LN the LayerNorm sits after each residual add, so the forward variance is 1 at every layer (App. E.2.1),
but every layer multiplies the backward gradient variance by the same kind of factor

    C5,n = (1 + C1 r^l_{g,out,n}) / (1 + C1 r^l_{x,out,n−1})                           (App. E.2.2)

(C2 cancels between the FFN and the attention sub-layers), so the gradient behaves like C5^(N−n): exponential in
depth unless r_g = r_x exactly. With C1 from :func:`sigprop.laws.rank_collapse.block_constants` and the stable
correlations of :func:`sigprop.laws.rank_collapse.r_max`, :func:`~sigprop.laws.rank_collapse.r_g_max`.
"""

from __future__ import annotations

import numpy as np

from ..core.validate import check_range
from .checks import check_n_layers, float_or_array

__all__ = ["postln_gradient_factor", "postln_gradient_profile", "postln_layers_for_change"]


def postln_gradient_factor(C1, r_g, r_x):
    """Per-layer gradient-variance factor of vanilla Post-LN, C5 = (1 + C1 r_g)/(1 + C1 r_x) (Kedia et al. App. E.2.2).

    σ²_{g,n−1} = C5,n σ²_{g,n}. Going back through a layer, each LayerNorm divides the gradient variance by the
    variance of its input (1 + C2 after the FFN add, 1 + C1 r_x after the attention add) and each residual add
    multiplies it by 1 + the block's backward gain (1 + C2 for the FFN, 1 + C1 r_g for the attention, whose backward
    gain carries r_g as in App. E.1.2); the two (1 + C2) cancel. The paper groups these as (1 + C2)/(1 + C1 r_x) and
    (1 + C1 r_g)/(1 + C2).
    C5 = 1 exactly when r_g = r_x; C5 < 1 (vanishing gradient towards the input) when r_g < r_x.
    Assumes: C1 ≥ 0, r_g, r_x ∈ [0, 1]; broadcasts.
    """
    C1 = check_range(C1, "C1", lo=0.0)
    r_g = check_range(r_g, "r_g", lo=0.0, hi=1.0)
    r_x = check_range(r_x, "r_x", lo=0.0, hi=1.0)
    return float_or_array((1.0 + np.asarray(C1) * r_g) / (1.0 + np.asarray(C1) * r_x))


def postln_gradient_profile(n_layers, C5, include_input=False):
    """σ²_{g,n}/σ²_{g,N} of vanilla Post-LN for n = 1..N (Kedia et al. eq. 3, App. E.2.2).

    With a constant factor, σ²_{g,n}/σ²_{g,N} = C5^(N−n) — the paper's eq. 3 (it writes the product Π_{i=n}^{N} but
    the exponent N − n: the gradient at the output of layer n has passed through layers n+1..N). ``C5`` may also be a
    length-N array of per-layer factors C5,m (layer m maps σ²_{g,m} to σ²_{g,m−1}); then the ratio is
    Π_{m=n+1}^{N} C5,m. ``include_input=True`` prepends n = 0 (the embedding output: all N factors).
    Returns an array of shape (N,) or (N + 1,). Requires C5 > 0.
    """
    n = check_n_layers(n_layers)
    c5 = np.asarray(check_range(C5, "C5", lo=0.0, lo_open=True, allowed="(0, inf)"), dtype=np.float64)
    if c5.ndim == 0:
        c5 = np.full(n, float(c5))
    elif c5.shape != (n,):
        raise ValueError(f"C5 must be a scalar or have shape ({n},) = (n_layers,) (got shape {c5.shape})")
    # log-space product: C5^(N-n) with N up to 10^4 must not under/overflow before it has to
    tail = np.exp(np.cumsum(np.log(c5)[::-1])[::-1])  # tail[k] = product of the factors of layers k+1..N
    ratio = np.append(tail[1:], 1.0)
    return np.concatenate([[tail[0]], ratio]) if include_input else ratio


def postln_layers_for_change(C5, change):
    """Number of layers after which a constant factor C5 changes the gradient variance by ``change``×.

    Solves C5^n = change (or 1/change for a fall when C5 < 1): n = ln(change)/|ln C5|. E.g. the paper's example
    C5 = 0.96, "a 2000x fall in gradient after 200 layers" (App. E.2.2): a 2000× fall takes 186.2 layers, and 200
    layers give a 0.96^−200 = 3.5e3× fall. Requires C5 > 0, C5 ≠ 1, change > 1. Broadcasts.
    """
    c5 = np.asarray(check_range(C5, "C5", lo=0.0, lo_open=True, allowed="(0, inf)"))
    if np.any(c5 == 1.0):
        raise ValueError("C5 must differ from 1 (C5 = 1 never changes the gradient)")
    change = check_range(change, "change", lo=1.0, lo_open=True, allowed="(1, inf)")
    return float_or_array(np.log(change) / np.abs(np.log(c5)))
