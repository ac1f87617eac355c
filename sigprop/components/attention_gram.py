"""Token-resolved attention moments: the per-element token Gram matrix of attention's output for a given token Gram
matrix of its input, by sampling (the token-resolved form of :mod:`sigprop.components.attention_sampled`; Kedia et al.
App. A.8 for the model).

Why. The exchangeable state (:class:`~sigprop.moments.Moments`) gives every token pair the same correlation r. Real
text does not: a repeated token (the 15% of positions a masked-LM objective replaces by [MASK], common words) makes a
few pairs far more correlated than the rest, and a causal mask makes positions differ. Attention is not linear in the
pair correlations (a query's scores for two keys move together in proportion to the keys' correlation, so the
softmax weights two similar keys alike), so the mean correlation alone does not fix its output. At layer 0 of
DeepScaleLM's 192-layer Pre-LN model on real text the exchangeable rule puts the attention branch's token
correlation at 0.485 and its variance at 4.84; measured: 0.425 and 5.32 (``README``, token-resolved theory).

Model. One sequence of L tokens with per-element covariance Cov(x_j^a, x_l^b) = G_jl δ_ab (no hidden correlation, zero
mean): X = G^{1/2} Z with Z ∈ R^{L×d_in} i.i.d. N(0, 1) (G^{1/2} from the eigendecomposition, so a singular G, two
identical tokens, is allowed); W_Q, W_K ∈ R^{d_in×d_k} with i.i.d. N(0, σ²_q), N(0, σ²_k) entries;
A = Dropout_p(softmax(X W_Q (X W_K)ᵀ/√d_k + masks)) (a causal mask and/or padded keys); y = A X W_V. Averaging W_V
exactly (i.i.d. N(0, σ²_v), independent of the rest):

    E[y_j^a y_l^a | A, X] = σ²_v Σ_c (AX)_jc (AX)_lc = σ²_v (A X Xᵀ Aᵀ)_jl,

so the output Gram is G_y = σ²_v E[A X Xᵀ Aᵀ], estimated by the mean over S sampled heads (draws of Z, W_Q, W_K and
the dropout mask). A multi-head layer's concatenated output has the same per-element Gram (heads are independent).
For an equicorrelated G (G_jj = σ², G_jl = rσ²) this is the expectation :mod:`~sigprop.components.attention_sampled`
estimates, which the tests check.

Fixed-length rows. Attention in a transformer reads a norm's output, whose rows have a fixed length
(|x̂_j|² = d_in for LayerNorm and RMSNorm at their initial gain), not the χ²-spread length of a Gaussian row. The
spread is not harmless: a longer key gets more extreme scores and carries a longer value, so Gaussian rows give a
larger output variance (at d_in = 64 and Xavier-scale scores, 4–6% larger than fixed-length rows; an O(1/d_in)
effect that grows with the score scale). With ``fixed_norm`` each sampled row is rescaled to |x_j|² = d_in G_jj,
which keeps the pair correlations to O(1/d_in).

Accuracy. Unbiased for every entry of G_y given G; the draws are common to every call with the same sizes and seed
(so a layer-by-layer sweep reuses them, as the exchangeable sampled rule does). Float64. Cost per sequence and head:
O(L² d_in + L d_in d_k) for the input and projections plus O(L² d_k + L² d_in) for scores and output.

Assumes: given the Gram matrix, Gaussian input (as the exchangeable rules do); weights independent of the input
(initialisation); zero-mean input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..moments import check_range

__all__ = ["GramAttention", "gram_attention", "gram_sqrt", "pooled_gram_means", "DEFAULT_GRAM_HEADS"]

#: Heads sampled per sequence by default. With a batch of 4 sequences this is 128 heads in all, the exchangeable
#: sampled rule's default, at about the same cost.
DEFAULT_GRAM_HEADS = 32
_CHUNK = 8  # heads per batched pass: bounds memory at B·chunk·L·max(L, d_in) floats


@dataclass(frozen=True)
class GramAttention:
    """The sampled output Gram matrix (B, L, L) of one attention head per element, and the standard errors (over the
    sampled heads) of its pooled diagonal mean and pooled off-diagonal mean (what a variance and a token covariance
    are made of)."""

    gram: torch.Tensor
    var_se: float
    cov_se: float
    heads: int


def gram_sqrt(gram: torch.Tensor) -> torch.Tensor:
    """A square root C with C Cᵀ = G for each symmetric positive semi-definite G in the batch (…, L, L), from the
    eigendecomposition (negative rounding-level eigenvalues are set to zero, so a singular G is fine)."""
    evals, evecs = torch.linalg.eigh(gram)
    return evecs * evals.clamp_min(0.0).sqrt()[..., None, :]


@lru_cache(maxsize=2)
def _draws(heads: int, L: int, d_in: int, d_k: int, dropout: bool, seed: int) -> tuple:
    """Standard-normal input and weight draws (and uniforms for dropout) of ``heads`` heads, in chunks of
    :data:`_CHUNK`: (Z, Z_q, Z_k, U or None). Kept between calls, so a layer-by-layer sweep draws them once (the same
    draws for every layer: common random numbers)."""
    gen = torch.Generator().manual_seed(seed)
    kw = {"generator": gen, "dtype": torch.float64}
    chunks, done = [], 0
    while done < heads:
        n = min(_CHUNK, heads - done)
        z = torch.randn(n, L, d_in, **kw)
        zq, zk = torch.randn(n, d_in, d_k, **kw), torch.randn(n, d_in, d_k, **kw)
        chunks.append((z, zq, zk, torch.rand(n, L, L, **kw) if dropout else None))
        done += n
    return tuple(chunks)


def pooled_gram_means(per_head: torch.Tensor, keep: torch.Tensor):
    """Per head (axis 1): the mean diagonal entry over the real tokens and the mean off-diagonal entry over the
    ordered pairs of real tokens within each sequence, pooled over the sequences (how :mod:`sigprop.measurement`
    pools a variance and a token covariance); ``per_head`` (B, H, L, L), ``keep`` (B, L) bool."""
    w = keep.to(per_head.dtype)
    diag = torch.diagonal(per_head, dim1=-2, dim2=-1)
    n_tok = w.sum()
    pair_w = w[:, :, None] * w[:, None, :]
    n_pairs = pair_w.sum() - n_tok
    s_diag = (diag * w[:, None, :]).sum(dim=(0, 2))
    s_all = (per_head * pair_w[:, None]).sum(dim=(0, 2, 3))
    return s_diag / n_tok, (s_all - s_diag) / n_pairs.clamp_min(1.0)


def gram_attention(gram: torch.Tensor, d_in: int, d_k: int, sigma_q2: float, sigma_k2: float, sigma_v2: float,
                   p: float = 0.0, causal: bool = False, key_mask: torch.Tensor | None = None,
                   heads: int = DEFAULT_GRAM_HEADS, seed: int = 0, fixed_norm: bool = False) -> GramAttention:
    """Per-element output Gram matrix of single-head attention (module docstring) for the per-element input Gram
    ``gram`` (B, L, L) of B sequences, by sampling ``heads`` heads per sequence from ``seed``.

    ``key_mask`` (B, L) bool, True at real tokens, keeps padded keys out of every softmax (the rows of padded queries
    are computed but mean nothing). ``p``: dropout on the attention probabilities. ``fixed_norm``: the input is a
    norm's output, whose rows have a fixed length (|x_j|² = d_in G_jj exactly: LayerNorm, RMSNorm), so each sampled
    row is rescaled to that length (module docstring). Raises ``ValueError`` naming the argument on invalid input.
    """
    if gram.dim() != 3 or gram.shape[-1] != gram.shape[-2]:
        raise ValueError(f"gram must have shape (batch, L, L), got {tuple(gram.shape)}")
    B, L, _ = gram.shape
    check_range(L, "sequence length L", lo=2.0, allowed="[2, inf)")
    d_in = int(check_range(d_in, "d_in", lo=1.0, allowed="integers >= 1"))
    d_k = int(check_range(d_k, "d_k", lo=1.0, allowed="integers >= 1"))
    sq = float(check_range(sigma_q2, "sigma_q2", lo=0.0, lo_open=True, allowed="(0, inf)"))
    sk = float(check_range(sigma_k2, "sigma_k2", lo=0.0, lo_open=True, allowed="(0, inf)"))
    sv = float(check_range(sigma_v2, "sigma_v2", lo=0.0, lo_open=True, allowed="(0, inf)"))
    p = float(check_range(p, "dropout p", lo=0.0, hi=1.0, hi_open=True))
    heads = int(check_range(heads, "heads", lo=2.0, allowed="integers >= 2"))
    gram = gram.to(torch.float64)
    keep = torch.ones(B, L, dtype=torch.bool) if key_mask is None else torch.as_tensor(key_mask, dtype=torch.bool)
    if keep.shape != (B, L):
        raise ValueError(f"key_mask must have shape {(B, L)}, got {tuple(keep.shape)}")
    if not bool(keep.any(dim=1).all()):
        raise ValueError("key_mask: every sequence needs at least one real token")
    blocked = ~keep[:, None, None, :]  # (B, 1 head, 1 query, L keys)
    if causal:
        blocked = blocked | torch.ones(L, L, dtype=torch.bool).triu(1)
    root = gram_sqrt(gram)[:, None]  # (B, 1, L, L)
    length = (d_in * torch.diagonal(gram, dim1=-2, dim2=-1)).sqrt()[:, None, :, None]  # (B, 1, L, 1)
    total = torch.zeros(B, L, L, dtype=torch.float64)
    diag_means, offdiag_means = [], []
    for z, zq, zk, u in _draws(heads, L, d_in, d_k, p > 0.0, int(seed)):
        x = root @ z  # (B, n, L, d_in)
        if fixed_norm:
            x = x * (length / x.norm(dim=-1, keepdim=True).clamp_min(1e-300))
        q = x @ (math.sqrt(sq) * zq)
        k = x @ (math.sqrt(sk) * zk)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d_k)).masked_fill(blocked, float("-inf"))
        a = torch.softmax(scores, dim=-1)
        if u is not None:
            a = a * (u >= p).to(torch.float64) / (1.0 - p)
        o = a @ x
        per_head = sv * (o @ o.transpose(-1, -2))  # (B, n, L, L)
        total += per_head.sum(dim=1)
        dm, om = pooled_gram_means(per_head, keep)
        diag_means.append(dm)
        offdiag_means.append(om)
    dm, om = torch.cat(diag_means), torch.cat(offdiag_means)
    se = lambda t: float(t.std(unbiased=True) / math.sqrt(t.numel()))  # noqa: E731
    return GramAttention(gram=total / heads, var_se=se(dm), cov_se=se(om), heads=heads)
