"""Theorem 4.2 of Noci et al.: the covariance SDE of residual shaped attention.

Network (Eq. 1, 9): X_{l+1} = lambda X_l + gamma A_l X_l W^V / sqrt n, with the shaped attention
A = I + Softmax(Y / tau) - 11^T / m, Y = X W^Q W^{K,T} X^T / n, tau = tau0 sqrt(n n_k), lambda^2 + gamma^2 = 1.

Notation (Eq. 10): P = I - 11^T/m centres the tokens, C = P V P, i.e. C^{dw} = V^{dw} - V^{d xbar} - V^{w xbar}
+ V^{xbar xbar}; Vbar = tr(V)/m. Then

    S1^{ad,bw} = V^{ab} C^{dw},        S2^{ad} = V^{aa} (C^{dd} + V^{xbar xbar} - Vbar)
               = V^{aa} (V^{dd} - 2 V^{d xbar} + 2 V^{xbar xbar} - Vbar),

    b(V)^{ab} = gamma^2 / tau0^2 [ (1/m^2) sum_{nu,kappa} V^{nu kappa} S1^{a nu, b kappa}
                                  + (1/(2m)) sum_nu (V^{b nu} S2^{a nu} + V^{a nu} S2^{b nu}) ]
              = gamma^2 / tau0^2 [ V^{ab} <V, C>/m^2 + ((S2 V) + (S2 V)^T)^{ab} / (2m) ],

    Sigma(V) = gamma^2 (2 - gamma^2) Sigma_lin(V) + gamma^4 / tau0^2 A(V),
    A^{ab,dw} = (1/m^2) sum_{nu,kappa} (V^{a kappa} V^{d nu} S1^{b kappa, w nu}
                                       + V^{a kappa} V^{w nu} S1^{b kappa, d nu}
                                       + V^{b nu} V^{d kappa} S1^{a nu, w kappa}
                                       + V^{b nu} V^{w kappa} S1^{a nu, d kappa})
              = V^{bw} K^{ad} + V^{bd} K^{aw} + V^{aw} K^{bd} + V^{ad} K^{bw},   K = V C V / m^2,

the closed forms on the right following by inserting S1 = V^{..} C^{..} (we checked them term by term against the
sums; the unit tests compare the sums and the closed forms). Readings where the paper is inconsistent:

* Eq. 8 prints the second-order Softmax term with "- (ybar^2 - mean(y^2))"; the correct Taylor expansion (and the
  paper's own S2 in Eq. 10 / Lemma C.2) has "- (mean(y^2) - ybar^2)". We implement Eq. 10 as printed.
* The drift is the attention part only (the gamma^2 V of lambda^2 V + gamma^2 E[A V A^T] cancels lambda^2 V - V).
"""

from __future__ import annotations

import torch

from ..core.validate import check_range
from .residual_mlp import check_gamma
from .triu import as_cov_batch, pair_products, sigma_lin, to_triu

__all__ = ["s1_tensor", "s2_matrix", "shaped_attention_drift", "shaped_attention_diffusion", "attention_a_term",
           "check_tau0"]


def check_tau0(tau0) -> float:
    """Temperature constant tau0 > 0 of tau = tau0 sqrt(n n_k) (Noci et al. Eq. 9)."""
    return float(check_range(tau0, "tau0", lo=0.0, lo_open=True, allowed="(0, inf)"))


def _centred(v: torch.Tensor) -> torch.Tensor:
    m = v.shape[-1]
    p = torch.eye(m, dtype=v.dtype) - 1.0 / m
    return p @ v @ p


def s1_tensor(v) -> torch.Tensor:
    """S1^{ad,bw} = V^{ab}(V^{dw} - V^{d xbar} - V^{w xbar} + V^{xbar xbar}) (Eq. 10, Lemma C.2) as (S, m, m, m, m)
    indexed [s, a, d, b, w]. The first moment n_k^{-1} E[(Y^{ad} - ybar^a)(Y^{bw} - ybar^b)] of the Softmax logits."""
    v = as_cov_batch(v)
    c = _centred(v)
    return v[:, :, None, :, None] * c[:, None, :, None, :]


def s2_matrix(v) -> torch.Tensor:
    """S2^{ad} = V^{aa}(V^{dd} - 2 V^{d xbar} + 2 V^{xbar xbar} - Vbar) (Eq. 10, Lemma C.2), shape (S, m, m)."""
    v = as_cov_batch(v)
    row_mean = v.mean(dim=-1)                       # V^{d xbar}
    grand = v.mean(dim=(-1, -2))                    # V^{xbar xbar}
    vbar = torch.diagonal(v, dim1=-2, dim2=-1).mean(dim=-1)
    diag = torch.diagonal(v, dim1=-2, dim2=-1)
    inner = diag - 2.0 * row_mean + (2.0 * grand - vbar)[:, None]
    return diag[:, :, None] * inner[:, None, :]


def shaped_attention_drift(v, gamma, tau0) -> torch.Tensor:
    """Drift b(V) of Noci et al. Thm. 4.2 (formula in the module docstring), (S, m, m) -> (S, p).

    Cubic in V (Sec. 4.4). Zero for gamma = 0. Assumes lambda^2 + gamma^2 = 1, tau = tau0 sqrt(n n_k).
    """
    gamma, tau0 = check_gamma(gamma), check_tau0(tau0)
    v = as_cov_batch(v)
    m = v.shape[-1]
    c = _centred(v)
    term1 = v * ((v * c).sum(dim=(-1, -2)) / m**2)[:, None, None]
    s2v = s2_matrix(v) @ v
    term2 = (s2v + s2v.transpose(-1, -2)) / (2.0 * m)
    return gamma**2 / tau0**2 * to_triu(term1 + term2)


def attention_a_term(v) -> torch.Tensor:
    """The extra diffusion term A^{ab,dw} of Thm. 4.2 (module docstring), (S, m, m) -> (S, p, p).

    Closed form: pair_products(V, K) + pair_products(K, V) with K = V P V P V / m^2 (P the centring projector).
    """
    v = as_cov_batch(v)
    m = v.shape[-1]
    k = v @ _centred(v) @ v / m**2
    # pair_products(P, Q)[ab, dw] = P^{ad} Q^{bw} + P^{aw} Q^{bd}
    return pair_products(k, v) + pair_products(v, k)


def shaped_attention_diffusion(v, gamma, tau0) -> torch.Tensor:
    """Sigma(V) = gamma^2 (2 - gamma^2) Sigma_lin(V) + gamma^4 / tau0^2 A(V) (Noci et al. Thm. 4.2), (S, p, p)."""
    gamma, tau0 = check_gamma(gamma), check_tau0(tau0)
    v = as_cov_batch(v)
    return gamma**2 * (2.0 - gamma**2) * sigma_lin(v) + gamma**4 / tau0**2 * attention_a_term(v)
