"""Causal attention in closed form: the bidirectional rules of :mod:`sigprop.components.attention` for a query that
sees only its own and the earlier keys, averaged over positions as the measurement averages them.

Query i (positions 0 … L − 1) sees n_i = i + 1 keys, itself included: its softmax participation is
P2(n) = E Σ_{k≤i} A_ik² over n i.i.d. scores (the same quadrature, ``L → n``), and every statistic that holds one
query's own output gradient or its own output is the bidirectional one with L → n. What couples two queries is
rewritten for unequal key sets (notation of :mod:`sigprop.components.attention_theory`; n_max = max(n_i, n_j)):

* two queries i ≠ j share the keys k ≤ min(i, j); for such a key E[A_ik A_jk] ≈ E e^κ (1 − β/n_max)/(n_i n_j),
  β = (E e^κ − 1)(2e^{s²} − 1): the bidirectional pair weight, whose normaliser correction (the covariance of the
  two softmax denominators, which share n_min keys) is (e^κ − 1)/n_max;
* a key k's column sum C_k = Σ_{i≥k} Ã_ik then has, averaged over k (each pair (i, j) shares n_min keys),
  E C_k² = mean_n P2(n)/(1−p) + (2E e^κ/L)(S₁ − β S₂),  S₁ = Σ_{n≤L}(n − 1)/n = L − H_L,  S₂ = Σ_{n≤L}(n − 1)/n²;
  at large L that is 2 (the column sums of a causal mask, ∝ H_L − H_k, are spread like an exponential), against 1
  for bidirectional attention;
* the same pair count turns the bidirectional (1 − 1/L) of the cross-query key term into 2S₁/L, and the forward
  covariance's E e^κ/L into the average of 1/n_max over ordered pairs, 2S₁/(L(L − 1));
* sums over all keys stay exact: Σ_k C_k = Σ_i T_i, so E[C_k C_l] over ordered pairs k ≠ l is
  (L² + p/(1−p) Σ_n P2(n) − L E C_k²)/(L(L − 1)), and the independent gradient's covariance Σ_n(1 − P2(n))/(L(L − 1));
* the mean-shift terms τ a_i(1 − Σ_k A_ik²) of two queries give (1 − P2(n_i))(1 − P2(n_j)) averaged over pairs.

Position 0 (one key) is exact: its output is its own input through dropout (σ²/(1−p), no score path).

Output: the variance averaged over positions and the covariance averaged over the L(L − 1) ordered pairs (what
:mod:`sigprop.measurement` records and :mod:`~sigprop.components.attention_sampled` estimates); the exchangeable
state then carries one variance and one correlation for all positions (the decoder caveat of :mod:`sigprop.theory`).
At L = n for every query these formulas are the bidirectional ones up to the pair counts above.

Accuracy against the sampled rule (the Monte Carlo of the same model), ``bench/attention_causal.py``: see
:data:`sigprop.components.attention.CAUSAL_MAX_S2` for the domain where "auto" uses it. Assumes what the bidirectional
rules assume (Gaussian input, small scores), L ≥ 2.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import cast

import numpy as np

from ..core.moments import Stat
from .attention_theory import AttentionTerms, attention_terms, query_gradient, query_variance

__all__ = ["causal_forward", "causal_backward"]

#: The per-query terms over key counts, which key count is 1, the weights 1/L where n ≤ L, and L.
_Positions = tuple[AttentionTerms, np.ndarray, np.ndarray, np.ndarray]


def _positions(var: Stat, r: Stat, d_in: Stat, d_k: Stat, L: Stat, sqk2: Stat, p: Stat) -> _Positions:
    """The per-query terms over key counts n = 1 … max L (last axis) and the weights 1/L where n ≤ L; one
    configuration's are cached, so the backward rule reuses the forward's."""
    args = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (var, r, d_in, d_k, L, sqk2, p)))
    if args[0].ndim == 0:
        return _one_configuration(*(float(a) for a in args))
    return _configurations(*args)


@lru_cache(maxsize=4096)  # a backward sweep revisits every layer's input in reverse order
def _one_configuration(var: float, r: float, d_in: float, d_k: float, L: float, sqk2: float, p: float) -> _Positions:
    return _configurations(*(np.asarray(v) for v in (var, r, d_in, d_k, L, sqk2, p)))


def _configurations(var: np.ndarray, r: np.ndarray, d_in: np.ndarray, d_k: np.ndarray, L: np.ndarray,
                    sqk2: np.ndarray, p: np.ndarray) -> _Positions:
    n = np.arange(1.0, float(np.max(L)) + 1.0)
    ex = [v[..., None] for v in (var, r, d_in, d_k)]
    if n.size <= EXACT_KEY_COUNTS:
        t = attention_terms(ex[0], ex[1], ex[2], ex[3], n, sqk2[..., None], p[..., None])
    else:
        t = _interpolated_terms(ex, n, sqk2[..., None], p[..., None])
    first = n == 1.0
    t = replace(t, P2=np.where(first, 1.0, t.P2))  # one key: the softmax is 1
    weight = np.where(n <= L[..., None], 1.0 / L[..., None], 0.0)
    return t, first, weight, L


#: Longest sequence whose per-query terms are evaluated at every key count n = 1 … L; longer ones evaluate them at
#: :data:`_NODES` key counts and interpolate (:func:`_interpolated_terms`).
EXACT_KEY_COUNTS = 512
#: Key counts evaluated beyond the first 64 for a longer sequence (geometrically spaced up to L).
_NODES = 96


def _interpolated_terms(ex: list[np.ndarray], n: np.ndarray, sqk2: np.ndarray, p: np.ndarray) -> AttentionTerms:
    """The per-query terms at every key count n = 1 … L from the quadrature at n = 1 … 64 and at :data:`_NODES`
    geometrically spaced counts up to L: the softmax's P2, K and Q (the only terms that depend on n) interpolated by
    a cubic spline in log n of their logarithms, which are smooth (P2 ~ e^{s²}/n, Q ~ P2², K ~ P2(1 − 1/n) at small
    scores). The quadrature at every n costs O(L) Laplace integrals per layer; the spline against it at every key
    count of a 2048-token sequence: tests/components/test_attention_causal.py."""
    from dataclasses import fields

    from scipy.interpolate import CubicSpline

    last = n[-1]
    nodes = np.unique(np.concatenate((np.arange(1.0, 65.0), np.round(np.geomspace(64.0, last, _NODES)))))
    t = attention_terms(ex[0], ex[1], ex[2], ex[3], nodes, sqk2, p)
    shape = np.broadcast_shapes(np.shape(t.P2)[:-1] + (1,), n.shape)
    out = {}
    for f in fields(AttentionTerms):
        value = np.asarray(getattr(t, f.name))
        if f.name == "L":
            out[f.name] = np.broadcast_to(n, shape)
        elif f.name in ("P2", "K", "Q"):
            exact = n <= 64.0
            spline = CubicSpline(np.log(nodes[1:]), np.log(value[..., 1:]), axis=-1)
            out[f.name] = np.where(exact, value[..., np.minimum(n, 64.0).astype(int) - 1], np.exp(spline(np.log(n))))
        else:
            out[f.name] = np.broadcast_to(value[..., :1], shape)
    return AttentionTerms(**out)


def _first(v: Stat) -> np.ndarray:
    """A term at the first key count (the last axis of :func:`_configurations`' terms, which are arrays there)."""
    return cast(np.ndarray, v)[..., 0]


def _pair_weight(s2: Stat, kappa: Stat, ek: Stat, a: Stat, b: Stat) -> Stat:
    """E[A_ik A_jk] for queries with a ≤ b keys at a key k both see (module docstring): exponential tilting by
    s_ik + s_jk, then the second-order delta method in the two denominators, which share a keys."""
    tilt = np.exp(s2 + kappa)
    na, nb = a - 1.0 + tilt, b - 1.0 + tilt
    spread = np.expm1(s2)
    return ek / (na * nb) * (1.0 + spread * (a - 1.0 + tilt**2) / na**2 + spread * (b - 1.0 + tilt**2) / nb**2
                             + np.expm1(kappa) * (a - 1.0 + tilt**2) / (na * nb))


def _pair_sums(s2: Stat, kappa: Stat, ek: Stat, L: Stat) -> tuple[Stat, Stat]:
    """(Σ_{i≠j} n_min w_ij, Σ_{i≠j} (n_min − 1) w_ij) over ordered pairs of positions, w_ij = E[A_ik A_jk]: the
    shared keys' weight (the column sums' cross part, the forward covariance) and the key path's (whose factor
    1 − A_ik − A_jk + Σ_m A_im A_jm is 1 − 1/n_min at small scores). Elementwise over configurations.

    :func:`_pair_weight` is a sum of four products f(a)·g(b) of the two key counts a < b, so each double sum is
    Σ_b g(b) Σ_{a<b} f(a): a running sum, O(L) time and memory."""
    s2, kappa, ek, L = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (s2, kappa, ek, L)))
    shared, keys = np.empty(s2.shape), np.empty(s2.shape)
    for idx in np.ndindex(s2.shape):
        n = np.arange(1.0, L[idx] + 1.0)
        tilt = np.exp(s2[idx] + kappa[idx])
        spread, bend = np.expm1(s2[idx]), np.expm1(kappa[idx])
        nn, top = n - 1.0 + tilt, n - 1.0 + tilt**2
        # w(a, b) = ek [1/(na nb) + spread top_a/(na³ nb) + spread top_b/(na nb³) + bend top_a/(na² nb²)]
        first = (1.0 / nn, spread * top / nn**3, 1.0 / nn, bend * top / nn**2)
        second = (1.0 / nn, 1.0 / nn, spread * top / nn**3, 1.0 / nn**2)
        for out, weight in ((shared, n), (keys, n - 1.0)):
            total = 0.0
            for f, g in zip(first, second, strict=True):
                before = np.concatenate(([0.0], np.cumsum(weight * f)[:-1]))  # Σ_{a<b} weight(a) f(a)
                total += np.sum(g * before)
            out[idx] = 2.0 * ek[idx] * total
    return shared, keys


def _pair_mean(u: Stat, weight: np.ndarray, L: Stat) -> Stat:
    """Mean of u_i u_j over ordered pairs i ≠ j of positions (u over the last axis, ``weight`` = 1/L inside)."""
    total = np.sum(weight * u, -1) * L
    squares = np.sum(weight * u * u, -1) * L
    return (total**2 - squares) / (L * (L - 1.0))


def causal_forward(var: Stat, r: Stat, d_in: Stat, d_k: Stat, L: Stat, sqk2: Stat, p: Stat) -> tuple[Stat, Stat]:
    """(σ²_y, Cov_y)/(d_in σ²_v) of causal single-head attention, averaged over positions and ordered pairs
    (module docstring); ``var``, ``r``: the input's variance and token correlation after absorbing the mean."""
    t, first, weight, L = _positions(var, r, d_in, d_k, L, sqk2, p)
    own = np.where(first, t.sig2 / (1.0 - t.p), query_variance(t))
    v_o = np.sum(weight * own, -1)
    rho, tau, ek = _first(t.rho), _first(t.tau), _first(t.ekappa)
    shared, _ = _pair_sums(_first(t.s2), _first(t.kappa), ek, L)
    shift = tau**2 * _first(t.d) * _first(t.sqk2) * rho * _pair_mean(1.0 - t.P2, weight, L)
    c_o = rho + tau * shared / (L * (L - 1.0)) + shift
    return v_o, c_o


def causal_backward(var: Stat, r: Stat, d_in: Stat, d_k: Stat, L: Stat, sqk2: Stat, p: Stat, om: Stat,
                    rg: Stat) -> tuple[Stat, Stat]:
    """(σ²_gx, Cov_gx) of causal single-head attention at Ω = σ²_v d_k σ²_g = ``om`` and output-gradient token
    correlation ``rg``, averaged over positions and ordered pairs (module docstring)."""
    t, first, weight, L = _positions(var, r, d_in, d_k, L, sqk2, p)
    om, rg = np.broadcast_arrays(np.asarray(om, dtype=np.float64), np.asarray(rg, dtype=np.float64))
    own = query_gradient(t, om[..., None])
    zero = np.zeros_like(t.P2)
    keys = np.sum(weight * np.where(first, zero, own.keys), -1)
    queries = np.sum(weight * np.where(first, zero, own.queries), -1)
    values_keys = np.sum(weight * np.where(first, zero, own.values_keys), -1)

    p0, d = _first(t.p), _first(t.d)
    q = p0 / (1.0 - p0)
    ek, kappa, vkappa = _first(t.ekappa), _first(t.kappa), _first(t.vkappa)
    shared, key_pairs = _pair_sums(_first(t.s2), kappa, ek, L)
    p2_mean = np.sum(weight * t.P2, -1)
    ec2 = p2_mean / (1.0 - p0) + shared / L
    wc, wg = om * rg, om * (1.0 - rg)
    gv = (wc * ec2 + wg * p2_mean / (1.0 - p0)
          + keys + wc * (kappa + vkappa) * key_pairs / L
          + queries
          + values_keys + 2.0 * wc * kappa * shared / (L * d))
    ecc = (L * L + q * p2_mean * L - L * ec2) / (L * (L - 1.0))
    tau = _first(t.tau)
    gc = (wc * ecc + wg * (1.0 - p2_mean) / (L - 1.0)
          + wc * _first(t.sqk2) * tau**2 * d * _pair_mean(1.0 - t.P2, weight, L))
    return gv, gc
