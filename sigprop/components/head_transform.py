"""The masked-LM head's transform of BERT and RoBERTa (Devlin et al. 2019; Hugging Face's
``BertPredictionHeadTransform``, RoBERTa's ``lm_head.dense`` / ``layer_norm``): between the last layer and the tied
decoder each token's vector goes through

    t = LayerNorm(φ(W_t h + b_t)),    W_t ∈ R^{d×d} i.i.d. N(0, σ²_t), b_t = 0 at initialisation,

φ the model's activation (GELU in both). The decoder then reads t, not h: the head's logits have variance
s²σ²_head·d (t has unit variance per element after the LayerNorm), and the loss gradient reaches h through the
LayerNorm's, φ's and W_t's backward rules.

Moment rules: the composition of its children's (a :class:`~sigprop.components.sequential.Sequential`: the
linear map's, the activation's and the LayerNorm's), walked in the exchangeable state, where the activation's output
keeps its mean μ = E φ(u) apart from its variance: the LayerNorm removes that mean (it is the same in every unit),
which a token Gram matrix, holding E[t_j·t_l] with μ² folded in, could not tell from a shared component. The
token-resolved boundary therefore applies the whole transform to every token pair at once
(:func:`sigprop.theory.boundaries.head_gradient_gram`).

Finite width (backward). The LayerNorm's rule is exact for a Gaussian input, whose squared norm fluctuates like χ²;
its input here is φ(u), u_i i.i.d. N(0, s²) given the token, whose units have kurtosis κ = E(z − μ)⁴/σ⁴ ≠ 3, and
whose local slopes a_i = φ'(u_i)² are correlated with their own share w_i = (z_i − μ)²/σ² of the norm. Expanding
1/σ̂² = (1/σ²)(1 − δ + δ²), δ = σ̂²/σ² − 1 (E δ = −1/d, E δ² = (κ − 1)/d), and the LayerNorm's projection
E[g_i² | z] ∝ (1 − 1/d − ŷ_i²/d)/σ̂², the gradient reaching u has per-element variance

    (σ²_g/σ²) [E a (1 + (κ − 2)/d) − (2/d) Cov(a, w)] + O(1/d²),

against the composition's (σ²_g/σ²) E a (d − 2)/(d − 3): the rule multiplies the composition's variance by
1 + ((κ − 3) E a − 2 Cov(a, w))/(d E a) (:func:`finite_width_factor`; at d = 64 for GELU it closes the gap between
the composition and autograd to within the noise, tested: docs/how-to/your-model.md, "Theory for the families people
train"). The map W_t
then needs nothing more: its component along the token's input direction (W_t n̂ = u/|n|) carries uᵀg_u, which the
norm before the transform (a Post-LN layer's, or the final one) removes exactly, so the variance is stated as if the
gradient were isotropic (exact after that norm, off by (T/E a − 1)/d at the transform's input itself, T =
Var(φ'(u)ξ) − (E[(z − μ)φ'(u)ξ])²/σ², ξ = u/s). The token covariances get the same factor, which is not their
own: the LayerNorm's non-Gaussian input, GELU's input-dependent slope and the W_t path each move the covariance by
O(1/d) differently, so the gradient's token correlation after the transform comes out high by O(1/d) (about 0.7/d
relative at r = r_g = 0.5).

Assumes: W_t independent of the decoder and of the hidden states (initialisation), b_t = 0, the LayerNorm at
weight 1 and bias 0, input rows of a fixed length (a norm's output: BERT's last layer is a Post-LN norm's; an input
whose length fluctuates like a Gaussian's raises the gradient further, by ~2/d for a nearly linear φ).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, cast

import numpy as np
from torch import nn

from ..core.gaussian import expect_1d, norm_cdf, norm_pdf
from ..core.moments import GradMoments, Moments, Stat
from .factory import make_activation, make_norm
from .linear import Linear
from .sequential import Sequential

__all__ = ["HeadTransform", "finite_width_factor"]


def _relu_terms() -> tuple[float, float, float]:
    """(κ, E a, Cov(a, w)) of z = max(0, u), u ~ N(0, s²): scale-free (module docstring)."""
    mu = 1.0 / math.sqrt(2.0 * math.pi)  # E z, E z² = 1/2, E z³ = 2μ, E z⁴ = 3/2 (s = 1)
    var = 0.5 - mu * mu
    m4 = 1.5 - 4.0 * mu * (2.0 * mu) + 6.0 * mu * mu * 0.5 - 3.0 * mu**4
    a_w = (0.5 - 1.5 * mu * mu) / var  # E[1{u > 0}(z − μ)²]/σ²
    return m4 / var**2, 0.5, a_w - 0.5


def _gelu_terms(s2: Stat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(κ, E a, Cov(a, w)) of z = GELU(u) = uΦ(u), u ~ N(0, s²), by Gauss–Hermite quadrature (96 points: GELU is
    analytic)."""
    gelu = lambda u: u * norm_cdf(u)  # noqa: E731
    slope2 = lambda u: (norm_cdf(u) + u * norm_pdf(u)) ** 2  # noqa: E731
    mu = expect_1d(gelu, 0.0, s2)
    var = expect_1d(lambda u: (gelu(u) - mu[..., None]) ** 2, 0.0, s2)
    m4 = expect_1d(lambda u: (gelu(u) - mu[..., None]) ** 4, 0.0, s2)
    ea = expect_1d(slope2, 0.0, s2)
    a_w = expect_1d(lambda u: slope2(u) * (gelu(u) - mu[..., None]) ** 2, 0.0, s2) / var
    return m4 / var**2, ea, a_w - ea


def finite_width_factor(activation: str, s2: Stat, d: int) -> Stat:
    """1 + ((κ − 3) E a − 2 Cov(a, w))/(d E a): the O(1/d) factor on the head transform's backward variance over
    the composition of its children's rules (module docstring), for pre-activations of variance ``s2``.

    Args:
        activation: ``"gelu"`` or ``"relu"``.
        s2: the variance of u = W_t h per element (broadcasts).
        d: the width.

    Returns:
        The factor, shaped like ``s2``.

    Example:
        >>> round(float(finite_width_factor("gelu", 1.0, 64)), 4)
        1.018
    """
    s2 = np.asarray(s2, dtype=np.float64)
    kurt, ea, cov = _relu_terms() if activation == "relu" else _gelu_terms(s2)
    return 1.0 + ((kurt - 3.0) * ea - 2.0 * cov) / (d * ea) + 0.0 * s2


class HeadTransform(Sequential):
    """dense (d → d, zero bias) → activation → LayerNorm (module docstring).

    Args:
        d: the model width.
        activation: ``"gelu"`` (BERT, RoBERTa) or ``"relu"``.
        eps: the LayerNorm's ε (BERT: ``layer_norm_eps`` = 1e-12).
        weight_std: the dense map's standard deviation (None: Xavier, 1/√d); an init plan sets its ``transform``.

    Example:
        >>> import torch
        >>> from sigprop.core.moments import Moments
        >>> t = HeadTransform(8, weight_std=0.02)
        >>> t(torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
        >>> round(float(t.forward_moments(Moments(0.0, 1.0, 0.1)).var), 3)  # a LayerNorm's output
        1.0
    """

    dense: Linear
    norm: nn.Module

    def __init__(self, d: int, activation: str = "gelu", eps: float = 1e-12, weight_std: float | None = None) -> None:
        if activation not in ("gelu", "relu"):
            raise ValueError(f"the head transform's activation must be gelu or relu (got {activation!r})")
        super().__init__(OrderedDict(dense=Linear(d, d, bias=True, weight_std=weight_std),
                                     act=make_activation(activation), norm=cast(nn.Module, make_norm("layernorm", d,
                                     eps=eps))))
        self.activation = activation

    def backward_moments(self, g: GradMoments, m_in: Moments, **context: Any) -> GradMoments:
        """The composition's backward rule times :func:`finite_width_factor` at the dense map's output variance."""
        out = super().backward_moments(g, m_in, **context)
        s2 = self.dense.forward_moments(m_in).var
        return GradMoments(var=out.var * finite_width_factor(self.activation, s2, self.dense.out_features),
                           corr=out.corr)
