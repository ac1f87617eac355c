"""Batched Euler-Maruyama integration of a covariance SDE dV = b(V) dt + Sigma(V)^{1/2} dB (Noci et al. Eq. 5, 12).

All S samples advance together (one tensor operation per time step; the only Python loop is over steps), in float64,
with a seeded ``torch.Generator``. Per step, for the samples still running:

    v_{k+1} = v_k + b(V_k) dt + Sigma(V_k)^{1/2} xi_k sqrt(dt),   xi_k ~ N(0, I_p) i.i.d.,

on the upper-triangle vector v of V (p = m(m+1)/2 entries, Def. 3.1).

Square root of Sigma (``sqrt_method``):
  * "eigh" (default): the symmetric PSD root Q diag(sqrt(max(w, 0))) Q^T. Eigenvalues w < 0 are round-off (Sigma is a
    covariance) and are clipped to 0, so no jitter is needed and singular Sigma (e.g. V of rank < m) is handled.
  * "cholesky": L = chol(Sigma + jitter * (tr Sigma / p) I) (relative jitter, default 1e-12); any sample whose
    factorisation still fails falls back to "eigh" (counted in ``SDEPath.sqrt_fallbacks``).

Keeping V positive semi-definite (``psd``):
  * "clip" (default): after each step, a sample whose V has a negative eigenvalue is replaced by its nearest PSD
    matrix in Frobenius norm (eigenvalues clipped at 0). Each (sample, step) where this happens counts once in
    ``SDEPath.psd_interventions``: it measures the time-discretisation error near the boundary of the PSD cone.
  * "none": no projection (e.g. for scalar test SDEs that may go negative).

Stopping (Sec. 4.4): the first grid time at which an eigenvalue of the raw Euler iterate (before projection) leaves
``eig_bounds`` (default [1e-4, 1e4], Fig. 8); +inf if never; ``eig_bounds=None`` disables it. With
``freeze_stopped=True`` (default) a stopped sample is frozen, so the recorded paths are the stopped process
V_{t ^ T} of Def. 4.1; with False it keeps integrating. A sample whose iterate is not finite is always frozen at its
last finite value (and stopped, counted in ``SDEPath.nonfinite``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..core.validate import check_range
from .stopping import EIG_BOUNDS, check_eig_bounds, exited
from .transformer import SDECoefficients
from .triu import as_cov_batch, correlation, from_triu, to_triu

__all__ = ["SDEPath", "euler_maruyama", "sqrt_psd", "project_psd"]

SQRT_METHODS = ("eigh", "cholesky")
PSD_METHODS = ("clip", "none")


@dataclass(frozen=True)
class SDEPath:
    """Result of :func:`euler_maruyama`.

    times: (k,) recorded times; v: (S, k, m, m) covariances at those times; stopping_times: (S,) first exit time of
    an eigenvalue from eig_bounds (+inf if never or if disabled); psd_interventions: number of (sample, step) PSD
    projections; sqrt_fallbacks: Cholesky failures handled by eigh; nonfinite: samples frozen for a non-finite
    iterate; dt, n_steps: the grid.
    """

    times: np.ndarray
    v: np.ndarray
    stopping_times: np.ndarray
    psd_interventions: int
    sqrt_fallbacks: int
    nonfinite: int
    dt: float
    n_steps: int

    def corr(self, a: int = 0, b: int = 1) -> np.ndarray:
        """rho^{ab} = V^{ab}/sqrt(V^{aa} V^{bb}) along the recorded path, shape (S, k)."""
        return correlation(torch.from_numpy(self.v))[..., a, b].numpy()


def sqrt_psd(sigma: torch.Tensor, method: str = "eigh", jitter: float = 1e-12) -> tuple[torch.Tensor, int]:
    """A matrix R with R R^T = Sigma for a (S, p, p) batch of covariances; returns (R, number of eigh fallbacks).

    See the module docstring for the two methods and the jitter policy.
    """
    if method not in SQRT_METHODS:
        raise ValueError(f"sqrt_method must be one of {SQRT_METHODS} (got {method!r})")
    sigma = 0.5 * (sigma + sigma.transpose(-1, -2))
    if method == "cholesky":
        p = sigma.shape[-1]
        scale = torch.diagonal(sigma, dim1=-2, dim2=-1).sum(-1).clamp_min(0.0) / p
        eye = torch.eye(p, dtype=sigma.dtype)
        chol, info = torch.linalg.cholesky_ex(sigma + jitter * scale[:, None, None] * eye)
        bad = info != 0
        if bad.any():
            chol[bad] = sqrt_psd(sigma[bad], "eigh")[0]
        return chol, int(bad.sum())
    w, q = torch.linalg.eigh(sigma)
    return (q * w.clamp_min(0.0).sqrt()[..., None, :]) @ q.transpose(-1, -2), 0


def project_psd(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Nearest PSD matrices (Frobenius) of a (S, m, m) batch; returns (projected, acted mask, raw eigenvalues)."""
    w, q = torch.linalg.eigh(v)
    acted = w[..., 0] < 0
    out = v.clone()
    if acted.any():
        qa = q[acted]
        out[acted] = (qa * w[acted].clamp_min(0.0)[..., None, :]) @ qa.transpose(-1, -2)
    return out, acted, w


def _grid(t_end: float, dt: float, record_times) -> tuple[int, np.ndarray, np.ndarray]:
    t_end = float(check_range(t_end, "t_end", lo=0.0))
    dt = float(check_range(dt, "dt", lo=0.0, lo_open=True, allowed="(0, inf)"))
    n_steps = round(t_end / dt)
    if abs(n_steps * dt - t_end) > 1e-9 * max(1.0, t_end):
        raise ValueError(f"t_end must be a whole number of steps dt (got t_end={t_end}, dt={dt})")
    rec = np.array([0.0, t_end] if record_times is None else record_times, dtype=np.float64).reshape(-1)
    steps = np.rint(rec / dt).astype(np.int64)
    if (np.abs(steps * dt - rec) > 1e-9 * np.maximum(1.0, np.abs(rec))).any() or (steps < 0).any() \
            or (steps > n_steps).any():
        raise ValueError(f"record_times must be multiples of dt within [0, t_end] (got {rec.tolist()})")
    if np.any(np.diff(steps) <= 0):
        raise ValueError("record_times must be strictly increasing")
    return n_steps, steps, steps * dt


def euler_maruyama(coeffs: SDECoefficients, v0, t_end: float, dt: float, n_samples: int | None = None,
                   record_times=None, seed: int = 0, psd: str = "clip", eig_bounds=EIG_BOUNDS,
                   freeze_stopped: bool = True, sqrt_method: str = "eigh", jitter: float = 1e-12) -> SDEPath:
    """Integrate dV = b(V) dt + Sigma(V)^{1/2} dB on [0, t_end] with step dt for S samples at once.

    coeffs: drift (S, m, m) -> (S, p) and diffusion (S, m, m) -> (S, p, p), e.g. from
    :func:`sigprop.sde.transformer.covariance_sde`. v0: (m, m) (copied to ``n_samples`` samples) or (S, m, m).
    t_end = d/n for a depth-d, width-n network; it must be a whole number of steps, and record_times (default
    [0, t_end]) multiples of dt. seed: of the ``torch.Generator`` that draws every Gaussian increment (same seed,
    same path). Policies for the square root, the PSD projection and stopping: module docstring.
    """
    if psd not in PSD_METHODS:
        raise ValueError(f"psd must be one of {PSD_METHODS} (got {psd!r})")
    bounds = None if eig_bounds is None else check_eig_bounds(eig_bounds)
    n_steps, rec_steps, rec_times = _grid(t_end, dt, record_times)
    v = as_cov_batch(v0, "v0").clone()
    if n_samples is not None:
        if not isinstance(n_samples, int) or n_samples < 1:
            raise ValueError(f"n_samples must be a positive integer (got {n_samples!r})")
        if v.shape[0] == 1:
            v = v.expand(n_samples, -1, -1).clone()
        elif v.shape[0] != n_samples:
            raise ValueError(f"v0 has {v.shape[0]} samples but n_samples={n_samples}")
    s, m, _ = v.shape
    gen = torch.Generator().manual_seed(int(seed))
    sq_dt = math.sqrt(dt)

    stop = torch.full((s,), math.inf, dtype=torch.float64)
    if bounds is not None:
        stop[exited(torch.linalg.eigvalsh(v), bounds)] = 0.0
    out = torch.empty((s, len(rec_steps), m, m), dtype=torch.float64)
    rec_pos = {int(k): i for i, k in enumerate(rec_steps)}
    if 0 in rec_pos:
        out[:, rec_pos[0]] = v
    dead = torch.zeros(s, dtype=torch.bool)  # frozen for a non-finite iterate
    n_psd = n_fallback = n_nonfinite = 0
    for k in range(1, n_steps + 1):
        active = torch.isinf(stop) if freeze_stopped else ~dead
        xi = torch.randn((s, m * (m + 1) // 2), generator=gen, dtype=torch.float64)  # drawn for all: seed-stable
        if active.any():
            va = v[active]
            root, fb = sqrt_psd(coeffs.diffusion(va), sqrt_method, jitter)
            n_fallback += fb
            step = coeffs.drift(va) * dt + (root @ xi[active][..., None])[..., 0] * sq_dt
            new = from_triu(to_triu(va) + step, m)
            ok = torch.isfinite(new).all(dim=(-1, -2))
            idx = active.nonzero()[:, 0]
            if (~ok).any():
                n_nonfinite += int((~ok).sum())
                dead[idx[~ok]] = True
                stop[idx[~ok]] = torch.where(torch.isinf(stop[idx[~ok]]), k * dt, stop[idx[~ok]])
                idx, new = idx[ok], new[ok]
            if psd == "clip":
                new, acted, w = project_psd(new)
                n_psd += int(acted.sum())
            else:
                w = torch.linalg.eigvalsh(new)
            if bounds is not None:
                hit = exited(w, bounds) & torch.isinf(stop[idx])
                stop[idx[hit]] = k * dt
            v[idx] = new
        if k in rec_pos:
            out[:, rec_pos[k]] = v
    return SDEPath(times=rec_times, v=out.numpy(), stopping_times=stop.numpy(), psd_interventions=n_psd,
                   sqrt_fallbacks=n_fallback, nonfinite=n_nonfinite, dt=dt, n_steps=n_steps)
