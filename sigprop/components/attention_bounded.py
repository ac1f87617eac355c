"""The sampled attention rule at a cost that does not grow with the width and grows only linearly with the sequence:
the same expectation as :mod:`sigprop.components.attention_sampled` (Kedia et al. App. A.8, the model of that
module's docstring), estimated without drawing a head's d_in-wide input, nor every query of a long sequence.

The sampled rule draws, per head, the L × d_in input X and d_in × d_k weights W_Q, W_K, and runs all L queries: its
draws hold S·L·(2d_in + L) numbers (S heads), 17·10⁹ for a Llama-3-8B layer (d_in = 4096, L = 8192, S = 128). Two
exact reductions make it affordable; neither changes what is estimated, only the noise.

**1. The width: only 2·d_k coordinates of X reach the scores** (exact in law). Let a = min(d_in, 2d_k) and
[W_K W_Q] = V R the QR decomposition of the d_in × 2d_k weight matrix (V d_in × a with orthonormal columns, R a × 2d_k
upper trapezoidal). For Gaussian weights V is Haar-distributed and independent of R, whose law is Bartlett's:
R_jj ~ χ_{d_in − j} (j = 0 … a − 1) and R_jl ~ N(0, 1) for j < l, all independent (σ_k, σ_q scale its two halves). In
the frame U = [V V⊥] (V⊥ completing V to a Haar rotation) the tokens x'_k = Uᵀx_k have the law of x_k, since the
input is isotropic (x_k = μ1 + c + δ_k: c ~ N(0, rσ²I), δ_k ~ N(0, (1 − r)σ²I)) and independent of the weights,
except for the mean, which becomes μ√d_in times a uniformly random unit vector. Keys and queries read only the first
a coordinates: K = X'_a R_K, Q = X'_a R_Q. The other D = d_in − a coordinates, x^⊥_k = m^⊥ + c^⊥ + δ^⊥_k, are
independent of the attention probabilities Ã, so every statistic's expectation over them is taken exactly
(Rao–Blackwell; E_⊥ = |m^⊥|² + Dρ, ρ = rσ², τ = (1 − r)σ²):

    E[o_i·o_j] = o'_i·o'_j + E_⊥ T_i T_j + Dτ Σ_k Ã_ik Ã_jk,      T_i = Σ_k Ã_ik,   o' = Ã X'_a

(the value-free output o_i = Σ_k Ã_ik x_k of :mod:`~sigprop.components.attention_sampled`). The input gradient
∂⟨G, O⟩/∂x_k splits the same way: its ⊥ part is Σ_i Ã_ik g^⊥_i (values only), whose squared norm and token sums
have expectations D Σ_i Ã_ik² (independent output gradient) or D C_k² (shared; C_k = Σ_i Ã_ik); and the scores' paths
read the ⊥ part only through the scalars h^⊥_ik = g^⊥_i·x^⊥_k, on which the first a coordinates' gradient depends
linearly, so Gaussian scalars with their covariance, E[h^⊥_ik h^⊥_jl] = E[g_i·g_j]/d_in·(E_⊥ + Dτ δ_kl), give its
second moments exactly: h^⊥_ik = √E_⊥ α + √(Dτ) β_k per unit output gradient (α, β_k ~ N(0, 1)).
A head then costs O(L·a·d_k) instead of O(L·d_in·d_k + L²·d_in).

**2. The queries: a random subset, reweighted exactly.** Every statistic is an average over positions (the
variance) or over ordered pairs of positions (a covariance), of terms that are sums over queries: the output o_i
belongs to query i; the input gradient is Σ_i ∂⟨g_i, o_i⟩/∂X, so its squared norm is a double sum over queries.
Each position enters a uniform draw A independently with probability π^A_i, and (causal attention) a second
draw B with π^B_i ∝ 1/(i + 1) (:func:`inclusion_probabilities`: the early positions, whose terms vary most, nearly
always); Q = A ∪ B holds position i with probability π_i = 1 − (1 − π^A_i)(1 − π^B_i), and A a pair i ≠ j with
probability π^A_i π^A_j, so (Horvitz–Thompson)

    Σ_i F_ii + Σ_{i≠j} F_ij  ≈  Σ_{i∈Q} F_ii/π_i + Σ_{i≠j∈A} F_ij/(π^A_i π^A_j)

is unbiased for any per-query (F_ii) and per-pair (F_ij) terms: the forward variance weighs |o_i|² by 1/π_i, its
covariance o_i·o_j by 1/(π^A_iπ^A_j); the gradient's per-query part comes from a pass whose output gradient at
query i is g_i/√π_i (independent g_i), its pair part from a pass with γ/π^A_i on A (γ shared by every query) less
that pass's own terms, taken from a third with ε_i γ/π^A_i (ε_i = ±1 at random: E[ε_iε_j] = δ_ij). Only the keys
up to Q's last position are drawn for causal attention; each query still reads all its keys, so the softmax is
exact. Rotary positions rotate each key and query by its own position (:mod:`~sigprop.components.rope`), QK-norm
normalises each, as in the sampled rule. A correlation, the ratio of two such estimates, is clipped to [−1, 1]
where the noise of few heads would carry it past.

Cost: O(S·L·a·(d_k + m)) and S·L·a numbers per configuration, for S heads of m queries. Accuracy: unbiased for the
variances and covariances like the sampled rule; a correlation is a ratio of means (bias O(1/S)). The standard errors
over heads come with every estimate. What the subsampling costs in noise against the full rule at sizes where both
run: the production-sizes page, docs/results/scale.md (``bench/attention_bounded.py``).

Assumes what the sampled rule assumes (Gaussian input of token correlation r ∈ [0, 1] and no hidden correlation,
initialisation-time independence, an output gradient independent of the forward pass).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import clip_corr
from .attention_sampled import SampledAttention, checked_head, checked_input, elementwise
from .draws import standard_normal, uniform
from .query_key import QueryKeyMap, query_key_map

__all__ = ["sample_bounded", "bounded_forward", "bounded_backward", "bounded_heads", "bounded_numbers",
           "inclusion_probabilities", "DEFAULT_QUERIES", "HEAD_BUDGET"]

#: Query positions each sampled head runs (all of them when the sequence is shorter).
DEFAULT_QUERIES = 16
#: Numbers (token coordinates) a configuration's heads draw in all: S·L·a ≤ this, with S ≥ 2 (:func:`bounded_heads`).
HEAD_BUDGET = 1 << 21


def bounded_heads(heads: int, L: int, d_in: int, d_k: int) -> int:
    """The heads the bounded rule draws for a configuration: ``heads`` (the sampled rule's number), fewer where their
    L·min(d_in, 2d_k) coordinates would exceed :data:`HEAD_BUDGET` in all, and at least 2."""
    per_head = int(L) * min(int(d_in), 2 * int(d_k))
    return int(max(2, min(int(heads), HEAD_BUDGET // max(per_head, 1))))


def bounded_numbers(heads: int, L: int, d_in: int, d_k: int, queries: int = DEFAULT_QUERIES) -> int:
    """Float64-sized numbers the bounded rule holds at once, for one head (heads are drawn one after another): its
    L × a tokens, keys, the queries' scores and probabilities, three input gradients and their float64 sums, and
    autograd's saved tensors, about 14 L × a in all, and the a × 2d_k factor R of the weights (drawn in float32, used
    in float64: twice its size), which dominates only where a head is far wider than the sequence is long; the
    memory estimate's unit (:mod:`sigprop.model.size`; against the measured peak: docs/results/scale.md)."""
    a, m = min(int(d_in), 2 * int(d_k)), min(int(queries), int(L))
    return int(L) * (14 * a + 2 * int(d_k) + 6 * m) + 2 * a * 2 * int(d_k)


def _bartlett(a: int, n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    """The R factor (a × n, upper trapezoidal, positive diagonal) of the QR decomposition of a d × n standard Gaussian
    matrix, a = min(d, n): R_jj ~ χ_{d − j}, R_jl ~ N(0, 1) above the diagonal (Bartlett; module docstring)."""
    r = torch.triu(standard_normal((a, n), gen), 1)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    chi = np.sqrt(np.random.default_rng(seed).chisquare(d - np.arange(a, dtype=np.float64)))
    r[range(a), range(a)] = torch.from_numpy(chi)
    return r


def _mean_direction(a: int, d: int, gen: torch.Generator) -> tuple[torch.Tensor, float]:
    """(the first a coordinates of a uniformly random unit vector of R^d, the squared norm of the others)."""
    g = standard_normal((a,), gen)
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    rest = float(np.random.default_rng(seed).chisquare(d - a)) if d > a else 0.0
    norm2 = float(g @ g) + rest
    return g / math.sqrt(norm2), rest / norm2


def inclusion_probabilities(L: int, m: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(π^A, π^B) per query position: each position enters draw A with probability π^A_i = m/(2L) (uniform), and
    independently draw B with π^B_i ∝ 1/(i + 1) (causal attention only; capped at 1), m/2 positions each in
    expectation; all positions (π^A = 1) when m ≥ L. A query's statistics vary like 1/(its key count) (P2 = 1 at
    position 0, 1/2 at position 1, …), so B keeps the early positions, cheap and far from the average, (nearly)
    always in for the per-query terms; the pairs, most of them between late positions, come from A alone, whose
    uniform weights keep their sum steady. Bidirectional attention: A alone, m/L."""
    i = torch.arange(L, dtype=torch.float64)
    if m >= L:
        return torch.ones(L, dtype=torch.float64), torch.zeros(L, dtype=torch.float64)
    if not causal:
        return torch.full((L,), m / L, dtype=torch.float64), torch.zeros(L, dtype=torch.float64)
    harmonic = float((1.0 / (i + 1.0)).sum())
    return (torch.full((L,), 0.5 * m / L, dtype=torch.float64),
            torch.clamp(0.5 * m / ((i + 1.0) * harmonic), max=1.0))


def _one_head(mean: float, var: float, corr: float, d_in: int, d_k: int, L: int, sq: float, sk: float, p: float,
              causal: bool, m: int, rope: QueryKeyMap | None, gen: torch.Generator) -> dict[str, float]:
    """Per-unit statistics of one head (module docstring), each before the value and gradient scales: forward
    E|o|²/d_in and E[o_i·o_j]/d_in; the input gradient's variance and covariance for an independent ("in") and a
    shared ("sh") unit output gradient; and the queries' mean score variance. The L × a tensors are float32 (the
    draws' own resolution, :func:`~sigprop.components.draws.standard_normal`); every statistic is summed in
    float64."""
    a = min(d_in, 2 * d_k)
    rest = d_in - a
    rho, tau = corr * var, (1.0 - corr) * var
    pi_a, pi_b = inclusion_probabilities(L, m, causal)
    in_a = torch.rand(L, generator=gen, dtype=torch.float64) < pi_a
    in_b = torch.rand(L, generator=gen, dtype=torch.float64) < pi_b
    queries = torch.nonzero(in_a | in_b).flatten()
    if queries.numel() == 0:  # no position drawn (probability e^{-m/2}): every sum is empty
        return dict.fromkeys(("fwd_var", "fwd_cov", "in_var", "in_cov", "sh_var", "sh_cov", "s2"), 0.0)
    pi = (1.0 - (1.0 - pi_a) * (1.0 - pi_b))[queries]  # in A or B: the per-query terms' weights 1/π_i
    pair = torch.where(in_a[queries], 1.0 / pi_a[queries], 0.0)  # the pairs' weights, A alone: 1/π^A_i
    n_tok = int(queries[-1]) + 1 if causal else L
    r = _bartlett(a, 2 * d_k, d_in, gen).float()
    unit, mean_rest = _mean_direction(a, d_in, gen)
    shared = (mean * math.sqrt(d_in) * unit + math.sqrt(rho) * standard_normal((a,), gen)).float()
    energy_rest = mean * mean * d_in * mean_rest + rest * rho  # E|m⊥ + c⊥|²
    x = (shared + math.sqrt(tau) * _normal32((n_tok, a), gen)).requires_grad_(True)
    k = x[:, :min(a, d_k)] @ (math.sqrt(sk) * r[:min(a, d_k), :d_k])
    q = x[queries] @ (math.sqrt(sq) * r[:, d_k:])
    qk = query_key_map(rope)
    if qk is not None:
        k, q = qk(k), qk(q, queries.to(torch.float32))
    s = q @ k.transpose(0, 1) / math.sqrt(d_k)
    s2 = float(s.detach().double().var(dim=-1).nan_to_num().mean()) if n_tok > 1 else 0.0
    if causal:
        s = s.masked_fill(torch.arange(n_tok)[None, :] > queries[:, None], float("-inf"))
    att = torch.softmax(s, dim=-1)
    n_q = len(queries)
    if p > 0.0:
        att = att * ((uniform((n_q, n_tok), gen) >= p).to(torch.float32) / (1.0 - p))
    o = att @ x

    # Horvitz–Thompson weights: a query's terms by 1/π_i, a pair's (both in A) by 1/(π^A_i π^A_j)
    inv = 1.0 / pi
    with torch.no_grad():
        a64, o64 = att.double(), o.double()
        t = a64.sum(-1)
        gram = o64 @ o64.transpose(0, 1) + energy_rest * torch.outer(t, t) + rest * tau * (a64 @ a64.transpose(0, 1))
        own = (a64 * a64).sum(-1)  # Σ_k Ã_ik² per query

    def rest_terms(scale: torch.Tensor) -> tuple[float, float, torch.Tensor]:
        # the ⊥ coordinates' (Σ_k |g_k|², |Σ_k g_k|²) for per-query output gradients ∝ scale, and the column sums
        col = (scale[:, None] * a64).sum(0)
        return rest * float((scale * scale * own).sum()), rest * float((scale * scale * t * t).sum()), col

    gamma = _normal32((a,), gen)
    h_rest = math.sqrt(energy_rest) * float(standard_normal((1,), gen)) + math.sqrt(rest * tau) * _normal32(
        (n_tok,), gen)
    per_query = o @ gamma + att @ h_rest  # ⟨γ, o_i⟩ for the unit output gradient γ (its ⊥ part through h⊥)
    everyone = n_q == L and bool(torch.all(pi_a == 1.0))
    scale = pair if not everyone else torch.ones_like(inv)
    g_shared = torch.autograd.grad((scale.float() * per_query).sum(), x, retain_graph=True)[0]
    _, _, col = rest_terms(scale)
    sq_sh, tot_sh = _sums(g_shared, rest * float((col * col).sum()), rest * float((scale * t).sum()) ** 2)
    if not everyone:  # the shared pass's own (i = j) terms, to leave its pairs: the same γ, a random sign per query
        sign = torch.randint(0, 2, (n_q,), generator=gen).to(torch.float64) * 2.0 - 1.0
        g_sign = torch.autograd.grad(((sign * pair).float() * per_query).sum(), x, retain_graph=True)[0]
        sq_own, tot_own, _ = rest_terms(pair)
        sq_sign, tot_sign = _sums(g_sign, sq_own, tot_own)
    # an independent output gradient per query, each weighted by 1/√π_i
    root = torch.sqrt(inv)
    w = _normal32((n_q, a), gen) * root.float()[:, None]
    h_rest = (math.sqrt(energy_rest) * _normal32((n_q, 1), gen)
              + math.sqrt(rest * tau) * _normal32((n_q, n_tok), gen)) * root.float()[:, None]
    g_in = torch.autograd.grad((o * w).sum() + (att * h_rest).sum(), x)[0]
    sq_rest, tot_rest, _ = rest_terms(root)
    sq_in, tot_in = _sums(g_in, sq_rest, tot_rest)
    pair_w = torch.outer(pair, pair)
    pair_w.fill_diagonal_(0.0)
    out = {"fwd_var": float((gram.diagonal() * inv).sum()) / (L * d_in),
           "fwd_cov": float((gram * pair_w).sum()) / (L * (L - 1.0) * d_in),
           "in_var": sq_in / (L * d_in), "in_cov": (tot_in - sq_in) / (L * (L - 1.0) * d_in),
           "sh_var": sq_sh / (L * d_in), "sh_cov": (tot_sh - sq_sh) / (L * (L - 1.0) * d_in), "s2": s2}
    if not everyone:  # own terms from the independent pass, pairs from the shared pass less its own terms
        out["sh_var"] = (sq_in + sq_sh - sq_sign) / (L * d_in)
        out["sh_cov"] = ((tot_in - sq_in) + (tot_sh - sq_sh) - (tot_sign - sq_sign)) / (L * (L - 1.0) * d_in)
    return out


def _normal32(shape: tuple, generator: torch.Generator) -> torch.Tensor:
    """Standard-normal float32 draws (the numbers :func:`~sigprop.components.draws.standard_normal` makes, kept in
    float32)."""
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


def _sums(g: torch.Tensor, square_rest: float, total_rest: float) -> tuple[float, float]:
    """(Σ_k |g_k|², |Σ_k g_k|²) of an input gradient over the tokens, its first a coordinates from ``g`` and the
    others' expectations given."""
    g = g.double()
    return float((g * g).sum()) + square_rest, float(g.sum(0).pow(2).sum()) + total_rest


@lru_cache(maxsize=4096)
def _sample(var: float, corr: float, mean: float, d_in: int, d_k: int, L: int, sq: float, sk: float, sv: float,
            p: float, causal: bool, heads: int, queries: int, seed: int,
            rope: QueryKeyMap | None) -> SampledAttention:
    gen = torch.Generator().manual_seed(seed)
    m = min(queries, L)
    with torch.enable_grad():
        per = [_one_head(mean, var, corr, d_in, d_k, L, sq, sk, p, causal, m, rope, gen) for _ in range(heads)]

    def est(key: str, scale: float) -> tuple[float, float]:
        a = np.array([h[key] for h in per]) * scale
        return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a)))

    fields = {}
    for key, scale in (("fwd_var", sv * d_in), ("fwd_cov", sv * d_in), ("sh_var", sv * d_k), ("sh_cov", sv * d_k),
                       ("in_var", sv * d_k), ("in_cov", sv * d_k)):
        fields[key], fields[key + "_se"] = est(key, scale)
    return SampledAttention(fwd_mean=0.0, s2=float(np.mean([h["s2"] for h in per])), heads=heads, **fields)


def sample_bounded(var: float, corr: float, d_in: float, d_k: float, L: float, sigma_q2: float, sigma_k2: float,
                   sigma_v2: float, p: float = 0.0, causal: bool = False, mean: float = 0.0,
                   heads: int = 2, seed: int = 0, rope: float | QueryKeyMap | None = None,
                   queries: int = DEFAULT_QUERIES) -> SampledAttention:
    """The statistics of :func:`~sigprop.components.attention_sampled.sample_attention` (same arguments, same
    :class:`~sigprop.components.attention_sampled.SampledAttention`), estimated from ``heads`` heads of ``queries``
    query positions each in the 2·d_k coordinates that reach the scores (module docstring). Cached like it: the
    backward rule reuses the forward's draw. ``ValueError`` naming the argument on invalid input.

    Example:
        >>> s = sample_bounded(1.0, 0.3, d_in=512, d_k=32, L=256, sigma_q2=4e-4, sigma_k2=4e-4, sigma_v2=1 / 512,
        ...                    causal=True, heads=4, queries=8)
        >>> s.heads, s.fwd_var > 0.0
        (4, True)
    """
    mean, var, corr = checked_input(var, corr, mean)
    d_in, d_k, L, sq, sk, sv, p, heads = checked_head(d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p, heads)
    queries = int(queries)
    if queries < 2:
        raise ValueError(f"queries must be an integer >= 2 (got {queries})")
    return _sample(var, corr, mean, d_in, d_k, L, sq, sk, sv, p, bool(causal), heads, queries, int(seed),
                   query_key_map(rope))


def bounded_forward(m: Moments, d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat, sigma_v2: Stat,
                    p: Stat = 0.0, causal: bool = False,
                    heads: int = 2, seed: int = 0, rope: float | QueryKeyMap | None = None) -> Moments:
    """:func:`~sigprop.components.attention_sampled.sampled_forward` by :func:`sample_bounded`: output mean 0,
    variance and token correlation as the measurement defines them, hidden correlation 0. Arrays broadcast."""

    def one(mean: float, var: float, corr: float, di: float, dk: float, ll: float, sq: float, sk: float, sv: float,
            pp: float) -> tuple[float, float, float]:
        s = sample_bounded(var, corr, di, dk, ll, sq, sk, sv, pp, causal, mean, heads, seed, rope)
        return s.fwd_mean, s.fwd_var, min(max(s.fwd_cov / s.fwd_var, -1.0), 1.0)

    mean, var, corr = elementwise(one, m.mean, m.var, m.corr, d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p)
    return Moments(mean=mean, var=var, corr=clip_corr(corr), corr_hidden=0.0 * np.asarray(var))


def bounded_backward(g: GradMoments, m_in: Moments, d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat,
                     sigma_v2: Stat, p: Stat = 0.0,
                     causal: bool = False, heads: int = 2, seed: int = 0,
                     rope: float | QueryKeyMap | None = None) -> GradMoments:
    """:func:`~sigprop.components.attention_sampled.sampled_backward` by :func:`sample_bounded` (reusing the
    forward's draw when ``m_in`` is the forward's input)."""

    def one(mean: float, var: float, corr: float, di: float, dk: float, ll: float, sq: float, sk: float, sv: float,
            pp: float, gv: float, gc: float) -> tuple[float, float]:
        s = sample_bounded(var, corr, di, dk, ll, sq, sk, sv, pp, causal, mean, heads, seed, rope)
        v = gv * (gc * s.sh_var + (1.0 - gc) * s.in_var)
        c = gv * (gc * s.sh_cov + (1.0 - gc) * s.in_cov)
        return v, min(max(c / v, -1.0), 1.0)

    var, corr = elementwise(one, m_in.mean, m_in.var, m_in.corr, d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p,
                      g.var, g.corr)
    return GradMoments(var=var, corr=clip_corr(corr))
