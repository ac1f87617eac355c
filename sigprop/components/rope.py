"""Rotary position embedding (RoPE; Su et al. 2021, as Llama / Qwen / Mistral apply it) and what it does to the
attention scores at initialisation.

Module. Each query and key vector of a head (width e = d_head, even) is rotated by its position t: the pairs of
coordinates (m, m + e/2), m = 0 … e/2 − 1, turn by the angle t·θ_m with θ_m = base^{−2m/e} (base = ``theta``,
10000 in Llama): q'_t = R_t q_t, k'_t = R_t k_t ("rotate_half" convention of the Hugging Face Llama code, so a
checkpoint's weights mean the same here). The score of query i on key k is then q_iᵀ R_{k−i} k_k/√e: it depends on
the positions only through the gap.

Scores at initialisation. With q = W_Qᵀx_i, k = W_Kᵀx_k and W_Q, W_K Gaussian i.i.d. (σ²_q, σ²_k), a fixed rotation
leaves each score's law unchanged (W_Q R is Gaussian i.i.d. like W_Q), but not the joint law across keys:

    Cov(s_ik, s_jl) = σ²_qσ²_k (x_i·x_j)(x_k·x_l) ψ((k − i) − (l − j)),    ψ(Δ) = (1/(e/2)) Σ_m cos(θ_m Δ)

(:func:`rope_score_correlation`; ψ = 1 without rotation). For one query over two keys of per-element Gram entries
G_kk = G_ll = σ², G_kl = rσ², Var(s_ik − s_il)/2 = σ²_qσ²_k d² σ⁴ (1 − r ψ(k − l)) (:func:`rope_score_variance`):
without rotation the shared part rσ² of the keys adds the same a_i·c to every score and cancels in the softmax; with
it, that part contributes r(1 − ψ(Δ)) and the query tells near keys from far ones even when the tokens are alike.
Attention's moment rules with RoPE are the sampled ones (:mod:`~sigprop.components.attention_sampled`,
:mod:`~sigprop.components.attention_gram`), which rotate every sampled head exactly; the closed form
(:mod:`~sigprop.components.attention`) assumes exchangeable keys and is not offered.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ..core.moments import Stat
from ..core.validate import check_range

__all__ = ["ROPE_THETA", "rope_frequencies", "apply_rope", "rope_score_correlation", "rope_score_variance"]

#: Llama's rotary base.
ROPE_THETA = 10000.0


def _checked(d_head: Stat, theta: Stat) -> tuple[int, float]:
    e = int(check_range(d_head, "d_head", lo=2.0, allowed="even integers >= 2"))
    if e % 2:
        raise ValueError(f"rotary embedding needs an even head width (got d_head={e})")
    return e, float(check_range(theta, "rope theta", lo=1.0, lo_open=True, allowed="(1, inf)"))


def rope_frequencies(d_head: int, theta: float = ROPE_THETA) -> np.ndarray:
    """θ_m = theta^(−2m/d_head), m = 0 … d_head/2 − 1 (float64)."""
    e, theta = _checked(d_head, theta)
    return theta ** (-np.arange(0, e, 2, dtype=np.float64) / e)


def apply_rope(t: torch.Tensor, theta: float = ROPE_THETA, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Rotate ``t`` (…, L, d_head) by positions 0 … L − 1 (or ``positions``, shape (L,)): t·cos + rotate_half(t)·sin
    with rotate_half([a, b]) = [−b, a] over the two halves of the last axis (module docstring)."""
    e = t.shape[-1]
    if positions is None:
        cos, sin = _rope_table(t.shape[-2], e, float(theta), t.dtype, t.device)
    else:
        cos, sin = _rope_angles(positions.to(t.dtype), e, theta)
    a, b = t[..., : e // 2], t[..., e // 2:]
    return t * cos + torch.cat((-b, a), dim=-1) * sin


def _rope_angles(pos: torch.Tensor, e: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of every position's angles, each (L, e): the two halves of a head turn by the same angles."""
    freqs = torch.as_tensor(rope_frequencies(e, theta), dtype=pos.dtype, device=pos.device)
    angle = pos[:, None] * freqs[None, :]
    return torch.cos(angle).repeat(1, 2), torch.sin(angle).repeat(1, 2)


@lru_cache(maxsize=8)
def _rope_table(n: int, e: int, theta: float, dtype: torch.dtype,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_rope_angles` of positions 0 … n − 1, kept for the next call of the same sizes (a sweep rotates every
    layer's sampled keys at the same positions)."""
    return _rope_angles(torch.arange(n, dtype=dtype, device=device), e, theta)


def rope_score_correlation(gap: Stat, d_head: int, theta: float = ROPE_THETA) -> Stat:
    """ψ(Δ) = mean over the e/2 frequencies of cos(θ_m Δ): the factor RoPE puts on the weight covariance of two scores
    whose query–key gaps differ by Δ = ``gap`` (module docstring). ψ(0) = 1; exact for Gaussian W_Q, W_K."""
    freqs = rope_frequencies(d_head, theta)
    return np.cos(np.multiply.outer(np.asarray(gap, dtype=np.float64), freqs)).mean(axis=-1)


def rope_score_variance(var: Stat, corr: Stat, d_in: Stat, sigma_q2: Stat, sigma_k2: Stat, gap: Stat, d_head: int,
                        theta: float = ROPE_THETA) -> Stat:
    """Var(s_ik − s_il)/2 for one query i and two other keys k, l ``gap`` = k − l positions apart, over Gaussian
    input (per-element variance ``var`` = σ², token correlation ``corr`` = r, zero mean, width d = ``d_in``) and
    Gaussian W_Q, W_K: σ²_qσ²_k d σ⁴ [d(1 − rψ) + 2r²(1 − ψ)], ψ = :func:`rope_score_correlation` (exact: the
    weights give σ²_qk |x_i|²(|x_k|² + |x_l|² − 2ψ x_k·x_l)/2, and E|x_i|²|x_k|² = d²σ⁴ + 2dr²σ⁴, E|x_i|² x_k·x_l
    = d²rσ⁴ + 2dr²σ⁴). To leading order σ²_qk d²σ⁴(1 − rψ); without rotation (ψ = 1) the closed form's
    s² = (1 − r)σ⁴d²σ²_qk."""
    psi = rope_score_correlation(gap, d_head, theta)
    d = np.asarray(d_in, dtype=np.float64)
    r = np.asarray(corr, dtype=np.float64)
    scale = np.asarray(sigma_q2) * sigma_k2 * d * np.asarray(var) ** 2
    return scale * (d * (1.0 - r * psi) + 2.0 * r * r * (1.0 - psi))
