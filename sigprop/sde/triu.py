"""Upper-triangle vectorisation of a batch of m x m covariances, and the linear-network diffusion Sigma_lin.

Noci et al. Def. 3.1 write the covariance V as the vector of its upper-triangle entries V^{ab}, a <= b, of length
p = m(m+1)/2; a diffusion covariance is then a p x p matrix indexed by pairs ((a, b), (d, w)). The order used here is
the row-major order of ``torch.triu_indices(m, m)``: (0,0), (0,1), ..., (0,m-1), (1,1), ...
"""

from __future__ import annotations

import torch

__all__ = ["triu_pairs", "to_triu", "from_triu", "as_cov_batch", "sigma_lin", "pair_products", "correlation"]


def triu_pairs(m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row and column indices (a, b), a <= b, of the p = m(m+1)/2 upper-triangle entries, in row-major order."""
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"number of tokens m must be an integer >= 1 (got {m!r})")
    idx = torch.triu_indices(m, m)
    return idx[0], idx[1]


def as_cov_batch(v, name: str = "V") -> torch.Tensor:
    """Return ``v`` as a float64 tensor of shape (S, m, m); a single (m, m) matrix gets a batch axis of size 1.

    Raises ``ValueError`` naming ``name`` if the shape is not (m, m) or (S, m, m), an entry is not finite, or the
    matrices are not symmetric (to 1e-10 relative).
    """
    t = torch.as_tensor(v, dtype=torch.float64)
    if t.ndim == 2:
        t = t.unsqueeze(0)
    if t.ndim != 3 or t.shape[-1] != t.shape[-2] or t.shape[-1] < 1:
        raise ValueError(f"{name} must have shape (m, m) or (S, m, m) (got {tuple(t.shape)})")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite")
    scale = t.abs().amax(dim=(-1, -2), keepdim=True).clamp_min(1e-300)
    if ((t - t.transpose(-1, -2)).abs() > 1e-10 * scale).any():
        raise ValueError(f"{name} must be symmetric")
    return t


def to_triu(v: torch.Tensor) -> torch.Tensor:
    """(..., m, m) symmetric matrices -> (..., p) vectors of their upper-triangle entries (Def. 3.1)."""
    a, b = triu_pairs(v.shape[-1])
    return v[..., a, b]


def from_triu(x: torch.Tensor, m: int) -> torch.Tensor:
    """(..., p) upper-triangle vectors -> (..., m, m) symmetric matrices (inverse of :func:`to_triu`)."""
    a, b = triu_pairs(m)
    if x.shape[-1] != a.numel():
        raise ValueError(f"upper-triangle vector must have length m(m+1)/2 = {a.numel()} (got {x.shape[-1]})")
    out = x.new_zeros(x.shape[:-1] + (m, m))
    out[..., a, b] = x
    out[..., b, a] = x
    return out


def pair_products(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The p x p matrix [P^{ad} Q^{bw} + P^{aw} Q^{bd}]_{a<=b, d<=w} for batches of m x m matrices P, Q.

    Shape (S, m, m) x (S, m, m) -> (S, p, p). With P = Q = V this is Sigma_lin (Thm. 3.2); the attention "A" term of
    Thm. 4.2 is ``pair_products(V, K) + pair_products(K, V)`` (see :mod:`sigprop.sde.shaped_attention`).
    """
    a, b = triu_pairs(p.shape[-1])
    ai, bi = a[:, None], b[:, None]
    dj, wj = a[None, :], b[None, :]
    return p[..., ai, dj] * q[..., bi, wj] + p[..., ai, wj] * q[..., bi, dj]


def sigma_lin(v: torch.Tensor) -> torch.Tensor:
    """Sigma_lin(V) = [V^{ad} V^{bw} + V^{aw} V^{bd}]_{a<=b, d<=w} (Noci et al. Thm. 3.2; Li et al. 2022).

    It is n times the covariance of the upper triangle of a Wishart(V, n)/n matrix, i.e. the diffusion of a linear
    network. Input (S, m, m) (or (m, m)), output (S, p, p), float64.
    """
    v = as_cov_batch(v)
    return pair_products(v, v)


def correlation(v: torch.Tensor) -> torch.Tensor:
    """rho^{ab} = V^{ab} / sqrt(V^{aa} V^{bb}) for (..., m, m) covariances, clipped to [-1, 1]; 0 where a diagonal
    entry is 0, and exactly 1 on the diagonal where V^{aa} > 0 (so that nu(rho^{aa}) = nu(1) = 0 without round-off)."""
    d = torch.diagonal(v, dim1=-2, dim2=-1).clamp_min(0.0).sqrt()
    den = d[..., :, None] * d[..., None, :]
    safe = torch.where(den > 0, den, torch.ones_like(den))
    rho = torch.where(den > 0, v / safe, torch.zeros_like(v)).clamp(-1.0, 1.0)
    eye = torch.eye(v.shape[-1], dtype=torch.bool)
    return torch.where(eye & (den > 0), torch.ones_like(rho), rho)
