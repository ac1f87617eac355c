"""The argument checks the model-level laws share: layer counts, dropout, block gains, per-layer values."""

from __future__ import annotations

import numpy as np

from ..core.validate import check_range

__all__ = ["float_or_array", "check_dropout", "check_n_layers", "check_gains", "per_layer"]


def float_or_array(x):
    """Return a Python float for 0-d results and a float64 array otherwise."""
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def check_dropout(p):
    """Validate a dropout probability p ∈ [0, 1)."""
    return check_range(p, "dropout p", lo=0.0, hi=1.0, hi_open=True)


def check_n_layers(n_layers) -> int:
    """Validate a layer count: an integer ≥ 1 (shared by the laws modules)."""
    if isinstance(n_layers, bool) or not isinstance(n_layers, (int, np.integer)) or n_layers < 1:
        raise ValueError(f"n_layers must be an integer >= 1 (got {n_layers!r})")
    return int(n_layers)


def check_gains(C1, C2):
    """Validate the block gains C1, C2 ≥ 0 with C1 + C2 > 0 (some block adds to the residual stream)."""
    C1 = check_range(C1, "C1", lo=0.0)
    C2 = check_range(C2, "C2", lo=0.0)
    if np.any(np.asarray(C1) + np.asarray(C2) <= 0.0):
        raise ValueError("C1 + C2 must be > 0 (got C1 = C2 = 0: no block adds to the residual stream)")
    return C1, C2


def per_layer(value, n_layers: int, name: str, lo=0.0, hi=None):
    """Broadcast a scalar or a length-N array of per-layer values to shape (N,), validating the range."""
    v = np.asarray(check_range(value, name, lo=lo, hi=hi), dtype=np.float64)
    if v.ndim == 0:
        return np.full(n_layers, float(v))
    if v.shape != (n_layers,):
        raise ValueError(f"{name} must be a scalar or have shape ({n_layers},) = (n_layers,) (got shape {v.shape})")
    return v
