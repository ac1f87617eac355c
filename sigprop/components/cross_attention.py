"""Cross-attention (an encoder–decoder's decoder attending to the encoder output) and its moment rules, by sampling
(the construction of :mod:`sigprop.components.attention_sampled` with two inputs; Kedia et al. App. A.8 for the
single-input expectation, which the paper gives for self-attention only).

Module (per head): y = Dropout_p(softmax(X W_Q (Mem W_K)ᵀ/√d_k)) Mem W_V, with queries from the decoder's hidden
states X ∈ R^{L×d_in} and keys/values from the encoder output ("memory") Mem ∈ R^{L_m×d_in}; no mask between the
two sides (every query sees every real memory token).

Model. X and Mem are each Gaussian with their own mean, variance and token correlation (x_i = μ + c + δ_i, a shared
part plus an i.i.d. one, as in the self-attention rule) and are drawn independently of each other. That
independence is not an assumption about the hidden states (the decoder's do carry projections of the memory, and
both sides embed the same tokens): with W_Q and W_K independent, the scores' joint law given the inputs depends on
the Gram matrices X Xᵀ and Mem Memᵀ only, never on X Memᵀ, because W_Qᵀx_i and W_Kᵀm_k are independent Gaussian
vectors with covariances σ²_q X Xᵀ and σ²_k Mem Memᵀ. The output and both input gradients are functions of the
scores, Mem and W_V g, so their moments are exact in law under this model (the same Monte Carlo expectation as
the self-attention rule; W_V and the output gradient averaged exactly).

Rules (per element, mean over the sampled heads; shared/independent unit output gradients as in
:mod:`~sigprop.components.attention_sampled`, so every (σ²_g, r_g) is served by one draw):

* forward: mean 0, σ²_y = σ²_v d_in E|o_i|²/d_in, Cov_y over query pairs (o = Ã Mem);
* query gradient (to X, through the scores only): σ²_g[r_g V_sh + (1 − r_g)V_in], likewise the covariance;
* memory gradient (to Mem, through keys and values), over memory-token pairs, likewise.

Multi-head attention: the heads' gradients add with zero cross-covariance (independent zero-mean W_V per head), so
both gradients are ``n_heads`` times one head's. The memory's total gradient in a model is the sum over the
decoder layers' cross-attentions (their cross terms vanish in expectation over the independent W_V of each layer),
which :func:`sigprop.predict` accumulates.

Assumes: the self-attention rule's (Gaussian inputs with zero hidden correlation, initialisation-time independence
of weights and inputs, zero-mean output gradient independent of the forward pass), no padding in the memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import Rules
from .attention import MultiHeadAttention
from .attention_sampled import (
    DEFAULT_HEADS,
    SampledAttention,
    checked_head,
    checked_input,
    elementwise,
    estimate_fields,
    sample_heads,
)

__all__ = ["SampledCrossAttention", "sample_cross_attention", "cross_forward", "cross_backward",
           "cross_memory_backward", "CrossAttention"]


@dataclass(frozen=True)
class SampledCrossAttention(SampledAttention):
    """Per-element moments of one sampled cross-attention head (mean over heads) and their standard errors: the
    fields of :class:`~sigprop.components.attention_sampled.SampledAttention` (``fwd_*``: output, covariance over
    query pairs; ``sh_*`` / ``in_*``: the gradient at the query input) and ``mem_sh_*`` / ``mem_in_*``: the gradient
    at the memory (covariance over memory-token pairs), for a unit shared / unit independent output gradient.
    """

    mem_sh_var: float
    mem_sh_cov: float
    mem_in_var: float
    mem_in_cov: float
    mem_sh_var_se: float
    mem_sh_cov_se: float
    mem_in_var_se: float
    mem_in_cov_se: float


@lru_cache(maxsize=4096)
def _sample_cross(q: tuple[float, float, float], mem: tuple[float, float, float], d_in: int, d_k: int, L: int,
                  L_mem: int, sq: float, sk: float, sv: float, p: float, heads: int,
                  seed: int) -> SampledCrossAttention:
    e = sample_heads(q, mem, d_in, d_k, L, L_mem, sq, sk, sv, p, False, heads, seed)
    return SampledCrossAttention(fwd_mean=0.0, **estimate_fields(e, "f", "fwd_"), **estimate_fields(e, "sh", "sh_"),
                                 **estimate_fields(e, "in", "in_"),
                                 **estimate_fields(e, "kv_sh", "mem_sh_"), **estimate_fields(e, "kv_in", "mem_in_"),
                                 s2=e["s2"], heads=heads)


def sample_cross_attention(var: float, corr: float, mem_var: float, mem_corr: float, d_in: float, d_k: float, L: float,
                           L_mem: float, sigma_q2: float, sigma_k2: float, sigma_v2: float, p: float = 0.0,
                           mean: float = 0.0, mem_mean: float = 0.0, heads: int = DEFAULT_HEADS,
                           seed: int = 0) -> SampledCrossAttention:
    """Sample ``heads`` single cross-attention heads: queries from a Gaussian input of ``L`` tokens (``mean``,
    ``var``, token correlation ``corr``), keys and values from an independent one of ``L_mem`` tokens (``mem_*``);
    module docstring. Scalars only; cached (equal arguments return the same draw). ``ValueError`` names the
    argument on invalid input."""
    q = checked_input(var, corr, mean, "query input")
    mem = checked_input(mem_var, mem_corr, mem_mean, "memory")
    d_in, d_k, L, sq, sk, sv, p, heads = checked_head(d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p, heads)
    L_mem = int(check_range(L_mem, "memory length L_mem", lo=2.0, allowed="[2, inf)"))
    return _sample_cross(q, mem, d_in, d_k, L, L_mem, sq, sk, sv, p, heads, int(seed))


def _one(m: Moments, mem: Moments, args: tuple[Stat, ...], extra: tuple[Stat, ...],
         fn: Callable[..., tuple[float, ...]]) -> tuple[float, ...] | list[np.ndarray]:
    """Apply ``fn(sample, *extra)`` over the broadcast moments and head arguments (one draw per element)."""

    def call(mq: float, vq: float, cq: float, mm: float, vm: float, cm: float, di: float, dk: float, ll: float,
             lm: float, sq: float, sk: float, sv: float, pp: float, heads: float, seed: float,
             *rest: float) -> tuple[float, ...]:
        s = sample_cross_attention(vq, cq, vm, cm, di, dk, ll, lm, sq, sk, sv, pp, mq, mm, int(heads), int(seed))
        return fn(s, *rest)

    return elementwise(call, m.mean, m.var, m.corr, mem.mean, mem.var, mem.corr, *args, *extra)


def cross_forward(m: Moments, memory: Moments, d_in: Stat, d_k: Stat, L: Stat, L_mem: Stat, sigma_q2: Stat,
                  sigma_k2: Stat, sigma_v2: Stat, p: Stat = 0.0,
                  heads: int = DEFAULT_HEADS, seed: int = 0) -> Moments:
    """Output moments of single-head cross-attention (module docstring): mean 0, σ²_y and the token correlation
    over query pairs; hidden correlation 0. Arrays broadcast (one sampled configuration per element)."""
    args = (d_in, d_k, L, L_mem, sigma_q2, sigma_k2, sigma_v2, p, heads, seed)
    var, corr = _one(m, memory, args, (), lambda s: (s.fwd_var, s.fwd_cov / s.fwd_var))
    zero = 0.0 * np.asarray(var)
    return Moments(mean=zero, var=var, corr=clip_corr(corr), corr_hidden=zero)


def _gradient(g: GradMoments, m_in: Moments, memory: Moments, args: tuple[Stat, ...], side: str) -> GradMoments:
    """σ²_g[r_g V_sh + (1 − r_g)V_in] and the same for the covariance, with the shared / independent unit-gradient
    moments of ``side`` ("" = the query input, "mem_" = the memory)."""

    def fn(s: SampledCrossAttention, gv: float, gc: float) -> tuple[float, float]:
        part = {k: getattr(s, f"{side}{k}") for k in ("sh_var", "sh_cov", "in_var", "in_cov")}
        v = gv * (gc * part["sh_var"] + (1.0 - gc) * part["in_var"])
        c = gv * (gc * part["sh_cov"] + (1.0 - gc) * part["in_cov"])
        return v, c / v

    var, corr = _one(m_in, memory, args, (g.var, g.corr), fn)
    return GradMoments(var=var, corr=clip_corr(corr))


def cross_backward(g: GradMoments, m_in: Moments, memory: Moments, d_in: Stat, d_k: Stat, L: Stat, L_mem: Stat,
                   sigma_q2: Stat, sigma_k2: Stat, sigma_v2: Stat, p: Stat = 0.0, heads: int = DEFAULT_HEADS,
                   seed: int = 0) -> GradMoments:
    """Moments of the gradient at the query input X (through the scores): σ²_g[r_g V_sh + (1 − r_g)V_in] and the
    same for the covariance (module docstring)."""
    return _gradient(g, m_in, memory, (d_in, d_k, L, L_mem, sigma_q2, sigma_k2, sigma_v2, p, heads, seed), "")


def cross_memory_backward(g: GradMoments, m_in: Moments, memory: Moments, d_in: Stat, d_k: Stat, L: Stat, L_mem: Stat,
                          sigma_q2: Stat, sigma_k2: Stat, sigma_v2: Stat, p: Stat = 0.0, heads: int = DEFAULT_HEADS,
                          seed: int = 0) -> GradMoments:
    """Moments of the gradient at the memory (through keys and values), over memory-token pairs, likewise (module
    docstring)."""
    return _gradient(g, m_in, memory, (d_in, d_k, L, L_mem, sigma_q2, sigma_k2, sigma_v2, p, heads, seed), "mem_")


class CrossAttention(MultiHeadAttention):
    """Multi-head attention whose keys and values come from ``memory`` (the encoder output); never causal.

    Moment rules (module docstring) take the memory's moments ``memory_moments`` and its length ``L_memory``
    (default: ``L``) as context, and the sampled rule's ``attention_heads`` / ``attention_seed``.
    :meth:`memory_backward_moments` gives the gradient at the memory, :meth:`backward_moments` at the queries.
    """

    rules = Rules(context=frozenset({"L", "attention_heads", "attention_seed", "memory_moments", "L_memory"}),
                  inputs=frozenset({"memory", "memory_padding_mask"}), mixes_tokens=True, memory=True, sampled=True)

    def __init__(self, d_in: int, n_heads: int, d_head: int, **kwargs: Any) -> None:
        if kwargs.get("causal"):
            raise ValueError("cross-attention is not causal: every query sees the whole memory")
        super().__init__(d_in, n_heads, d_head, **kwargs)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,  # type: ignore[override]  # memory, not x_kv
                memory_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if memory is None:
            raise ValueError("cross-attention needs the encoder output: pass memory=")
        return super().forward(x, x_kv=memory, key_padding_mask=memory_padding_mask)

    def _args(self, L: Stat, L_memory: Stat | None, attention_heads: int,
              attention_seed: int) -> tuple[tuple[int, int, Stat, Stat, Stat, Stat, Stat, float], int, int]:
        """The rules' head arguments (widths, lengths, declared variances, dropout), heads and seed."""
        sq, sk, sv = self._declared()
        self.rule_used = "sampled"
        return ((self.d_in, self.d_head, L, L if L_memory is None else L_memory, sq, sk, sv, self.dropout_p),
                attention_heads, attention_seed)

    @staticmethod
    def _memory(memory_moments: Moments | None) -> Moments:
        if not isinstance(memory_moments, Moments):
            raise ValueError("cross-attention's moment rules need the encoder output's moments: pass "
                             "memory_moments= (a Moments)")
        return memory_moments

    def forward_moments(self, m: Moments, L: Stat,  # type: ignore[override]  # the memory's context added
                        memory_moments: Moments | None = None, L_memory: Stat | None = None,
                        attention_heads: int = DEFAULT_HEADS, attention_seed: int = 0) -> Moments:
        """:func:`cross_forward` with the module's declared sigmas (every element belongs to one head)."""
        mem = self._memory(memory_moments)
        head, heads, seed = self._args(L, L_memory, attention_heads, attention_seed)
        return cross_forward(m, mem, *head, heads=heads, seed=seed)

    def backward_moments(self, g: GradMoments, m_in: Moments, L: Stat,  # type: ignore[override]  # the memory's
                         memory_moments: Moments | None = None, L_memory: Stat | None = None,
                         attention_heads: int = DEFAULT_HEADS, attention_seed: int = 0) -> GradMoments:
        """Gradient at the queries: ``n_heads`` × :func:`cross_backward` (heads add independently)."""
        mem = self._memory(memory_moments)
        head, heads, seed = self._args(L, L_memory, attention_heads, attention_seed)
        one = cross_backward(g, m_in, mem, *head, heads=heads, seed=seed)
        return GradMoments(var=self.n_heads * one.var, corr=one.corr)

    def memory_backward_moments(self, g: GradMoments, m_in: Moments, L: Stat, memory_moments: Moments | None = None,
                                L_memory: Stat | None = None, attention_heads: int = DEFAULT_HEADS,
                                attention_seed: int = 0) -> GradMoments:
        """Gradient at the memory: ``n_heads`` × :func:`cross_memory_backward`."""
        mem = self._memory(memory_moments)
        head, heads, seed = self._args(L, L_memory, attention_heads, attention_seed)
        one = cross_memory_backward(g, m_in, mem, *head, heads=heads, seed=seed)
        return GradMoments(var=self.n_heads * one.var, corr=one.corr)
