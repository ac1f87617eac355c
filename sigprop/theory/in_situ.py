"""Each forward rule tested where the real model is: the seeds' mean output of a LayerNorm, an attention or an FFN
inside a Pre-LN encoder against the rule applied to the seeds' mean input (``bench/map_consistency.py``,
``docs/results/accuracy.md``, "Each rule at the model's own input").

Why. A whole-model comparison cannot tell a small bias of one rule from the seed-to-seed spread of a deep stream
(at depth 100 of ``fig4-dslm-pre`` the stream's token correlation differs by ~0.024 from one seed to the next). For
a rule f and the seeds' actual inputs X_s with Gram matrices G_s (per element, G = X Xᵀ/d), the sweep is unbiased
where E_s[truth(X_s)] = f(E_s[G_s]). Both sides follow the seeds' mean input, so Δ = mean_s truth(X_s) − f(mean_s G_s)
has a small spread: its standard error is the jackknife's over the seeds (f re-evaluated on each leave-one-out mean
with the same draws), plus f's own sampling error where f samples.

Truth per map, given the seed's actual input:

* LayerNorm: the seed's own output Gram (the norm is deterministic).
* Attention: the exact expectation over the layer's weights: W_V averaged exactly (σ²_v A X Xᵀ Aᵀ), W_Q, W_K and the
  attention dropout resampled on the actual rows X (:func:`exact_attention_gram`). The rule
  (:func:`~sigprop.components.attention_gram.gram_attention`) resamples X itself, with Gaussian rows of fixed length.
* FFN after its norm: the pre-activations W_1 x are exactly Gaussian given x, so the pairwise rules on the seed's own
  Gram are exact; Δ is what the seeds' spread of that Gram adds (a Jensen term).

Pooled as the measurement pools: diagonal mean = variance, off-diagonal mean = token covariance.
Assumes: a Pre-LN LayerNorm encoder (its attention and FFN read a norm's output), no padding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..components import attention_gram as ag
from ..components.attention import MultiHeadAttention
from ..components.layernorm import LayerNorm
from ..core.moments import Moments
from ..model.batch import Batch
from ..model.transformer import seeded_model
from ..walk.exchangeable import forward_moments
from .resolved import pairwise_forward

if TYPE_CHECKING:
    from ..model.config import TransformerConfig

__all__ = ["check_supported", "collect_seed_inputs", "exact_attention_gram", "pooled", "jackknife",
           "attention_delta", "layernorm_delta", "ffn_delta"]

SITES = ("stream", "attn_norm", "ffn_in", "ffn_norm")


class _Captured(Exception):
    """Raised by the last hook: the layers above are not needed."""


def check_supported(config: TransformerConfig) -> None:
    """Raise ``ValueError`` unless ``config`` is a Pre-LN LayerNorm encoder."""
    if config.arch != "encoder" or config.norm_position != "pre" or config.norm != "layernorm":
        raise ValueError("the in-situ rule tests need a Pre-LN LayerNorm encoder (its attention and FFN read a "
                         f"norm's output); got arch={config.arch}, norm_position={config.norm_position}, "
                         f"norm={config.norm}")


def pooled(gram: torch.Tensor, keep: torch.Tensor) -> np.ndarray:
    """(pooled diagonal, pooled off-diagonal) of a per-element Gram matrix (B, L, L) over the kept tokens."""
    diag, off = ag.pooled_gram_means(gram[:, None].double(), keep)
    return np.array([float(diag[0]), float(off[0])])


def with_corr(v: np.ndarray) -> np.ndarray:
    """(variance, covariance) → (variance, covariance, correlation)."""
    return np.array([v[0], v[1], v[1] / v[0]])


def mean_without(t: torch.Tensor, s: int | None) -> torch.Tensor:
    """Mean over the seeds (axis 0) of ``t``, leaving seed ``s`` out (None: all seeds)."""
    return t.mean(0) if s is None else (t.sum(0) - t[s]) / (len(t) - 1)


def jackknife(stats: np.ndarray, rule_without: Callable, f: Callable = lambda v: v) -> tuple[np.ndarray, np.ndarray]:
    """(Δ on all seeds, its jackknife standard error) for Δ = f(mean_s stats_s) − f(rule at the seeds' mean input);
    ``rule_without(s)`` is the rule on the inputs' mean without seed s (None: all seeds)."""
    n = len(stats)
    full = f(stats.mean(0)) - f(rule_without(None))
    reps = np.array([f((stats.sum(0) - stats[s]) / (n - 1)) - f(rule_without(s)) for s in range(n)])
    return full, np.sqrt((n - 1) / n * ((reps - reps.mean(0)) ** 2).sum(0))


def exact_attention_gram(mha: MultiHeadAttention, x: torch.Tensor, keep: torch.Tensor, heads: int,
                         seed: int) -> torch.Tensor:
    """E over W_Q, W_K, W_V and the attention dropout of one head's per-element output Gram (B, L, L), given the
    actual input rows ``x`` (B, L, d) of ``mha`` (its declared variances): W_V averaged exactly, the rest sampled,
    ``heads`` draws per sequence from ``seed``."""
    sq, sk, sv = (float(np.asarray(v)) for v in mha._declared())
    p, d_k = float(mha.dropout_p), mha.d_head
    B, L, d = x.shape
    blocked = ag.blocked_scores(keep, mha.causal)
    total = torch.zeros(B, L, L, dtype=torch.float64)
    for _, zq, zk, u in ag.head_draws(heads, L, d, d_k, p > 0.0, seed):
        o = ag.value_free_output(x.double()[:, None], zq, zk, u, sq, sk, d_k, p, blocked, getattr(mha, "rope", None))
        total += sv * (o @ o.transpose(-1, -2)).sum(1)
    return total / heads


def _gram(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().double()
    return t @ t.transpose(-1, -2) / t.shape[-1]


def _capture(got: dict[tuple[int, str], torch.Tensor], layer: int, name: str,
             last: bool) -> Callable[[nn.Module, tuple[torch.Tensor, ...], torch.Tensor], None]:
    """Forward hook of layer ``layer``'s ``name`` ("attn" / "ffn") norm: the Gram matrices of its input and output
    (and the attention norm's output rows) into ``got``; ``last`` stops the forward pass."""
    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        got[(layer, "stream" if name == "attn" else "ffn_in")] = _gram(inputs[0])
        got[(layer, f"{name}_norm")] = _gram(output)
        if name == "attn":
            got[(layer, "x")] = output.detach()
        if last:
            raise _Captured
    return hook


def collect_seed_inputs(config: TransformerConfig, batch: Batch | dict, layers: list[int], seeds: int, heads: int = 64,
                        progress: Callable[[int], None] | None = None) -> dict:
    """Run ``seeds`` models of ``config`` (weights from seed s, dropout masks as
    :func:`sigprop.measurement.seeds.measure_seeds` draws them, train mode) on ``batch`` up to the last of ``layers``
    and return, per layer, the seeds' per-element Gram matrices (seeds, B, L, L) at the input and output of each norm:
    ``(layer, "stream")`` → ``(layer, "attn_norm")`` and ``(layer, "ffn_in")`` → ``(layer, "ffn_norm")``; and ``(layer,
    "attn_exact")``: per seed, the pooled (variance, covariance) of :func:`exact_attention_gram` on the attention's
    actual input (``heads`` draws per sequence). ``progress(1)`` after each seed."""
    check_supported(config)
    layers = sorted(set(layers))
    if seeds < 3 or not layers or any(not 0 <= layer < config.n_layers for layer in layers):
        raise ValueError(f"seeds >= 3 and layers in [0, {config.n_layers}) are needed")
    batch = Batch.from_any(batch)
    keep = torch.ones(batch.inputs.shape, dtype=torch.bool)
    out: dict[tuple[int, str], list[Any]] = {(layer, s): [] for layer in layers for s in (*SITES, "attn_exact")}
    for seed in range(seeds):
        model = seeded_model(config, seed)
        got: dict[tuple[int, str], torch.Tensor] = {}
        hooks: list[RemovableHandle] = []
        for layer in layers:
            blocks: Any = model.layers[layer]  # a Pre-LN layer: its branches' norms by name
            for name, norm in (("attn", blocks.attn.branch.norm), ("ffn", blocks.ffn.branch.norm)):
                hooks.append(norm.register_forward_hook(_capture(got, layer, name, name == "ffn"
                                                                 and layer == layers[-1])))
        try:
            with torch.no_grad():
                model.loss(batch)
        except _Captured:
            pass
        finally:
            for h in hooks:
                h.remove()
        for layer in layers:
            for s in SITES:
                out[(layer, s)].append(got[(layer, s)])
            mha = cast(Any, model.layers[layer]).attn.branch.attn
            exact = exact_attention_gram(mha, got[(layer, "x")], keep, heads, seed=7_000 + seed)
            out[(layer, "attn_exact")].append(pooled(exact, keep))
        if progress is not None:
            progress(1)
    return {k: (np.array(v) if k[1] == "attn_exact" else torch.stack(v)) for k, v in out.items()}


def attention_delta(mha: MultiHeadAttention, ln_out_grams: torch.Tensor, exact: np.ndarray, keep: torch.Tensor,
                    heads: int,
                    draws: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Δ, SE, the seeds' mean) of (variance, covariance, correlation) for attention module ``mha`` (the theory
    model's, declared variances): ``exact`` (seeds, 2) from :func:`collect_seed_inputs` against the rule at the seeds'
    mean input Gram (fixed-length rows, ``heads`` per sequence). SE: jackknife ⊕ the rule's spread over ``draws``
    independent draws at the mean."""
    sq, sk, sv = (float(np.asarray(v)) for v in mha._declared())

    def rule(s: int | None, seed: int = 99) -> np.ndarray:
        res = ag.gram_attention(mean_without(ln_out_grams, s), mha.d_in, mha.d_head, sq, sk, sv,
                                float(mha.dropout_p), mha.causal, None, heads, seed, fixed_norm=True)
        return pooled(res.gram, keep)

    delta, se = jackknife(exact, rule, with_corr)
    spread = np.array([with_corr(rule(None, seed=99 + i)) for i in range(draws)]).std(0, ddof=1)
    return delta, np.hypot(se, spread), with_corr(exact.mean(0))


def layernorm_delta(norm: LayerNorm, in_grams: torch.Tensor, out_grams: torch.Tensor,
                    keep: torch.Tensor) -> tuple[np.ndarray, np.ndarray, float]:
    """(Δ, SE) of the pooled (diagonal, off-diagonal) of LayerNorm ``norm``'s output Gram against its pairwise rule
    at the seeds' mean input Gram, and the rule's own lowering of the pooled correlation there (the normalised mean
    Gram's pooled off-diagonal minus the rule's pooled correlation: the Olkin–Pratt term of d independent Gaussian
    features)."""
    stats = np.array([pooled(g, keep) for g in out_grams])

    def rule(s: int | None) -> np.ndarray:
        return pooled(pairwise_forward(norm.forward_moments, mean_without(in_grams, s)), keep)

    delta, se = jackknife(stats, rule)
    mean = in_grams.mean(0)
    root = torch.diagonal(mean, dim1=-2, dim2=-1).sqrt()
    at_mean = rule(None)
    lowering = pooled(mean / (root[..., :, None] * root[..., None, :]), keep)[1] - at_mean[1] / at_mean[0]
    return delta, se, float(lowering)


def ffn_delta(ffn_branch: nn.Module, ln_out_grams: torch.Tensor, keep: torch.Tensor) -> tuple[np.ndarray, np.ndarray,
              np.ndarray]:
    """(Δ, SE, the seeds' mean) of the pooled (variance, covariance) of the FFN branch after its norm
    (``ffn_branch``: the theory model's block, norm first): the rules on each seed's own input Gram (exact, the
    pre-activations being Gaussian given the input) against the rules at the seeds' mean input Gram."""
    after_norm = list(ffn_branch.children())[1:]

    def chain(m: Moments) -> Moments:
        for child in after_norm:
            m = forward_moments(child, m)
        return m

    def at(gram: torch.Tensor) -> np.ndarray:
        return pooled(pairwise_forward(chain, gram), keep)

    truth = np.array([at(g) for g in ln_out_grams])
    delta, se = jackknife(truth, lambda s: at(mean_without(ln_out_grams, s)))
    return delta, se, truth.mean(0)
