"""Token-resolved attention moments: the per-element token Gram matrix of attention's output for a given token Gram
matrix of its input, by sampling (the token-resolved form of :mod:`sigprop.components.attention_sampled`; Kedia et al.
App. A.8 for the model).

Why. The exchangeable state (:class:`~sigprop.core.moments.Moments`) gives every token pair the same correlation r. Real
text does not: a repeated token (the 15% of positions a masked-LM objective replaces by [MASK], common words) makes a
few pairs far more correlated than the rest, and a causal mask makes positions differ. Attention is not linear in the
pair correlations (a query's scores for two keys move together in proportion to the keys' correlation, so the
softmax weights two similar keys alike), so the mean correlation alone does not fix its output. At layer 0 of
DeepScaleLM's 192-layer Pre-LN model on real text the exchangeable rule misses both the attention branch's token
correlation and its variance by far more than the seeds' spread (the figures: docs/results/accuracy.md,
"The token-resolved forward state").

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
larger output variance than fixed-length rows (an O(1/d_in) effect that grows with the score scale; how large
at d_in = 64: docs/results/accuracy.md, "The token-resolved forward state"). With ``fixed_norm`` each sampled row is
rescaled to |x_j|² = d_in G_jj, which keeps the pair correlations to O(1/d_in).

Backward. The output gradient g ∈ R^{L×d_k} of a head has per-element Gram H (zero mean, independent of the forward
pass, as every backward rule here assumes). The input gradient ∂X = ∂/∂X ⟨g, A X W_V⟩ = ∂/∂X ⟨w, A X⟩ depends on the
value weights only through w = g W_Vᵀ ∈ R^{L×d_in}, which is independent of X and A with per-element covariance
E[w_j^a w_l^a] = σ²_v d_k H_jl. ∂X is linear in w, so its second moments need only that covariance, and sampling
w = (σ²_v d_k)^{1/2} H^{1/2} Z_w is exact in expectation:

    H_in = E[∂X ∂Xᵀ]/d_in,

with every path (values, keys and queries through the softmax Jacobian) differentiated by autograd on the sampled
heads, as :mod:`~sigprop.components.attention_sampled` does for the exchangeable state. Heads with independent W_V
add: a multi-head layer's input-gradient Gram is n_heads times a head's. For H = σ²_g[r_g 11ᵀ + (1 − r_g)I] and an
equicorrelated G this is the exchangeable rule's expectation.

Accuracy. Unbiased for every entry of G_y given G; the draws are common to every call with the same sizes and seed
(the token-resolved sweeps pass each layer a seed of its own, :func:`sigprop.components.draws.layer_seed`). Float64.
Cost per sequence and head: O(L² d_in + L d_in d_k) for the input and projections plus O(L² d_k + L² d_in) for
scores and output. For L < d_in the forward rule carries X Xᵀ instead of the rows X (:func:`_value_free_gram`):
O(L² d_in + L d_in d_k) per head shared by the sequences, then O(L³ + L² d_k) per sequence, about a quarter fewer
operations at L = 128, d_in = 256 (same draws, same result to rounding).

Assumes: given the Gram matrix, Gaussian input (as the exchangeable rules do); weights independent of the input
(initialisation); zero-mean input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..core.validate import check_range
from .draws import DEFAULT_GRAM_HEADS, standard_normal, uniform
from .query_key import QueryKeyMap, query_key_map

__all__ = ["GramAttention", "gram_attention", "gram_attention_backward", "gram_sqrt", "pooled_gram_means", "head_draws",
           "value_free_output", "blocked_scores"]

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
    """The symmetric square root C = V Λ^{1/2} Vᵀ (C Cᵀ = C² = G) of each symmetric positive semi-definite G in the
    batch (…, L, L), from the eigendecomposition G = V Λ Vᵀ (negative rounding-level eigenvalues are set to zero,
    so a singular G, two identical tokens, is fine).

    Why the symmetric root and not V Λ^{1/2}: both give X = C Z the covariance G, but V is not unique where
    eigenvalues repeat (every group of identical tokens makes one such eigenspace), and which basis the eigensolver
    returns there depends on rounding, the thread count and the hardware. With V Λ^{1/2} the same seed then gives a
    different sample, and a sweep's result changes at the level of its sampling error from one machine to the next
    (what the thread count alone did: docs/results/accuracy.md, "Sampling errors must not compound"). The symmetric root
    is unique and continuous in G."""
    evals, evecs = torch.linalg.eigh(gram)
    return (evecs * evals.clamp_min(0.0).sqrt()[..., None, :]) @ evecs.transpose(-1, -2)


@lru_cache(maxsize=2)
def head_draws(heads: int, L: int, d_in: int, d_k: int, dropout: bool, seed: int) -> tuple:
    """Standard-normal input and weight draws (and uniforms for dropout) of ``heads`` heads, in chunks of
    :data:`_CHUNK`: (Z, Z_q, Z_k, U or None). The last two seeds' draws are kept, so calls with the same seed
    reuse them (common random numbers; the token-resolved sweeps give each layer a seed of its own)."""
    gen = torch.Generator().manual_seed(seed)
    chunks, done = [], 0
    while done < heads:
        n = min(_CHUNK, heads - done)
        z = standard_normal((n, L, d_in), gen)
        zq, zk = standard_normal((n, d_in, d_k), gen), standard_normal((n, d_in, d_k), gen)
        u = uniform((n, L, L), gen) if dropout else None
        chunks.append((z, zq, zk, u))
        done += n
    return tuple(chunks)


def pooled_gram_means(per_head: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def _checked(gram: torch.Tensor, d_in: float, d_k: float, sigma_q2: float, sigma_k2: float, sigma_v2: float, p: float,
             causal: bool, key_mask: torch.Tensor | None, heads: int) -> tuple[int, int, int, int, float, float,
             float, float, int, torch.Tensor, torch.Tensor]:
    """Validated arguments of the Gram rules and what every head shares: (B, L, d_in, d_k, σ²_q, σ²_k, σ²_v, p, heads,
    keep (B, L), blocked score mask (B, 1, L, L))."""
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
    keep = torch.ones(B, L, dtype=torch.bool) if key_mask is None else torch.as_tensor(key_mask, dtype=torch.bool)
    if keep.shape != (B, L):
        raise ValueError(f"key_mask must have shape {(B, L)}, got {tuple(keep.shape)}")
    if not bool(keep.any(dim=1).all()):
        raise ValueError("key_mask: every sequence needs at least one real token")
    return B, L, d_in, d_k, sq, sk, sv, p, heads, keep, blocked_scores(keep, causal)


def blocked_scores(keep: torch.Tensor, causal: bool) -> torch.Tensor:
    """The score mask (B, 1 head, L queries, L keys), True where a score is blocked: padded keys (``keep`` (B, L) False)
    and, ``causal``, future keys. A padded query with no visible key is left unblocked (finite, unused)."""
    L = keep.shape[-1]
    blocked = ~keep[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(L, L, dtype=torch.bool).triu(1)
    return blocked & ~blocked.all(dim=-1, keepdim=True)


def _input_maps(gram: torch.Tensor, d_in: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(G^{1/2} (B, 1, L, L), the fixed row lengths √(d_in G_jj) (B, 1, L, 1)) of a batch of Gram matrices."""
    length = (d_in * torch.diagonal(gram, dim1=-2, dim2=-1)).sqrt()[:, None, :, None]
    return gram_sqrt(gram)[:, None], length


def _sampled_input(maps: tuple, z: torch.Tensor, fixed_norm: bool) -> torch.Tensor:
    """X = G^{1/2} Z for a chunk of heads (B, n, L, d_in), each row rescaled to length √(d_in G_jj) with
    ``fixed_norm`` (module docstring); ``maps`` from :func:`_input_maps`."""
    root, length = maps
    x = root @ z
    if fixed_norm:
        x = x * (length / x.norm(dim=-1, keepdim=True).clamp_min(1e-300))
    return x


def _attention_weights(q: torch.Tensor, k: torch.Tensor, u: torch.Tensor | None, d_k: float, p: float,
                       blocked: torch.Tensor, rope: float | QueryKeyMap | None = None) -> torch.Tensor:
    """A = Dropout_p(softmax(Q Kᵀ/√d_k + masks)) of a chunk of heads, the dropout mask from the uniforms ``u``;
    ``rope`` (a rotary base or a :class:`~sigprop.components.query_key.QueryKeyMap`) maps Q and K first."""
    qk = query_key_map(rope)
    if qk is not None:
        q, k = qk(q), qk(k)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d_k)).masked_fill(blocked, float("-inf"))
    a = torch.softmax(scores, dim=-1)
    if u is not None:
        a = a * (u >= p).to(torch.float64) / (1.0 - p)
    return a


def value_free_output(x: torch.Tensor, zq: torch.Tensor, zk: torch.Tensor, u: torch.Tensor | None, sq: float,
                      sk: float, d_k: float, p: float, blocked: torch.Tensor,
                      rope: float | QueryKeyMap | None = None) -> torch.Tensor:
    """The value-free output O = Dropout_p(softmax(X W_Q (X W_K)ᵀ/√d_k + masks)) X of a chunk of heads (W_V is
    averaged exactly); ``rope``: rotary base or query–key map, or None."""
    a = _attention_weights(x @ (math.sqrt(sq) * zq), x @ (math.sqrt(sk) * zk), u, d_k, p, blocked, rope)
    return a @ x


def _value_free_gram(maps: tuple[torch.Tensor, torch.Tensor], z: torch.Tensor, zq: torch.Tensor, zk: torch.Tensor,
                     u: torch.Tensor | None, sq: float, sk: float, d_k: float, p: float, blocked: torch.Tensor,
                     fixed_norm: bool,
                     rope: float | QueryKeyMap | None = None) -> torch.Tensor:
    """O Oᵀ for the value-free output O = A X of a chunk of heads (B, n, L, L), computed without the rows
    X = D G^{1/2} Z (D the fixed-length rescaling, identity without ``fixed_norm``): X Xᵀ = D G^{1/2} (Z Zᵀ) G^{1/2} D,
    X W_Q = D G^{1/2} (Z W_Q), so every product is L × L or L × d_k and Z Zᵀ, Z W_Q, Z W_K are shared by the B
    sequences. Equal to ``O @ O.T`` from :func:`value_free_output` on the same draws (to rounding, tested); for
    L < d_in its products are smaller than the rows' (the two paths timed: docs/results/performance.md)."""
    root, length = maps
    xxt = (root @ (z @ z.transpose(-1, -2))) @ root  # G^{1/2} is symmetric
    q = root @ (z @ (math.sqrt(sq) * zq))
    k = root @ (z @ (math.sqrt(sk) * zk))
    if fixed_norm:
        scale = length / torch.diagonal(xxt, dim1=-2, dim2=-1).sqrt().clamp_min(1e-300)[..., None]
        xxt = xxt * scale * scale.transpose(-1, -2)
        q, k = q * scale, k * scale
    a = _attention_weights(q, k, u, d_k, p, blocked, rope)
    return (a @ xxt) @ a.transpose(-1, -2)


def gram_attention(gram: torch.Tensor, d_in: int, d_k: int, sigma_q2: float, sigma_k2: float, sigma_v2: float,
                   p: float = 0.0, causal: bool = False, key_mask: torch.Tensor | None = None,
                   heads: int = DEFAULT_GRAM_HEADS, seed: int = 0, fixed_norm: bool = False,
                   rope: float | QueryKeyMap | None = None) -> GramAttention:
    """Per-element output Gram matrix of single-head attention (module docstring) for the per-element input Gram
    ``gram`` (B, L, L) of B sequences, by sampling ``heads`` heads per sequence from ``seed``.

    ``key_mask`` (B, L) bool, True at real tokens, keeps padded keys out of every softmax (the rows of padded queries
    are computed but mean nothing). ``p``: dropout on the attention probabilities. ``fixed_norm``: the input is a
    norm's output, whose rows have a fixed length (|x_j|² = d_in G_jj exactly: LayerNorm, RMSNorm), so each sampled
    row is rescaled to that length (module docstring). ``rope``: the rotary base of a RoPE model (queries and keys
    rotated by positions 0 … L − 1, :mod:`~sigprop.components.rope`), a
    :class:`~sigprop.components.query_key.QueryKeyMap` (QK-norm, partial rotation), or None. Raises
    ``ValueError`` naming the argument on invalid input.
    """
    B, L, d_in, d_k, sq, sk, sv, p, heads, keep, blocked = _checked(gram, d_in, d_k, sigma_q2, sigma_k2, sigma_v2,
                                                                     p, causal, key_mask, heads)
    maps = _input_maps(gram.to(torch.float64), d_in)
    total = torch.zeros(B, L, L, dtype=torch.float64)
    diag_means, offdiag_means = [], []
    for z, zq, zk, u in head_draws(heads, L, d_in, d_k, p > 0.0, int(seed)):
        if d_in > L:  # carrying X Xᵀ (L × L) is cheaper than carrying the rows X (L × d_in)
            per_head = sv * _value_free_gram(maps, z, zq, zk, u, sq, sk, d_k, p, blocked, fixed_norm, rope)
        else:
            o = value_free_output(_sampled_input(maps, z, fixed_norm), zq, zk, u, sq, sk, d_k, p, blocked, rope)
            per_head = sv * (o @ o.transpose(-1, -2))  # (B, n, L, L)
        total += per_head.sum(dim=1)
        dm, om = pooled_gram_means(per_head, keep)
        diag_means.append(dm)
        offdiag_means.append(om)
    dm, om = torch.cat(diag_means), torch.cat(offdiag_means)
    se = lambda t: float(t.std(unbiased=True) / math.sqrt(t.numel()))  # noqa: E731
    return GramAttention(gram=total / heads, var_se=se(dm), cov_se=se(om), heads=heads)


@lru_cache(maxsize=2)
def _gradient_draws(heads: int, L: int, d_in: int, seed: int) -> tuple:
    """Draws Z_w (L × d_in per head) of the value-averaged output gradient w = (σ²_v d_k)^{1/2} H^{1/2} Z_w (module
    docstring, "Backward"), in the chunks of :func:`head_draws`; kept between calls like them.

    Only E[Z_w Z_wᵀ] = d_in I matters (∂X is linear in w), so for L ≤ d_in the rows are a uniformly random orthonormal
    frame scaled by √d_in: Z_w Z_wᵀ = d_in I holds for every draw, not only on average, and the value path's
    contribution carries no sampling noise. A sampling error of the per-layer gradient factor compounds over the
    layers of a sweep (what Gaussian draws shared by every layer did at rank collapse: docs/results/accuracy.md, "The
    token-resolved backward sweep").
    For L > d_in the rows are Gaussian."""
    gen = torch.Generator().manual_seed(seed + 0x9E3779B9)  # a stream apart from the forward draws
    sizes = [min(_CHUNK, heads - done) for done in range(0, heads, _CHUNK)]
    chunks = []
    for n in sizes:
        z = standard_normal((n, d_in, L), gen)
        if d_in >= L:
            q, r = torch.linalg.qr(z)  # (n, d_in, L) orthonormal columns; sign fix below makes the frame uniform
            z = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :] * math.sqrt(d_in)
        chunks.append(z.transpose(-1, -2).contiguous())
    return tuple(chunks)


def gram_attention_backward(gram: torch.Tensor, grad_gram: torch.Tensor, d_in: int, d_k: int, sigma_q2: float,
                            sigma_k2: float, sigma_v2: float, p: float = 0.0, causal: bool = False,
                            key_mask: torch.Tensor | None = None, heads: int = DEFAULT_GRAM_HEADS, seed: int = 0,
                            fixed_norm: bool = False, rope: float | QueryKeyMap | None = None) -> torch.Tensor:
    """Per-element Gram matrix (B, L, L) of single-head attention's input gradient (module docstring, "Backward"),
    for the per-element forward input Gram ``gram`` and output-gradient Gram ``grad_gram`` (both (B, L, L)), by
    sampling ``heads`` heads per sequence from ``seed``; the forward draws are :func:`gram_attention`'s (common
    random numbers) when ``seed`` is the forward's. Other arguments as in :func:`gram_attention`. Raises
    ``ValueError`` naming the argument on invalid input."""
    B, L, d_in, d_k, sq, sk, sv, p, heads, _, blocked = _checked(gram, d_in, d_k, sigma_q2, sigma_k2, sigma_v2, p,
                                                                 causal, key_mask, heads)
    if grad_gram.shape != gram.shape:
        raise ValueError(f"grad_gram must have the shape of gram {tuple(gram.shape)}, got {tuple(grad_gram.shape)}")
    maps = _input_maps(gram.to(torch.float64), d_in)
    grad_root = math.sqrt(sv * d_k) * gram_sqrt(grad_gram.to(torch.float64))[:, None]
    total = torch.zeros(B, L, L, dtype=torch.float64)
    chunks = zip(head_draws(heads, L, d_in, d_k, p > 0.0, int(seed)), _gradient_draws(heads, L, d_in, int(seed)),
                 strict=True)
    with torch.enable_grad():
        for (z, zq, zk, u), zw in chunks:
            x = _sampled_input(maps, z, fixed_norm).requires_grad_(True)
            o = value_free_output(x, zq, zk, u, sq, sk, d_k, p, blocked, rope)
            (dx,) = torch.autograd.grad(o, x, grad_root @ zw)
            total += (dx @ dx.transpose(-1, -2)).sum(dim=1) / d_in
    return total / heads
