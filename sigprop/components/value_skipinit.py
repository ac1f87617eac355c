"""Value-SkipInit attention (He et al. 2023, "Deep Transformers without Shortcuts", Sec. 4): each head's attention
matrix A is replaced by α·I + β·A, with α and β learnable scalars per head initialised at α = 1, β = 0, so that at
initialisation the attention passes every token's value through unmixed (Kedia et al. Table 11 list it among the
prior methods for deep Transformers).

    head_h(X) = (α_h I + β_h A_h(X)) X W_V,h,    A_h = softmax(X W_Q,h (X W_K,h)ᵀ / √d_head)  (causal if asked)

Moment rules. At β = 0 (every head: initialisation) the module is the token-wise linear map X ↦ α_h X W_V,h, so
(Kedia et al. App. A.2, :func:`~sigprop.components.linear.linear_forward`) per element of the concatenated heads
μ = 0, σ² = ᾱ² d_in σ²_v (σ²_x + μ²_x), r = (r_x σ²_x + μ²_x)/(σ²_x + μ²_x), with ᾱ² the mean of α_h² over the heads;
backward σ²_gx = ᾱ² (H·d_head) σ²_v σ²_g, r_gx = r_g (exact: independent heads add). Away from β = 0 (a trained
model) the output mixes tokens and no rule is given: the rules raise ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..walk.protocol import Rules
from .attention import MultiHeadAttention
from .linear import linear_backward, linear_forward

__all__ = ["ValueSkipInitAttention"]


class ValueSkipInitAttention(MultiHeadAttention):
    """:class:`~sigprop.components.attention.MultiHeadAttention` with each head's attention matrix A replaced by
    α·I + β·A (module docstring); ``vs_alpha`` and ``vs_beta`` (one per head) are parameters, 1 and 0 at
    initialisation. Self-attention only. Its moment rules are those of a token-wise linear map and hold at β = 0."""

    rules = Rules(inputs=frozenset({"key_padding_mask"}))  # token-wise while β = 0 (the rules check it)

    def __init__(self, d_in: int, n_heads: int, d_head: int, sigma_q: float | torch.Tensor | np.ndarray | None = None,
                 sigma_k: float | torch.Tensor | np.ndarray | None = None,
                 sigma_v: float | torch.Tensor | np.ndarray | None = None,
                 dropout_p: float = 0.0, causal: bool = False, batch_shape: tuple[int, ...] = (),
                 approx: str = "auto") -> None:
        if batch_shape:
            raise ValueError("ValueSkipInitAttention takes one weight copy (batch_shape=())")
        super().__init__(d_in, n_heads, d_head, sigma_q, sigma_k, sigma_v, dropout_p, causal, (), approx)
        self.vs_alpha = nn.Parameter(torch.ones(self.n_heads))
        self.vs_beta = nn.Parameter(torch.zeros(self.n_heads))

    def forward(self, x: torch.Tensor, x_kv: torch.Tensor | Sequence[torch.Tensor] | None = None,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(…, L, d_in) → (…, L, H·d_head): α_h·V_h + β_h·A_h V_h per head (``key_padding_mask`` as the parent's)."""
        if x_kv is not None:
            raise NotImplementedError("Value-SkipInit is a self-attention: x_kv is not supported")
        mixed = super().forward(x, key_padding_mask=key_padding_mask)
        values = x @ self.w_v
        alpha = self.vs_alpha.repeat_interleave(self.d_head)
        beta = self.vs_beta.repeat_interleave(self.d_head)
        return alpha * values + beta * mixed

    def _mean_alpha2(self) -> float:
        if bool(torch.any(self.vs_beta.detach() != 0)):
            raise ValueError("Value-SkipInit attention has moment rules at β = 0 only (initialisation); this one has "
                             f"β = {self.vs_beta.detach().cpu().tolist()}")
        return float((self.vs_alpha.detach().double() ** 2).mean())

    def forward_moments(self, m: Moments, L: Stat | None = None,  # type: ignore[override]  # L unused
                        **_: Any) -> Moments:
        """At β = 0: the linear map's moments with weight variance ᾱ²σ²_v (module docstring)."""
        sv = float(self.sigma_v.detach().double())
        return linear_forward(m, self.d_in, self._mean_alpha2() * sv**2)

    def backward_moments(self, g: GradMoments, m_in: Moments | None = None,  # type: ignore[override]  # L unused
                         L: Stat | None = None, **_: Any) -> GradMoments:
        """At β = 0: σ²_gx = ᾱ² (H·d_head) σ²_v σ²_g, r_gx = r_g."""
        sv = float(self.sigma_v.detach().double())
        return linear_backward(g, self.n_heads * self.d_head, self._mean_alpha2() * sv**2)
