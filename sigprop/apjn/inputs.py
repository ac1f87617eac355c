"""Inputs for APJN measurements (Alekseev 2026, Assumption 2.1, App. A): permutation-symmetric (equiangular) token
configurations with a prescribed (q⁰, p⁰), real images (scikit-learn's 8×8 digits, upsampled) through a model's
patch and position embedding, and the (q⁰, p⁰) estimator of Eq. 21.

Equiangular configurations. n tokens h_1, …, h_n ∈ R^d with |h_s|²/d = q⁰ and h_s·h_t/d = p⁰ (s ≠ t) have the Gram
matrix G = H Hᵀ = d[(q⁰ − p⁰) I + p⁰ 11ᵀ] (Assumption 2.1.1), whose eigenvalues are d(q⁰ − p⁰) on 1^⊥ (multiplicity
n − 1) and d(q⁰ − p⁰ + n p⁰) on 1. For 0 ≤ p⁰ < q⁰ it is positive definite, so rank n ≤ d is necessary; p⁰ = q⁰
(all tokens equal) is rank one and allows any n. Construction: H = G^{1/2} Qᵀ with Q ∈ R^{d×n} having orthonormal
columns (the first n columns of a Haar-random rotation) and the symmetric square root in closed form,

    G^{1/2} = √(d(q⁰ − p⁰)) (I − 11ᵀ/n) + √(d(q⁰ − p⁰ + n p⁰)) 11ᵀ/n,

so H Hᵀ = G^{1/2} Qᵀ Q G^{1/2} = G exactly (to float64 round-off). The paper draws its synthetic tokens from a
Gaussian (App. A, Fig. 1(a)), which matches G only on average; this construction matches it for every draw, and the
random rotation makes the token coordinates individually look Gaussian-like at large d.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..core.validate import integer_value
from ..data.digits import digits_images

__all__ = ["equiangular_tokens", "estimate_q0_p0", "digits_images", "embed_images", "digits_hidden_states"]


def _number(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number (got {v!r})")
    return float(v)


def equiangular_tokens(n: int, d: int, q0: float, p0: float, generator: torch.Generator | None = None,
                       dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """A permutation-symmetric token configuration H ∈ R^{n×d} (Alekseev Assumption 2.1.1; module docstring) with
    |h_s|²/d = q⁰ for every token and h_s·h_t/d = p⁰ for every pair s ≠ t, exactly (built in float64, then cast to
    ``dtype``). The frame is a Haar-random rotation drawn with ``generator``. Needs n ≥ 2, q⁰ > 0, 0 ≤ p⁰ ≤ q⁰
    (Alekseev restricts to p⁰ ≥ 0, Sec. 3.1) and n ≤ d unless p⁰ = q⁰ (the Gram matrix then has rank n)."""
    n, d = integer_value(n, "n (tokens)", 2), integer_value(d, "d (width)", 1)
    q0, p0 = _number(q0, "q0"), _number(p0, "p0")
    if q0 <= 0:
        raise ValueError(f"q0 must be > 0 (got {q0})")
    if not 0.0 <= p0 <= q0:
        raise ValueError(f"p0 must be in [0, q0] = [0, {q0}] (got {p0})")
    if p0 < q0 and n > d:
        raise ValueError(f"n = {n} tokens with p0 < q0 need n <= d = {d} (the Gram matrix d[(q0-p0)I + p0 11ᵀ] has "
                         f"rank n)")
    if p0 == q0:  # every token the same vector of squared norm d·q0
        f = torch.randn(d, generator=generator, dtype=torch.float64)
        h = (math.sqrt(d * q0) * f / f.norm()).expand(n, d).clone()
        return h.to(dtype=dtype, device=device)
    a = torch.randn(d, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)  # Haar: fix the signs of R's diagonal
    q = q * torch.sign(torch.diagonal(r)).where(torch.diagonal(r) != 0, torch.ones(n, dtype=torch.float64))
    avg = torch.full((n, n), 1.0 / n, dtype=torch.float64)
    eye = torch.eye(n, dtype=torch.float64)
    root = math.sqrt(d * (q0 - p0)) * (eye - avg) + math.sqrt(d * (q0 - p0 + n * p0)) * avg
    return (root @ q.T).to(dtype=dtype, device=device)


def estimate_q0_p0(h: torch.Tensor):
    """Alekseev Eq. 21: q⁰ = (1/n) Σ_s h_s·h_s/d and p⁰ = (1/(n(n−1))) Σ_{s≠t} h_s·h_t/d from hidden states ``h`` of
    shape (..., n, d) (n ≥ 2), computed in float64 as p⁰ = (|Σ_s h_s|² − Σ_s |h_s|²)/(n(n−1)d). Returns (q⁰, p⁰):
    Python floats for one configuration (n, d), numpy arrays of the leading shape otherwise."""
    if not isinstance(h, torch.Tensor) or h.dim() < 2:
        raise ValueError("h must be a tensor of shape (..., n, d)")
    n, d = h.shape[-2], h.shape[-1]
    if n < 2 or d < 1:
        raise ValueError(f"h needs n >= 2 tokens and d >= 1 (got shape {tuple(h.shape)})")
    x = h.detach().to(torch.float64)
    sq = x.pow(2).sum(dim=(-2, -1))
    total = x.sum(dim=-2).pow(2).sum(dim=-1)
    q0 = (sq / (n * d)).cpu().numpy()
    p0 = ((total - sq) / (n * (n - 1) * d)).cpu().numpy()
    if h.dim() == 2:
        return float(q0), float(p0)
    return q0, p0


# ----------------------------------------------------------------------------------------------------------------
# real inputs: scikit-learn's digits (sigprop.data.digits) through a model's embedding
# ----------------------------------------------------------------------------------------------------------------

def embed_images(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The hidden states h⁰ before the first block of a sigprop patch Transformer: ``images`` (N, C, H, W) through
    its patch embedding plus position embedding (no dropout), shape (N, n, d) (Alekseev App. A: "after the
    CIFAR-100 image has passed through the initial patch embedding and positional embedding")."""
    config = getattr(model, "config", None)
    if config is None or config.input != "patches":
        raise ValueError("embed_images needs a sigprop Transformer with input='patches'")
    ref = next(iter(model.parameters()))
    with torch.no_grad():
        return model.embed(images.to(device=ref.device, dtype=ref.dtype))


def digits_hidden_states(model: nn.Module, indices: Sequence[int] | None = None, count: int | None = None,
                         mode: str = "bilinear", generator: torch.Generator | None = None,
                         normalise: str = "standard") -> torch.Tensor:
    """:func:`digits_images` at the model's image size and channels through :func:`embed_images`: (N, n, d)."""
    config = getattr(model, "config", None)
    if config is None or config.input != "patches":
        raise ValueError("digits_hidden_states needs a sigprop Transformer with input='patches'")
    images = digits_images(indices, count, config.image_size, config.channels, mode, generator,
                           normalise=normalise)
    return embed_images(model, images)
