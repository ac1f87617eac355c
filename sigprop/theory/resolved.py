"""Token-resolved forward theory: each sequence's token Gram matrix carried through the module tree.

The exchangeable state (:class:`~sigprop.moments.Moments`) gives every token pair one correlation. Here the state of a
site is, per sequence of the batch, the per-element Gram matrix G_jl = E[x_j^a x_l^a] over the weights (B × L × L,
zero mean, no hidden correlation), starting from the batch's own token ids (:meth:`Embedding.gram`: a repeated id,
[MASK] included, shares its embedding row) or a patch model's images (:meth:`PatchEmbedding.gram`: the patches'
inner products). Each component maps it with the rule it already has:

* a *token-wise* component (norm, linear, activation, FFN, dropout) acts on each token alone, so the joint law of
  its outputs at tokens j and l depends only on the pair's (G_jj, G_ll, G_jl): its exchangeable rule, applied to
  every pair at once (the rules are vectorised) with variance √(G_jj G_ll) and correlation G_jl/√(G_jj G_ll), gives
  the pair's output correlation, and the diagonal gives each token's output variance (a pair rule at r = 1 is the
  rule for two *different* tokens with identical inputs, which dropout decorrelates, so the diagonal is taken from
  the variance, never from r = 1). Exact wherever the exchangeable rule is, for equal token variances; for unequal
  ones the pair uses their geometric mean (every rule here sees a normalised input in Pre-LN and Post-LN);
* attention mixes tokens: :meth:`MultiHeadAttention.gram_forward` (:mod:`~sigprop.components.attention_gram`), told
  whether its input rows have a fixed length (they do after LayerNorm and RMSNorm: Pre-LN's branch norm, Post-LN's
  previous layer norm; they do not after DyT/Derf, no norm, or the embedding);
* the residual y = λx + βf: G_y = λ²G_x + β²G_f (the branch ends in a zero-mean weight matrix, so its output is
  uncorrelated with the skip path, pair by pair: :func:`~sigprop.components.residual.residual_forward`);
* a Post-LN norm whose residual's skip input is itself a norm output uses the norm's post-norm rule pairwise, as
  :func:`sigprop.predict` does.

The site statistics are then pooled as :mod:`sigprop.measurement` pools them: the variance is the mean diagonal
entry over the real tokens, the token covariance the mean off-diagonal entry over the real token pairs within each
sequence, the correlation their ratio (:func:`gram_moments`).

What it adds (measured in docs/accuracy.md, "The token-resolved forward state"): attention, the only component that
is not token-wise, responds to the spread of the pair correlations and to position (a causal mask), not only to their
mean.
Assumes: the components' own assumptions (Gaussian given the Gram matrix, weights independent of the input), zero-mean
sites (true at every site of a transformer at initialisation: each branch ends in a zero-mean linear layer). Encoder
(token or patch input) and decoder stacks of standard softmax attention; cross-attention and shaped attention have no
Gram rule yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..components.attention import MultiHeadAttention
from ..components.attention_gram import DEFAULT_GRAM_HEADS, pooled_gram_means
from ..components.draws import layer_context
from ..components.layernorm import LayerNorm
from ..components.residual import Residual
from ..components.rmsnorm import RMSNorm
from ..components.sequential import call_rule
from ..core.moments import GradMoments, Moments

__all__ = ["pairwise_forward", "pairwise_backward", "pairwise_postnorm_backward", "gram_moments", "resolved_forward",
           "forward_sweep", "ForwardSweep", "resolved_supported"]


def _pair_stats(gram: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per token pair of ``gram`` (B, L, L): variance √(G_jj G_ll) and correlation G_jl/√(G_jj G_ll) (arrays of
    shape (B, L, L)), and which tokens have a non-zero diagonal (B, L). A token with a zero diagonal gets unit
    variance and correlation 0 in its pairs."""
    g = gram.numpy()
    diag = np.diagonal(g, axis1=-2, axis2=-1)
    live = diag > 0
    s = np.sqrt(np.where(live, diag, 1.0))
    v = s[:, :, None] * s[:, None, :]
    corr = np.where(live[:, :, None] & live[:, None, :], np.clip(g / v, -1.0, 1.0), 0.0)
    return v, corr, live


def _pair_moments(gram: torch.Tensor, corr_hidden: float = 0.0) -> Moments:
    """The exchangeable state of every token pair of a forward Gram matrix (:func:`_pair_stats`), hidden correlation
    ``corr_hidden``; every token must have a positive variance."""
    v, corr, live = _pair_stats(gram)
    if not live.all():
        raise ValueError("token-resolved state: a token has zero variance")
    return Moments(mean=0.0, var=v, corr=corr, corr_hidden=corr_hidden + 0.0 * v)


def _grad_pairs(grad_gram: torch.Tensor) -> tuple[GradMoments, np.ndarray]:
    """:func:`_pair_stats` of a gradient Gram matrix, where a token may carry no gradient at all (one without a
    label, a decoder's last position): the returned mask (B, L), True where the gradient is non-zero, zeroes such a
    token's pairs again after the rule (the backward rules are linear in the gradient)."""
    v, corr, live = _pair_stats(grad_gram)
    return GradMoments(var=v, corr=corr), live


def _gram_from_pairs(var, corr, shape, live: np.ndarray | None = None) -> torch.Tensor:
    """Assemble G from a pair rule's output variance and correlation: each token's variance from the diagonal pairs
    (zero where ``live`` is False), the off-diagonal entries from the pairs' correlations."""
    var = np.broadcast_to(np.asarray(var), shape)
    corr = np.broadcast_to(np.asarray(corr), shape)
    d = np.diagonal(var, axis1=-2, axis2=-1)
    if live is not None:
        d = np.where(live, d, 0.0)
    s = np.sqrt(d)
    g = corr * s[:, :, None] * s[:, None, :]
    idx = np.arange(shape[-1])
    g[:, idx, idx] = d
    return torch.from_numpy(g)


def _zero_mean(out: Moments) -> Moments:
    if np.any(np.abs(np.asarray(out.mean)) > 1e-12 * np.sqrt(np.max(np.asarray(out.var)))):
        raise NotImplementedError("token-resolved state: a component produced a non-zero mean")
    return out


def pairwise_forward(rule: Callable, gram: torch.Tensor, **context) -> torch.Tensor:
    """Apply a token-wise component's exchangeable forward ``rule`` (e.g. ``module.forward_moments``) to every token
    pair of ``gram`` (B, L, L) at once and return the output Gram matrix (module docstring)."""
    out = _zero_mean(call_rule(rule, _pair_moments(gram), **context))
    return _gram_from_pairs(out.var, out.corr, gram.shape)


def pairwise_backward(rule: Callable, grad_gram: torch.Tensor, gram: torch.Tensor, **context) -> torch.Tensor:
    """Apply a token-wise component's exchangeable backward ``rule`` (e.g. ``module.backward_moments``) to every token
    pair at once: the output-gradient Gram ``grad_gram`` and the forward input Gram ``gram`` (both (B, L, L)) give
    the input-gradient Gram. Token j's gradient is J(x_j)ᵀ g_j, so the pair (j, l) depends only on the forward pair
    and the gradient pair (:mod:`sigprop.resolved_backward`)."""
    g_pairs, live = _grad_pairs(grad_gram)
    out = call_rule(rule, g_pairs, _pair_moments(gram), **context)
    return _gram_from_pairs(out.var, out.corr, gram.shape, live)


def _postnorm_pairs(norm, skip: torch.Tensor, branch: torch.Tensor) -> tuple[Moments, Moments]:
    """The skip and branch pairs of a Post-LN norm's post-norm rule. The skip input is a LayerNorm output, whose
    hidden units are correlated −1/(d − 1) exactly (the mean is subtracted; Kedia et al. Table 19): the Gram matrix
    does not carry it, and the rule's O(1/d) terms need it (without it a DSLM Post-LN gradient drifts 0.4% per norm,
    compounding over 384 norms)."""
    return _pair_moments(skip, corr_hidden=-1.0 / (norm.d - 1.0)), _pair_moments(branch)


def _pairwise_postnorm(norm, skip: torch.Tensor, branch: torch.Tensor, lam, beta) -> torch.Tensor:
    """A Post-LN norm's post-norm rule (:meth:`LayerNorm.forward_moments_postnorm`) for every token pair."""
    out = norm.forward_moments_postnorm(*_postnorm_pairs(norm, skip, branch), lam, beta)
    return _gram_from_pairs(out.var, out.corr, skip.shape)


def pairwise_postnorm_backward(norm, grad_gram: torch.Tensor, skip: torch.Tensor, branch: torch.Tensor, lam, beta,
                               skip_fraction) -> torch.Tensor:
    """A Post-LN norm's post-norm backward rule (:meth:`LayerNorm.backward_moments_postnorm`) for every token pair;
    ``skip_fraction`` (B, L, L) per pair."""
    g, live = _grad_pairs(grad_gram)
    out = norm.backward_moments_postnorm(g, *_postnorm_pairs(norm, skip, branch), lam, beta,
                                         skip_fraction=skip_fraction)
    return _gram_from_pairs(out.var, out.corr, skip.shape, live)


def gram_moments(gram: torch.Tensor, mask: torch.Tensor | None = None) -> Moments:
    """The site's :class:`Moments` as the measurement pools them: variance = mean of G_jj over the real tokens,
    token covariance = mean of G_jl over the ordered pairs j ≠ l of real tokens within each sequence, correlation =
    their ratio; mean and hidden correlation 0. ``mask`` (B, L) bool, True at real tokens."""
    keep = torch.ones(gram.shape[:2], dtype=torch.bool) if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    var, cov = (float(t[0]) for t in pooled_gram_means(gram[:, None], keep))
    return Moments(mean=0.0, var=var, corr=float(np.clip(cov / var, -1.0, 1.0)))


def mixes_tokens(module) -> bool:
    return any(isinstance(m, MultiHeadAttention) for m in module.modules())


def resolved_supported(config) -> str | None:
    """None if :func:`resolved_forward` covers models of ``config`` (a :class:`~sigprop.model.TransformerConfig`: an
    encoder (token or patch input) or decoder of standard softmax attention), else the reason it does not."""
    if config.arch == "encoder_decoder":
        return "encoder-decoder (cross-attention has no token-resolved rule)"
    if config.attention != "standard":
        return f"{config.attention} attention has no token-resolved rule"
    return None


def fixes_length(module) -> bool:
    """Whether ``module``'s output rows have a fixed length (|x|² = d·var: LayerNorm, RMSNorm at initialisation)."""
    return isinstance(module, (LayerNorm, RMSNorm))


def walk_forward(module, gram: torch.Tensor, ctx: dict, fixed: bool) -> torch.Tensor:
    """Output Gram of ``module`` (not a transformer layer) for input Gram ``gram``; ``fixed``: the input rows have
    a fixed length (a norm's output), which the attention rule needs to know."""
    if isinstance(module, Residual):
        lam, beta = (float(np.asarray(v)) for v in module._scales())
        return lam**2 * gram + beta**2 * walk_forward(module.branch, gram, ctx, fixed)
    if isinstance(module, MultiHeadAttention):
        cache = ctx.setdefault("attention_out", {})
        if id(module) not in cache:
            cache[id(module)] = module.gram_forward(gram, ctx.get("key_mask"), ctx["attention_heads"],
                                                    ctx["attention_seed"], fixed)
        return cache[id(module)]
    if mixes_tokens(module):
        for child in module.children():
            gram = walk_forward(child, gram, ctx, fixed)
            fixed = fixes_length(child)
        return gram
    return pairwise_forward(module.forward_moments, gram, L=ctx["L"])


def layer_forward(layer, gram: torch.Tensor, ctx: dict, previous):
    """One transformer layer, mirroring :func:`sigprop.theory._layer_forward` (a norm after a residual whose skip input
    is a LayerNorm output uses the post-norm rule): (branch output Grams by site, output Gram, the module that
    produced the output, and per child (name, child, input Gram, whether the input rows have a fixed length, the
    post-norm rule's (skip, branch, λ, β) or None) for the backward sweep). ``previous``: the module that produced
    the input (None for the embedding)."""
    branches, pending, children = {}, None, []
    for name, child in layer.named_children():
        fixed = fixes_length(previous)
        if isinstance(child, Residual):
            children.append((name, child, gram, fixed, None))
            lam, beta = (float(np.asarray(v)) for v in child._scales())
            branches[name] = walk_forward(child.branch, gram, ctx, fixed)
            pending = (gram, branches[name], lam, beta) if isinstance(previous, LayerNorm) else None
            gram, previous = lam**2 * gram + beta**2 * branches[name], child
            continue
        post = pending if pending is not None and hasattr(child, "forward_moments_postnorm") else None
        children.append((name, child, gram, fixed, post))
        gram = _pairwise_postnorm(child, *post) if post is not None else walk_forward(child, gram, ctx, fixed)
        pending, previous = None, child
    return branches, gram, previous, children


@dataclass
class ForwardSweep:
    """A token-resolved forward sweep: the pooled ``rows`` ({(layer, site): Moments}), each layer's input Gram and
    the module that produced it (``layer_inputs``), the last layer's output Gram (``output``), the padding ``mask``
    (B, L) or None, and the rules' context ``ctx`` (it keeps every attention layer's output Gram, so the backward
    sweep can walk a layer again without sampling its forward twice)."""

    rows: dict
    layer_inputs: list
    output: torch.Tensor
    mask: torch.Tensor | None
    ctx: dict


def forward_sweep(model, token_ids: torch.Tensor, segment_ids: torch.Tensor | None = None,
                  padding_mask: torch.Tensor | None = None, attention_heads: int = DEFAULT_GRAM_HEADS,
                  attention_seed: int = 0, progress: Callable[[int], None] | None = None) -> ForwardSweep:
    """:func:`resolved_forward`, keeping what :func:`sigprop.resolved_backward.resolved_backward` needs."""
    reason = resolved_supported(model.config)
    if reason is not None:
        raise NotImplementedError(f"token-resolved theory: {reason}")
    start = model.embed.gram(torch.as_tensor(token_ids), segment_ids)  # (B, L, L)
    mask = None if padding_mask is None else torch.as_tensor(padding_mask, dtype=torch.bool).reshape(start.shape[:2])
    ctx = {"L": start.shape[-1], "key_mask": mask, "attention_heads": int(attention_heads),
           "attention_seed": int(attention_seed), "attention_out": {}}
    gram = pairwise_forward(model.embed_drop.forward_moments, start)
    rows = {(-1, "input"): gram_moments(gram, mask)}
    previous, inputs = None, []
    for layer in model.layers:
        inputs.append((gram, previous))
        try:
            branches, gram, previous, _ = layer_forward(layer, gram, layer_context(ctx, layer.index), previous)
        except ValueError as err:
            raise ValueError(f"layer {layer.index}: {err}") from None
        rows.update({(layer.index, name): gram_moments(g, mask) for name, g in branches.items()})
        rows[(layer.index, "layer")] = gram_moments(gram, mask)
        if progress is not None:
            progress(1)
    return ForwardSweep(rows, inputs, gram, mask, ctx)


def resolved_forward(model, token_ids: torch.Tensor, segment_ids: torch.Tensor | None = None,
                     padding_mask: torch.Tensor | None = None, attention_heads: int = DEFAULT_GRAM_HEADS,
                     attention_seed: int = 0, progress: Callable[[int], None] | None = None) -> dict:
    """Token-resolved forward sweep of ``model`` (a :class:`~sigprop.model.Transformer`, its plan's declared
    values; weights are never read) on the batch ``token_ids`` (B, L), or a patch model's images (B, C, H, W)
    (:meth:`~sigprop.model.patch.PatchEmbedding.gram`): {(layer, site): Moments} for the input
    (−1, "input"), every branch output and every layer output, pooled as the measurement pools them
    (:func:`gram_moments`; ``padding_mask`` (B, L), True at real tokens, excludes padding from the pooling and from
    every softmax). ``attention_heads`` heads per sequence are sampled for each attention layer from
    ``attention_seed``; ``progress(1)`` after each layer. Raises ``NotImplementedError`` for a model it does not
    cover (:func:`resolved_supported`)."""
    return forward_sweep(model, token_ids, segment_ids, padding_mask, attention_heads, attention_seed, progress).rows
