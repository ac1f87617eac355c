"""Corollary 4.3 (Eq. 12) of Noci et al.: the shaped Transformer covariance SDE, and coefficient bundles.

A shaped Transformer block (Eq. 11) is a shaped-attention residual layer followed by a shaped-ReLU residual layer,
both with the same lambda, gamma. Its covariance SDE adds the drifts and the diffusion covariances of the two layers
(the two Brownian motions are independent, Eq. 31-32):

    dV = [b(V) + b_res(V)] dt + [Sigma(V) + Sigma_res(V)]^{1/2} dB                    (Eq. 12)

with b, Sigma of Thm. 4.2 (:mod:`.shaped_attention`) and b_res, Sigma_res of Thm. 3.2 (:mod:`.residual_mlp`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .residual_mlp import check_gamma, resnet_relu_diffusion, resnet_relu_drift
from .shaped_attention import check_tau0, shaped_attention_diffusion, shaped_attention_drift

__all__ = ["shaped_transformer_drift", "shaped_transformer_diffusion", "SDECoefficients", "covariance_sde",
           "SDE_KINDS"]

#: Architectures offered by :func:`covariance_sde`.
SDE_KINDS = ("resnet_relu", "shaped_attention", "shaped_transformer")


def shaped_transformer_drift(v, gamma, tau0, c_plus: float, c_minus: float) -> torch.Tensor:
    """b(V) + b_res(V) of Noci et al. Cor. 4.3, Eq. 12, (S, m, m) -> (S, p)."""
    return shaped_attention_drift(v, gamma, tau0) + resnet_relu_drift(v, gamma, c_plus, c_minus)


def shaped_transformer_diffusion(v, gamma, tau0) -> torch.Tensor:
    """Sigma(V) + Sigma_res(V) of Noci et al. Cor. 4.3, Eq. 12, (S, m, m) -> (S, p, p).

    = gamma^2 (4 - gamma^2) Sigma_lin(V) + gamma^4/tau0^2 A(V) (the ReLU layer adds 2 gamma^2 Sigma_lin).
    """
    return shaped_attention_diffusion(v, gamma, tau0) + resnet_relu_diffusion(v, gamma)


@dataclass(frozen=True)
class SDECoefficients:
    """A drift (S, m, m) -> (S, p) and a diffusion covariance (S, m, m) -> (S, p, p), with a name for reports."""

    drift: Callable[[torch.Tensor], torch.Tensor]
    diffusion: Callable[[torch.Tensor], torch.Tensor]
    name: str = ""


def covariance_sde(kind: str, gamma, tau0=1.0, c_plus: float = 0.0, c_minus: float = 0.0) -> SDECoefficients:
    """Coefficients of one of the paper's covariance SDEs, ready for :func:`sigprop.sde.integrate.euler_maruyama`.

    kind: "resnet_relu" (Thm. 3.2; uses gamma, c_plus, c_minus), "shaped_attention" (Thm. 4.2; gamma, tau0),
    "shaped_transformer" (Cor. 4.3; all). Raises ``ValueError`` for another kind or parameters out of range.
    """
    gamma = check_gamma(gamma)
    tau0 = check_tau0(tau0)
    if kind == "resnet_relu":
        return SDECoefficients(lambda v: resnet_relu_drift(v, gamma, c_plus, c_minus),
                               lambda v: resnet_relu_diffusion(v, gamma), kind)
    if kind == "shaped_attention":
        return SDECoefficients(lambda v: shaped_attention_drift(v, gamma, tau0),
                               lambda v: shaped_attention_diffusion(v, gamma, tau0), kind)
    if kind == "shaped_transformer":
        return SDECoefficients(lambda v: shaped_transformer_drift(v, gamma, tau0, c_plus, c_minus),
                               lambda v: shaped_transformer_diffusion(v, gamma, tau0), kind)
    raise ValueError(f"covariance SDE kind must be one of {SDE_KINDS} (got {kind!r})")
