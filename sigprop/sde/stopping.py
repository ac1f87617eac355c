"""Stopping times of covariance paths (Noci et al. Sec. 4.4, Def. 4.1, Fig. 5 and Fig. 8).

Sec. 4.4 / Fig. 8 define the stopping time of a covariance path as the first time t = l/n at which an eigenvalue of
V_t leaves [1e-4, 1e4] (the covariance becomes numerically degenerate or explodes); the SDE of Thm. 4.2 has a cubic,
non-Lipschitz drift, and the paper's convergence (Def. 4.1) is that of the process stopped at such times.
A path that never leaves has stopping time +inf.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.validate import check_range

__all__ = ["EIG_BOUNDS", "check_eig_bounds", "exited", "stopping_times"]

#: Eigenvalue band of Noci et al. Fig. 8: a path stops when an eigenvalue of V drops below 1e-4 or exceeds 1e4.
EIG_BOUNDS = (1e-4, 1e4)


def check_eig_bounds(bounds) -> tuple[float, float]:
    """Validate an eigenvalue band (lo, hi) with 0 <= lo < hi <= inf; raise ``ValueError`` naming ``eig_bounds``."""
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"eig_bounds must be a pair (lo, hi) with 0 <= lo < hi (got {bounds!r})") from None
    check_range(lo, "eig_bounds lo", lo=0.0)
    if not hi > lo:
        raise ValueError(f"eig_bounds must satisfy lo < hi (got {bounds!r})")
    return lo, hi


def exited(eigvals: torch.Tensor, bounds) -> torch.Tensor:
    """Boolean (S,) mask: some eigenvalue of a (S, m) batch lies outside [lo, hi] (or is not finite)."""
    lo, hi = check_eig_bounds(bounds)
    bad = ~torch.isfinite(eigvals).all(dim=-1)
    return bad | (eigvals.amin(dim=-1) < lo) | (eigvals.amax(dim=-1) > hi)


def stopping_times(times, v_path, bounds=EIG_BOUNDS) -> np.ndarray:
    """First recorded time at which an eigenvalue of V leaves [lo, hi], per sample; +inf if never (Sec. 4.4).

    ``times``: (k,) increasing; ``v_path``: (S, k, m, m) symmetric matrices (e.g. a recorded SDE path or the
    covariances of finite networks layer by layer, t = l/n). Only the recorded times are inspected.
    """
    t = np.asarray(times, dtype=np.float64)
    v = torch.as_tensor(np.asarray(v_path), dtype=torch.float64)
    if v.ndim != 4 or v.shape[1] != t.shape[0] or v.shape[-1] != v.shape[-2]:
        raise ValueError(f"v_path must have shape (S, k, m, m) with k = len(times) = {t.shape[0]} "
                         f"(got {tuple(v.shape)})")
    s, k, m, _ = v.shape
    flat = v.reshape(s * k, m, m)
    finite = torch.isfinite(flat).all(dim=(-1, -2))
    eig = torch.full((s * k, m), float("nan"), dtype=torch.float64)
    if finite.any():
        eig[finite] = torch.linalg.eigvalsh(flat[finite])
    out = exited(eig, bounds).reshape(s, k).numpy()
    first = np.where(out.any(axis=1), out.argmax(axis=1), -1)
    return np.where(first >= 0, t[np.clip(first, 0, None)], np.inf)
