"""What an attention head does to its queries and keys before their dot product: RMS-normalise each head's vector
(QK-norm, as Qwen3, OLMo-2 and Gemma 3 do) and rotate all or the first part of its coordinates by the token's
position (rotary embedding, :mod:`~sigprop.components.rope`; GPT-NeoX rotates the first ``rotary_pct`` of them).

    q ↦ R_t(γ_q ⊙ q/rms(q)),   rms(q) = (mean_m q_m² + ε)^{1/2}   (Qwen3's ``q_norm``, then ``apply_rotary_pos_emb``)

R_t rotates the pairs (m, m + r/2) of the first r = ⌊fraction·e⌋ coordinates by t·θ_m, θ_m = base^{−2m/r}, and
leaves the others as they are (the ``rotate_half`` layout of the Hugging Face GPT-NeoX code on the leading r
coordinates). The gains γ are parameters of the attention module (1 at initialisation); the map below is the function
at γ = 1, which is what the moment rules sample.

At initialisation QK-norm fixes every query's and key's length at √e, so the score variance no longer depends on
σ_q, σ_k or the input's scale: s_ik = q̂_i·k̂_k/√e has variance ≈ 1 − (correlation of the two directions)², far
from the small scores the closed forms of :mod:`~sigprop.components.attention` assume. The rules of such a head are
the sampled ones (:mod:`~sigprop.components.attention_sampled`, :mod:`~sigprop.components.attention_gram`), which
apply this very map to every sampled head's queries and keys and differentiate through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.validate import check_range
from .rope import apply_rope

__all__ = ["QueryKeyMap", "query_key_map", "rotary_dims"]


def rotary_dims(d_head: int, fraction: float) -> int:
    """The number of leading coordinates of a head of width ``d_head`` that rotary embedding rotates: ⌊fraction·e⌋
    (Hugging Face GPT-NeoX's ``int(head_size * rotary_pct)``); ``ValueError`` unless it is even and ≥ 2."""
    r = int(d_head * fraction)
    if r < 2 or r % 2:
        raise ValueError(f"rotary embedding on {fraction:g} of a head of width {d_head} rotates {r} coordinates: it "
                         "needs an even number >= 2")
    return r


@dataclass(frozen=True)
class QueryKeyMap:
    """The map applied to every query and key head (module docstring).

    Args:
        theta: the rotary base (10000 in Llama), or None for no rotation.
        rotary_fraction: the fraction of each head's coordinates rotated (GPT-NeoX's ``rotary_pct``; 1: all).
        norm_eps: ε of the RMS normalisation of each head's vector (QK-norm), or None for none.

    Example:
        >>> qk = QueryKeyMap(theta=10000.0, norm_eps=1e-6)
        >>> q = qk(torch.randn(2, 5, 8, dtype=torch.float64))  # (…, L, d_head): normalised, then rotated
        >>> round(float(q.pow(2).mean(-1)[0, 0]), 6)
        1.0
    """

    theta: float | None = None
    rotary_fraction: float = 1.0
    norm_eps: float | None = None

    def __post_init__(self) -> None:
        if self.theta is not None:
            check_range(self.theta, "rope theta", lo=1.0, lo_open=True, allowed="(1, inf)")
        check_range(self.rotary_fraction, "rotary_fraction", lo=0.0, hi=1.0, lo_open=True, allowed="(0, 1]")
        if self.norm_eps is not None:
            check_range(self.norm_eps, "QK-norm eps", lo=0.0, allowed="[0, inf)")

    @property
    def trivial(self) -> bool:
        """True when the map is the identity (no rotation, no normalisation)."""
        return self.theta is None and self.norm_eps is None

    def check_head(self, d_head: int) -> None:
        """``ValueError`` if a head of width ``d_head`` cannot be rotated as configured."""
        if self.theta is not None:
            rotary_dims(d_head, self.rotary_fraction)

    def normalise(self, t: torch.Tensor) -> torch.Tensor:
        """t/rms(t) over the last axis (QK-norm without its gain), or ``t`` without QK-norm."""
        if self.norm_eps is None:
            return t
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + self.norm_eps)

    def rotate(self, t: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``t`` (…, L, d_head) rotated by positions 0 … L − 1 (or ``positions``, shape (L,)) on its first r
        coordinates (module docstring)."""
        if self.theta is None:
            return t
        r = rotary_dims(t.shape[-1], self.rotary_fraction)
        if r == t.shape[-1]:
            return apply_rope(t, self.theta, positions)
        return torch.cat((apply_rope(t[..., :r], self.theta, positions), t[..., r:]), dim=-1)

    def __call__(self, t: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.rotate(self.normalise(t), positions)


def query_key_map(rope: float | QueryKeyMap | None) -> QueryKeyMap | None:
    """The map an attention rule's ``rope`` argument stands for: a float is the rotary base of a full rotation, a
    :class:`QueryKeyMap` itself, None (or the identity map) none.

    Example:
        >>> query_key_map(10000.0)
        QueryKeyMap(theta=10000.0, rotary_fraction=1.0, norm_eps=None)
    """
    if rope is None:
        return None
    if isinstance(rope, QueryKeyMap):
        return None if rope.trivial else rope
    if isinstance(rope, bool) or not isinstance(rope, int | float) or not math.isfinite(float(rope)):
        raise ValueError(f"rope must be a rotary base (a number > 1), a QueryKeyMap or None (got {rope!r})")
    return QueryKeyMap(theta=float(rope))
