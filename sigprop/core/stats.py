"""Measured statistics of a tensor, computed from running sums (no stored activations).

For a tensor x of shape (..., batch, tokens, hidden) the statistics of :mod:`sigprop.core.moments` are

* mean  = average of all elements,
* var   = average of (x − mean)²,
* corr  = average over batch, hidden unit j and token pairs t ≠ s of (x_tj − mean)(x_sj − mean), divided by var,
* corr_hidden = the same over hidden pairs i ≠ j of one token, divided by var.

They are built from sums that add across batches, so a measurement can accumulate them on the fly:
Σ_{t≠s} x_t x_s = (Σ_t x_t)² − Σ_t x_t².
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["MomentSums", "moment_sums"]


@dataclass
class MomentSums:
    """Additive sums of a (centred) tensor; leading dimensions index independent groups (configs, replicates).

    ``center`` is the value subtracted before summing (per group), kept so that the mean can be restored.
    """

    center: torch.Tensor
    n: float | torch.Tensor
    s1: torch.Tensor
    s2: torch.Tensor
    token_pairs: torch.Tensor
    n_token_pairs: float | torch.Tensor
    hidden_pairs: torch.Tensor
    n_hidden_pairs: float | torch.Tensor

    def __add__(self, other: MomentSums) -> MomentSums:
        if not torch.equal(self.center, other.center):
            raise ValueError("cannot add MomentSums with different centres")
        return MomentSums(self.center, self.n + other.n, self.s1 + other.s1, self.s2 + other.s2,
                          self.token_pairs + other.token_pairs, self.n_token_pairs + other.n_token_pairs,
                          self.hidden_pairs + other.hidden_pairs, self.n_hidden_pairs + other.n_hidden_pairs)

    def sum_over(self, dim: int) -> MomentSums:
        """Pool the groups along leading dimension ``dim`` (their centres must agree along it, to rounding:
        ``ValueError`` otherwise, since sums about different centres do not add)."""
        k = self.s1.shape[dim]
        if self.center.dim() > dim:
            first = self.center.select(dim, 0).unsqueeze(dim).expand_as(self.center)
            if not torch.allclose(self.center, first, rtol=1e-12, atol=0.0):
                raise ValueError(f"cannot pool MomentSums whose centres differ along dimension {dim}")
        return MomentSums(self.center.select(dim, 0), self.n * k, self.s1.sum(dim), self.s2.sum(dim),
                          self.token_pairs.sum(dim), self.n_token_pairs * k, self.hidden_pairs.sum(dim),
                          self.n_hidden_pairs * k)

    def mean(self) -> torch.Tensor:
        return self.center + self.s1 / self.n

    def var(self) -> torch.Tensor:
        m = self.s1 / self.n
        return self.s2 / self.n - m * m

    def corr(self) -> torch.Tensor:
        """Token-to-token correlation (NaN when a sequence has a single token)."""
        m = self.s1 / self.n
        return (self.token_pairs / self.n_token_pairs - m * m) / self.var()

    def corr_hidden(self) -> torch.Tensor:
        m = self.s1 / self.n
        return (self.hidden_pairs / self.n_hidden_pairs - m * m) / self.var()


def moment_sums(x: torch.Tensor, lead: int = 0, center: torch.Tensor | None = None,
                hidden_pairs: bool = False) -> MomentSums:
    """Sums over the last three dimensions (batch, tokens, hidden) of ``x``, keeping ``lead`` leading dimensions.

    ``center`` (shape = the leading dimensions) is subtracted first; by default the group mean, which keeps the
    float64 accumulation free of cancellation when the mean is large. Hidden-pair sums cost a second pass and are
    only computed when ``hidden_pairs`` is true.
    """
    if x.dim() != lead + 3:
        raise ValueError(f"expected {lead} leading dims + (batch, tokens, hidden), got shape {tuple(x.shape)}")
    b, t, d = x.shape[-3:]
    red = (-3, -2, -1)
    if center is None:
        center = x.mean(dim=red).double()
    center = center.to(torch.float64)
    xc = x - center.reshape(center.shape + (1, 1, 1)).to(x.dtype)
    # Sums stay in the tensor's dtype (torch reduces pairwise: a relative error of the order of float32's
    # ε·log n) and are promoted afterwards; promoting the whole tensor first costs more than the reduction itself.
    s1 = xc.sum(dim=red).double()
    s2 = (xc * xc).sum(dim=red).double()
    if t == 2:  # Σ_{t≠s} x_t x_s = 2 Σ x_0 x_1: one product instead of a column sum and its square
        token_pairs = 2.0 * (xc[..., 0, :] * xc[..., 1, :]).sum(dim=(-2, -1)).double()
    else:
        col = xc.sum(dim=-2)  # (..., batch, hidden): Σ_t x_t
        token_pairs = (col * col).sum(dim=(-2, -1)).double() - s2
    if hidden_pairs:
        row = xc.sum(dim=-1)
        hp = (row * row).sum(dim=(-2, -1)).double() - s2
        nhp = float(b * t * d * (d - 1))
    else:
        hp = torch.zeros_like(s1)
        nhp = float("nan")
    return MomentSums(center, float(b * t * d), s1, s2, token_pairs, float(b * d * t * (t - 1)), hp, nhp)
