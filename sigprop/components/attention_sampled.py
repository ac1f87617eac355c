"""Attention moments by sampling: the expectation that the closed-form attention rules expand, evaluated by Monte
Carlo over the weights and the Gaussian input, at any score scale and with causal masking (Kedia et al. App. A.8;
the closed form is :mod:`sigprop.components.attention`).

Model (the closed form's, without its small-score expansion). Per sampled head h = 1 … S and token k = 1 … L:
x_k = μ + c + δ_k with c ~ N(0, rσ²) shared by the sequence and δ_k ~ N(0, (1 − r)σ²) i.i.d. (per unit, no hidden
correlation); W_Q, W_K, W_V ∈ R^{d_in×d_k} with i.i.d. N(0, σ²_q), N(0, σ²_k), N(0, σ²_v) entries;
y = Dropout_p(softmax(X W_Q (X W_K)ᵀ/√d_k + causal mask)) X W_V. The statistics are those of
:mod:`sigprop.measurement`: the mean and variance of one element over heads, tokens and units, and the token
covariance averaged over the L(L − 1) ordered token pairs of a head (for causal attention, where positions differ,
the same average over positions as the measurement takes).

Backward. The input gradient ∂/∂X ⟨G, y⟩ is linear in the output gradient G, so its second moments are linear in
G's covariance σ²_g[r_g 11ᵀ + (1 − r_g) I] (per unit): with the moments V_sh, C_sh for a unit shared gradient
(G_k = γ for every k) and V_in, C_in for a unit independent one (G_k i.i.d.),

    σ²_gx = σ²_g [r_g V_sh + (1 − r_g) V_in],     Cov_gx = σ²_g [r_g C_sh + (1 − r_g) C_in]      (exact in law),

so one forward pass and two backward passes per configuration serve every output gradient. All four paths
(values, keys, queries, and the softmax Jacobian) are included because autograd differentiates the sampled layer.

Accuracy. Unbiased for the variances and covariances; a correlation is a ratio of two unbiased means (bias
O(1/S)). The standard error over heads is returned with every estimate (:func:`sample_attention`) and is what the
tests' tolerances are built from. Float64 throughout (the draws themselves are generated in float32,
:func:`~sigprop.components.draws.standard_normal`); a fixed seed makes a result reproducible, and
:func:`sigprop.predict` gives every layer a seed of its own (:func:`~sigprop.components.draws.layer_seed`).
Cost: O(S·L·d_in·d_k + S·L²·d_k) per configuration; results are cached, so the backward rule reuses the forward's
draw.

Assumes: Gaussian input with token correlation r ∈ [0, 1] and zero hidden correlation (``corr_hidden`` is ignored,
as in the closed form); weights independent of the input (initialisation); the output gradient zero-mean and
independent of the forward pass. Valid at every score variance (the closed form: s² ≲ 2) and for causal masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from .draws import DEFAULT_HEADS, standard_normal, uniform
from .query_key import QueryKeyMap, query_key_map

__all__ = ["SampledAttention", "sample_attention", "sample_heads", "estimate_fields", "sampled_forward",
           "sampled_backward", "checked_input", "checked_head", "elementwise"]

_CHUNK = 32  # heads per autograd pass (bounds memory at S·L² floats per chunk)


@dataclass(frozen=True)
class SampledAttention:
    """Per-element moments of one sampled attention head (mean over heads) and their standard errors.

    ``fwd_*``: output mean, variance and token covariance. ``sh_*`` / ``in_*``: input-gradient variance and token
    covariance for a unit shared / unit independent output gradient (module docstring). ``*_se``: standard errors
    over the ``heads`` sampled heads. ``s2``: the mean score variance over keys of one query (the closed form's s²),
    as sampled.
    """

    fwd_mean: float
    fwd_var: float
    fwd_cov: float
    sh_var: float
    sh_cov: float
    in_var: float
    in_cov: float
    fwd_var_se: float
    fwd_cov_se: float
    sh_var_se: float
    sh_cov_se: float
    in_var_se: float
    in_cov_se: float
    s2: float
    heads: int


def _head_stats(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head (leading axis): mean square and mean token covariance (over ordered pairs) of ``c`` (S, L, D)."""
    L = c.shape[1]
    sq = (c * c).mean(dim=(1, 2))
    tot = c.sum(dim=1)
    cov = ((tot * tot).mean(dim=1) - sq * L) / (L * (L - 1.0))
    return sq, cov


#: Base draws up to this many float64 numbers are kept for the next call with the same sizes and seed; larger ones
#: are drawn per call.
_CACHE_NUMBERS = 40_000_000


#: One chunk of heads' draws by name (standard normals, and the uniforms "u" of dropout or None).
_Draws = dict[str, Any]


def _draw_base(heads: int, L: int, d_in: int, d_k: int, p_used: bool, seed: int, L_kv: int = 0) -> list[_Draws]:
    """Standard-normal (and uniform, for dropout) draws for ``heads`` heads, in chunks; scaled per configuration.
    ``L_kv`` > 0 adds a separate key/value input of ``L_kv`` tokens (cross-attention)."""
    gen = torch.Generator().manual_seed(seed)
    chunks, done = [], 0
    while done < heads:
        n = min(_CHUNK, heads - done)
        chunk = {"c": standard_normal((n, 1, d_in), gen), "delta": standard_normal((n, L, d_in), gen),
                 "zq": standard_normal((n, d_in, d_k), gen), "zk": standard_normal((n, d_in, d_k), gen),
                 "u": uniform((n, L, L_kv or L), gen) if p_used else None,
                 "w_sh": standard_normal((n, 1, d_in), gen).expand(n, L, d_in),
                 "w_in": standard_normal((n, L, d_in), gen)}
        if L_kv:
            chunk["c_kv"], chunk["delta_kv"] = standard_normal((n, 1, d_in), gen), standard_normal((n, L_kv, d_in), gen)
        chunks.append(chunk)
        done += n
    return chunks


_draw_base_cached = lru_cache(maxsize=1)(_draw_base)


def _base(heads: int, L: int, d_in: int, d_k: int, p_used: bool, seed: int, L_kv: int = 0) -> list[_Draws]:
    numbers = heads * (L * (2 * d_in + ((L_kv or L) if p_used else 0)) + 2 * d_in * d_k + L_kv * d_in)
    fn = _draw_base_cached if numbers <= _CACHE_NUMBERS else _draw_base
    return fn(heads, L, d_in, d_k, p_used, seed, L_kv)


def _gaussian_input(c: torch.Tensor, delta: torch.Tensor, mean: float, var: float, corr: float) -> torch.Tensor:
    """x_k = μ + √(rσ²) c + √((1 − r)σ²) δ_k (module docstring), requiring grad."""
    x = mean + math.sqrt(corr * var) * c + math.sqrt((1.0 - corr) * var) * delta
    return x.requires_grad_(True)


def _value_free_output(x: torch.Tensor, x_kv: torch.Tensor, z: _Draws, d_k: int, sq: float, sk: float, p: float,
                       causal: bool, rope: float | QueryKeyMap | None = None) -> tuple[torch.Tensor, float]:
    """The value-free output O = Ã X_kv of a chunk of heads (W_V is averaged exactly, module docstring) and the
    mean per-query score variance; ``rope``: rotary base or query–key map (:func:`query_key_map`), or None."""
    q, k = x @ (math.sqrt(sq) * z["zq"]), x_kv @ (math.sqrt(sk) * z["zk"])
    qk = query_key_map(rope)
    if qk is not None:
        q, k = qk(q), qk(k)
    s = q @ k.transpose(-1, -2) / math.sqrt(d_k)
    s2 = float(s.detach().var(dim=-1).mean())
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.softmax(s, dim=-1)
    if p > 0.0:
        a = a * (z["u"] >= p).to(torch.float64) / (1.0 - p)
    return a @ x_kv, s2


def sample_heads(q: tuple[float, float, float], kv: tuple[float, float, float] | None, d_in: int, d_k: int, L: int,
                 L_kv: int, sq: float, sk: float, sv: float, p: float, causal: bool, heads: int, seed: int,
                 rope: float | QueryKeyMap | None = None) -> dict[str, Any]:
    """Per-element moment estimates (mean over heads, standard error) of the sampled heads: forward ("f"), and the
    query-input ("sh"/"in") and, for a separate key/value input ``kv``, key/value-input ("kv_sh"/"kv_in") gradient
    for a unit shared / independent output gradient; each as {"var": (est, se), "cov": (est, se)}. ``q`` and ``kv``
    are (mean, var, corr) triples; ``kv=None`` is self-attention (keys and values from the query input). The
    arguments after them are those of :func:`sample_attention` (``L_kv``: the keys' length); also used by
    :mod:`~sigprop.components.cross_attention`.

    Returns:
        {"f", "sh", "in"[, "kv_sh", "kv_in"]: {"var": (estimate, standard error), "cov": (…)}, "s2": the mean score
        variance per head}.
    """
    keys = ("f", "sh", "in") + (("kv_sh", "kv_in") if kv is not None else ())
    per: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {k: [] for k in keys}
    s2_sum = 0.0
    with torch.enable_grad():
        for z in _base(heads, L, d_in, d_k, p > 0.0, seed, L_kv if kv is not None else 0):
            x = _gaussian_input(z["c"], z["delta"], *q)
            x_kv = x if kv is None else _gaussian_input(z["c_kv"], z["delta_kv"], *kv)
            o, s2 = _value_free_output(x, x_kv, z, d_k, sq, sk, p, causal, rope)
            inputs = (x,) if kv is None else (x, x_kv)
            g_sh = torch.autograd.grad(o, inputs, z["w_sh"], retain_graph=True)
            g_in = torch.autograd.grad(o, inputs, z["w_in"])
            per["f"].append(_head_stats(o.detach()))
            per["sh"].append(_head_stats(g_sh[0]))
            per["in"].append(_head_stats(g_in[0]))
            if kv is not None:
                per["kv_sh"].append(_head_stats(g_sh[1]))
                per["kv_in"].append(_head_stats(g_in[1]))
            s2_sum += s2 * x.shape[0]

    def est(key: str, i: int) -> tuple[float, float]:
        # E over W_V: E[y_ij y_lj] = σ²_v o_i·o_l; w = W_V g has per-element covariance σ²_v d_k σ²_g R (σ²_g = 1)
        a = torch.cat([t[i] for t in per[key]]).numpy() * (sv * (d_in if key == "f" else d_k))
        return float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a)))

    out: dict[str, Any] = {k: {"var": est(k, 0), "cov": est(k, 1)} for k in keys}
    out["s2"] = s2_sum / heads
    return out


def estimate_fields(est: dict[str, Any], key: str, prefix: str) -> dict[str, float]:
    """One estimate of :func:`sample_heads`' output as the fields of a sampled rule's record.

    Args:
        est: :func:`sample_heads`' output.
        key: which estimate ("f", "sh", "in", "kv_sh", "kv_in").
        prefix: the record's field prefix ("fwd_", "sh_", …).

    Returns:
        {prefix + "var", prefix + "cov", prefix + "var_se", prefix + "cov_se"}: the estimates and their standard
        errors.

    Example:
        >>> estimate_fields({"f": {"var": (1.0, 0.1), "cov": (0.5, 0.05)}}, "f", "fwd_")
        {'fwd_var': 1.0, 'fwd_cov': 0.5, 'fwd_var_se': 0.1, 'fwd_cov_se': 0.05}
    """
    return {f"{prefix}var": est[key]["var"][0], f"{prefix}cov": est[key]["cov"][0],
            f"{prefix}var_se": est[key]["var"][1], f"{prefix}cov_se": est[key]["cov"][1]}


@lru_cache(maxsize=4096)
def _sample(var: float, corr: float, mean: float, d_in: int, d_k: int, L: int, sq: float, sk: float, sv: float,
            p: float, causal: bool, heads: int, seed: int, rope: QueryKeyMap | None = None) -> SampledAttention:
    e = sample_heads((mean, var, corr), None, d_in, d_k, L, L, sq, sk, sv, p, causal, heads, seed, rope)
    return SampledAttention(fwd_mean=0.0, **estimate_fields(e, "f", "fwd_"), **estimate_fields(e, "sh", "sh_"),
                            **estimate_fields(e, "in", "in_"), s2=e["s2"], heads=heads)


def checked_input(var: float, corr: float, mean: float, what: str = "input") -> tuple[float, float, float]:
    """The moments of a sampled rule's Gaussian input, validated: every sampled attention rule
    (:func:`sample_attention`, the bounded and the cross-attention rules) checks its input here.

    Args:
        var: the per-element variance, > 0.
        corr: the token correlation, in [0, 1] (a shared plus an independent part).
        mean: the per-element mean, finite.
        what: the input's name in the messages ("input", "query input", "memory").

    Returns:
        (mean, var, corr) as floats.

    Raises:
        ValueError: naming the field outside its domain.

    Example:
        >>> checked_input(2.0, 0.5, 0.0)
        (0.0, 2.0, 0.5)
    """
    var = check_range(var, f"{what} variance", lo=0.0, lo_open=True, allowed="(0, inf)")
    corr = check_range(corr, f"{what} token correlation (Moments.corr)", lo=0.0, hi=1.0,
                       allowed="[0, 1] (the input is a shared plus an independent part)")
    return check_range(mean, f"{what} mean"), var, corr


def checked_head(d_in: float, d_k: float, L: float, sigma_q2: float, sigma_k2: float, sigma_v2: float, p: float,
                 heads: int) -> tuple[int, int, int, float, float, float, float, int]:
    """A sampled head's sizes, weight variances, dropout and sample size, validated: every sampled attention rule
    checks its head here.

    Args:
        d_in: the input width, an integer >= 1.
        d_k: the head width, an integer >= 1.
        L: the sequence length, >= 2.
        sigma_q2: the query weights' variance, > 0.
        sigma_k2: the key weights' variance, > 0.
        sigma_v2: the value weights' variance, > 0.
        p: the attention dropout, in [0, 1).
        heads: the heads sampled, an integer >= 2 (a standard error needs two).

    Returns:
        (d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p, heads), the sizes as integers.

    Raises:
        ValueError: naming the field outside its domain.

    Example:
        >>> checked_head(64, 16, 32, 1e-3, 1e-3, 1 / 64, 0.0, 8)
        (64, 16, 32, 0.001, 0.001, 0.015625, 0.0, 8)
    """
    d_in = int(check_range(d_in, "d_in", lo=1.0, allowed="integers >= 1"))
    d_k = int(check_range(d_k, "d_k", lo=1.0, allowed="integers >= 1"))
    L = int(check_range(L, "sequence length L", lo=2.0, allowed="[2, inf)"))
    sq = check_range(sigma_q2, "sigma_q2", lo=0.0, lo_open=True, allowed="(0, inf)")
    sk = check_range(sigma_k2, "sigma_k2", lo=0.0, lo_open=True, allowed="(0, inf)")
    sv = check_range(sigma_v2, "sigma_v2", lo=0.0, lo_open=True, allowed="(0, inf)")
    p = check_range(p, "dropout p", lo=0.0, hi=1.0, hi_open=True)
    heads = int(check_range(heads, "heads", lo=2.0, allowed="integers >= 2"))
    return d_in, d_k, L, sq, sk, sv, p, heads


def sample_attention(var: float, corr: float, d_in: float, d_k: float, L: float, sigma_q2: float, sigma_k2: float,
                     sigma_v2: float, p: float = 0.0, causal: bool = False, mean: float = 0.0,
                     heads: int = DEFAULT_HEADS, seed: int = 0,
                     rope: float | QueryKeyMap | None = None) -> SampledAttention:
    """Sample ``heads`` single attention heads on Gaussian input of per-element variance ``var``, token correlation
    ``corr`` and mean ``mean`` (module docstring) and return the moments with their standard errors.

    Scalars only (see :func:`sampled_forward` for arrays). Cached: a repeated call with equal arguments returns the
    same draw. ``rope``: the rotary base of a RoPE model (:mod:`~sigprop.components.rope`; positions 0 … L − 1),
    a :class:`~sigprop.components.query_key.QueryKeyMap` (QK-norm, partial rotation), or None. Raises
    ``ValueError`` naming the argument on invalid input.
    """
    mean, var, corr = checked_input(var, corr, mean)
    d_in, d_k, L, sq, sk, sv, p, heads = checked_head(d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p, heads)
    rope = query_key_map(rope)
    return _sample(var, corr, mean, d_in, d_k, L, sq, sk, sv, p, bool(causal), heads, int(seed), rope)


def elementwise(fn: Callable[..., tuple[float, ...]], *arrays: Stat) -> tuple[float, ...] | list[np.ndarray]:
    """Apply the scalar rule ``fn`` elementwise over the broadcast ``arrays`` (one sampled configuration per
    element): how every sampled attention rule's array form calls its scalar form.

    Args:
        fn: a function of one float per array, returning a tuple of floats.
        arrays: the arguments, broadcast against each other.

    Returns:
        ``fn``'s tuple for scalar arguments; else one array per element of that tuple, of the broadcast shape.

    Example:
        >>> elementwise(lambda a, b: (a + b, a * b), [1.0, 2.0], 3.0)
        [array([4., 5.]), array([3., 6.])]
    """
    b = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in arrays))
    outs = [fn(*(float(a[idx]) for a in b)) for idx in np.ndindex(b[0].shape)]
    if b[0].ndim == 0:
        return outs[0]
    return [np.array([o[i] for o in outs]).reshape(b[0].shape) for i in range(len(outs[0]))]


def sampled_forward(m: Moments, d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat, sigma_v2: Stat,
                    p: Stat = 0.0, causal: bool = False,
                    heads: int = DEFAULT_HEADS, seed: int = 0, rope: float | QueryKeyMap | None = None) -> Moments:
    """Output moments of single-head attention by sampling (module docstring): mean, variance and token
    correlation as the measurement defines them; hidden correlation 0 (independent W_V columns). Arrays broadcast
    (one sampled configuration per element)."""

    def one(mean: float, var: float, corr: float, di: float, dk: float, ll: float, sq: float, sk: float, sv: float,
            pp: float) -> tuple[float, float, float]:
        s = sample_attention(var, corr, di, dk, ll, sq, sk, sv, pp, causal, mean, heads, seed, rope)
        return s.fwd_mean, s.fwd_var, s.fwd_cov / s.fwd_var

    mean, var, corr = elementwise(one, m.mean, m.var, m.corr, d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p)
    return Moments(mean=mean, var=var, corr=clip_corr(corr), corr_hidden=0.0 * np.asarray(var))


def sampled_backward(g: GradMoments, m_in: Moments, d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat,
                     sigma_v2: Stat, p: Stat = 0.0,
                     causal: bool = False, heads: int = DEFAULT_HEADS, seed: int = 0,
                     rope: float | QueryKeyMap | None = None) -> GradMoments:
    """Input-gradient moments of single-head attention by sampling, through values, keys and queries:
    σ²_gx = σ²_g[r_g V_sh + (1 − r_g)V_in], Cov = σ²_g[r_g C_sh + (1 − r_g)C_in] (module docstring). Reuses the
    forward's draw when ``m_in`` is the forward's input."""

    def one(mean: float, var: float, corr: float, di: float, dk: float, ll: float, sq: float, sk: float, sv: float,
            pp: float, gv: float, gc: float) -> tuple[float, float]:
        s = sample_attention(var, corr, di, dk, ll, sq, sk, sv, pp, causal, mean, heads, seed, rope)
        v = gv * (gc * s.sh_var + (1.0 - gc) * s.in_var)
        c = gv * (gc * s.sh_cov + (1.0 - gc) * s.in_cov)
        return v, c / v

    var, corr = elementwise(one, m_in.mean, m_in.var, m_in.corr, d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p,
                      g.var, g.corr)
    return GradMoments(var=var, corr=clip_corr(corr))
