"""Token-resolved attention at zeroth order in the scores: the Gram rule of attention whose scores are small, in
closed form and at any sequence length (the token-resolved form of the small-score limit that Kedia et al.'s
attention analysis expands about, App. A.8; the sampled Gram rule it stands in for:
:mod:`~sigprop.components.attention_gram`).

Why. The sampled Gram rule draws each head's L × d_in input and its L × L scores, O(L² d_in) per head and sequence:
at 1024 tokens and 80 layers that is hours on a CPU, so a long causal decoder, whose positions the exchangeable state
cannot keep apart, could not be predicted token by token. Where a model's scores are small (a narrow model at the
usual initialisation: d_in² σ²_q σ²_k G_jj G_kk ≈ 0.01 at d = 256 with std-0.02 weights and a norm's unit-variance
output) the softmax is within O(s) of uniform over the keys a query sees, and attention is a fixed linear map of its
values.

Model. A = Dropout_p(U) with U_jk = 1/n_j over the n_j keys query j sees (a causal mask: k ≤ j; padded keys
excluded), the dropout mask D_jk ~ Bernoulli(1 − p) independent of everything, A_jk = D_jk U_jk/(1 − p); y = A X W_V.
Averaging W_V exactly (i.i.d. N(0, σ²_v)) and X over its Gram matrix G (per element, d_in elements):

    G_y = σ²_v d_in E[A G Aᵀ] = σ²_v d_in (U G Uᵀ + p/(1 − p) · diag_j(Σ_k U_jk² G_kk)),

since E[A_jk A_lm] = U_jk U_lm (1 + δ_jl δ_km p/(1 − p)). Backward, the input gradient through the values is
∂X = Aᵀ w with w = g W_Vᵀ of per-element covariance σ²_v d_k H (:mod:`~sigprop.components.attention_gram`,
"Backward"), so a head's input-gradient Gram is

    H_in = σ²_v d_k E[Aᵀ H A] = σ²_v d_k (Uᵀ H U + p/(1 − p) · diag_k(Σ_j U_jk² H_jj)),

and the n_heads heads add (each head's output coordinates carry their own output gradients, uncorrelated with the
other heads', also where grouped heads share W_V). The score paths (queries and keys through the softmax's Jacobian)
carry O(s²) of it and are left out, as is every O(s²) term of the forward rule: rotary positions, grouped key/value
heads and the rows' fixed length act only through the scores, so none of them enters.

Accuracy. Exact as s² → 0; the terms left out grow with s², which is why "auto" takes this rule only up to
:data:`UNIFORM_MAX_S2` (the largest score variance of any query–key pair, d_in² σ²_q σ²_k max_j G_jj², which bounds
the variance of every score, rotary or not) and never with QK-norm (whose scores have a fixed scale). The gap to the
sampled rule across s²: docs/results/scale.md ("Token by token at long sequences", ``bench/attention_uniform.py``).
Cost: two L × L matrix products per sequence, no draws.

Assumes: zero-mean input (every attention input in a transformer at initialisation); weights independent of the
input and of the output gradient.
"""

from __future__ import annotations

import torch

from .attention_gram import blocked_scores
from .query_key import QueryKeyMap, query_key_map

__all__ = ["UNIFORM_MAX_S2", "uniform_weights", "gram_score_variance", "uniform_applies", "uniform_gram_attention",
           "uniform_gram_attention_backward"]

#: Largest score variance (:func:`gram_score_variance`) at which "auto" takes the uniform rule in the token-resolved
#: state. The measured gap to the sampled Gram rule at and around it: docs/results/scale.md ("Token by token at long
#: sequences").
UNIFORM_MAX_S2 = 0.02


def uniform_weights(gram: torch.Tensor, causal: bool, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """U (B, L, L): each query's uniform weights over the keys it sees (a causal mask, and ``key_mask`` (B, L) bool,
    True at real tokens, for padding). A padded query that sees no key at all (leading padding under a causal mask)
    is left unblocked, uniform over every key, as the sampled rule leaves it
    (:func:`~sigprop.components.attention_gram.blocked_scores`): its row is finite and means nothing.

    Args:
        gram: any (B, L, L) tensor: only its shape is read.
        causal: whether query j sees keys k ≤ j only.
        key_mask: (B, L) bool, True at real tokens, or None (every token real).

    Returns:
        U, (B, L, L) float64, each row summing to 1.

    Example:
        >>> uniform_weights(torch.zeros(1, 3, 3), causal=True)[0]
        tensor([[1.0000, 0.0000, 0.0000],
                [0.5000, 0.5000, 0.0000],
                [0.3333, 0.3333, 0.3333]], dtype=torch.float64)
    """
    B, L, _ = gram.shape
    keep = torch.ones(B, L, dtype=torch.bool) if key_mask is None else torch.as_tensor(key_mask, dtype=torch.bool)
    if keep.shape != (B, L):
        raise ValueError(f"key_mask must have shape {(B, L)} (batch, tokens), got {tuple(keep.shape)}")
    u = (~blocked_scores(keep, causal)[:, 0]).expand(B, L, L).to(torch.float64)
    return u / u.sum(dim=-1, keepdim=True)


def gram_score_variance(gram: torch.Tensor, d_in: float, sigma_q2: float, sigma_k2: float) -> float:
    """The largest variance of a score over the weights, d_in² σ²_q σ²_k max_j G_jj² (a query's and a key's per-element
    variances G_jj, G_kk at most the largest diagonal entry), for the per-element input Gram ``gram`` (B, L, L).

    Args:
        gram: the input's per-element token Gram matrices, (B, L, L).
        d_in: the input width.
        sigma_q2: the query weights' variance.
        sigma_k2: the key weights' variance.

    Returns:
        d_in² σ²_q σ²_k max_j G_jj², a bound on every score's variance.

    Example:
        >>> gram_score_variance(torch.eye(4)[None], d_in=256, sigma_q2=4e-4, sigma_k2=4e-4)  # std-0.02 weights
        0.01048576
    """
    top = float(torch.diagonal(gram, dim1=-2, dim2=-1).max())
    return d_in * d_in * sigma_q2 * sigma_k2 * top * top


def uniform_applies(approx: str, gram: torch.Tensor, d_in: float, sigma_q2: float, sigma_k2: float,
                    rope: float | QueryKeyMap | None = None) -> bool:
    """Whether an attention module of approximation ``approx`` takes the uniform rule at input ``gram``: "auto" or
    "forward", no QK-norm, and :func:`gram_score_variance` at most :data:`UNIFORM_MAX_S2`.

    Args:
        approx: the module's approximation ("auto", "forward", "bounded", ...).
        gram: the input's per-element token Gram matrices, (B, L, L).
        d_in: the input width.
        sigma_q2: the query weights' variance.
        sigma_k2: the key weights' variance.
        rope: the module's query/key map (rotary base, a :class:`~sigprop.components.query_key.QueryKeyMap`) or
            None.

    Returns:
        True where the uniform rule is taken.

    Example:
        >>> uniform_applies("auto", torch.eye(4)[None], d_in=256, sigma_q2=4e-4, sigma_k2=4e-4)
        True
        >>> uniform_applies("auto", torch.eye(4)[None], d_in=1024, sigma_q2=4e-4, sigma_k2=4e-4)
        False
    """
    qk = query_key_map(rope)
    return (approx in ("auto", "forward") and (qk is None or qk.norm_eps is None)
            and gram_score_variance(gram, d_in, sigma_q2, sigma_k2) <= UNIFORM_MAX_S2)


def _dropout_diagonal(weights_sq: torch.Tensor, diag: torch.Tensor, p: float) -> torch.Tensor:
    """p/(1 − p) · diag(Σ U² · the other Gram's diagonal) as a (B, L, L) matrix."""
    return torch.diag_embed(p / (1.0 - p) * (weights_sq @ diag[..., None])[..., 0])


def uniform_gram_attention(gram: torch.Tensor, d_in: int, sigma_v2: float, p: float = 0.0, causal: bool = False,
                           key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-element output Gram (B, L, L) of one head at zeroth order in the scores (module docstring), for the
    per-element input Gram ``gram`` (B, L, L); ``p``: dropout on the attention probabilities.

    Args:
        gram: the input's per-element token Gram matrices, (B, L, L), float64.
        d_in: the input width.
        sigma_v2: the value weights' variance.
        p: dropout probability on the attention weights, in [0, 1).
        causal: whether query j sees keys k ≤ j only.
        key_mask: (B, L) bool, True at real tokens, or None.

    Returns:
        G_y = σ²_v d_in (U G Uᵀ + p/(1 − p) diag(Σ_k U_jk² G_kk)), (B, L, L).

    Example:
        >>> g = torch.eye(3, dtype=torch.float64)[None]
        >>> uniform_gram_attention(g, d_in=4, sigma_v2=0.25, causal=True)[0].diagonal()
        tensor([1.0000, 0.5000, 0.3333], dtype=torch.float64)
    """
    g = gram.to(torch.float64)
    u = uniform_weights(g, causal, key_mask)
    out = u @ g @ u.transpose(-1, -2)
    if p > 0.0:
        out = out + _dropout_diagonal(u * u, torch.diagonal(g, dim1=-2, dim2=-1), p)
    return sigma_v2 * d_in * out


def uniform_gram_attention_backward(grad_gram: torch.Tensor, d_k: int, sigma_v2: float, p: float = 0.0,
                                    causal: bool = False, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-element input-gradient Gram (B, L, L) of one head at zeroth order in the scores (module docstring), for
    the output-gradient Gram ``grad_gram`` (B, L, L); arguments as in :func:`uniform_gram_attention`, ``d_k`` the
    head's width.

    Returns:
        H_in = σ²_v d_k (Uᵀ H U + p/(1 − p) diag_k(Σ_j U_jk² H_jj)), (B, L, L); a layer of n heads gives n times it.

    Example:
        >>> h = torch.zeros(1, 3, 3, dtype=torch.float64); h[0, 2, 2] = 1.0  # gradient at the last position only
        >>> uniform_gram_attention_backward(h, d_k=1, sigma_v2=9.0, causal=True)[0].diagonal()
        tensor([1., 1., 1.], dtype=torch.float64)
    """
    h = grad_gram.to(torch.float64)
    u = uniform_weights(h, causal, key_mask)
    out = u.transpose(-1, -2) @ h @ u
    if p > 0.0:
        out = out + _dropout_diagonal((u * u).transpose(-1, -2), torch.diagonal(h, dim1=-2, dim2=-1), p)
    return sigma_v2 * d_k * out
