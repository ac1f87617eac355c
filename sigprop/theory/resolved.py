"""The token-resolved state: each sequence's token Gram matrix, carried through the module tree by the walker
(:mod:`sigprop.walk.walker`) forward and, for the gradient, backward (Kedia et al. Sec. 2.3 and App. E for the
exchangeable sweeps it refines).

The exchangeable state (:class:`~sigprop.core.moments.Moments`) gives every token pair one correlation. Here the
state of a site is, per sequence of the batch, the per-element Gram matrix G_jl = E[x_j^a x_l^a] over the weights
(B × L × L, zero mean, no hidden correlation), starting from the batch's own token ids or a patch model's images
(:func:`~sigprop.theory.boundaries.input_gram`), and for the gradient g = ∂Loss/∂x its Gram matrix
H_jl = E[g_j^a g_l^a] from the loss's gradient at the labelled positions
(:func:`~sigprop.theory.boundaries.head_gradient_gram`). Each component maps it with the rule it already has:

* a *token-wise* component (norm, linear, activation, FFN block, dropout) acts on each token alone, so the joint law
  of its outputs at tokens j and l depends only on the pair's (G_jj, G_ll, G_jl): its exchangeable rule, applied to
  every pair at once (the rules are vectorised) with variance √(G_jj G_ll) and correlation G_jl/√(G_jj G_ll), gives
  the pair's output correlation, and the diagonal gives each token's output variance (a pair rule at r = 1 is the
  rule for two *different* tokens with identical inputs, which dropout decorrelates, so the diagonal is taken from
  the variance, never from r = 1). Exact wherever the exchangeable rule is, for equal token variances; for unequal
  ones the pair uses their geometric mean. Backward, g_in,j = J(x_j)ᵀ g_j, so the gradient pair (j, l) depends only
  on the forward pair and the gradient pair: the exchangeable backward rule pairwise. A composite that mixes no
  tokens (an FFN block) is applied whole, its composed rule pair by pair (:meth:`GramState.whole`);
* attention mixes tokens: :meth:`MultiHeadAttention.gram_forward` / ``gram_backward``
  (:mod:`~sigprop.components.attention_gram`), told whether its input rows have a fixed length (they do after
  LayerNorm and RMSNorm, the walker's ``source``), or, where every score is small, at zeroth order in the scores
  without draws (:mod:`~sigprop.components.attention_uniform`); the sampled backward rule is autograd through the
  sampled heads, with heads drawn from a seed of each layer's own (:func:`~sigprop.components.draws.layer_seed`):
  the gradient reaching layer l is a product of the per-layer factors above it, so a sampling error common to every
  layer would add up linearly over depth, where independent draws add like √depth;
* the residual y = λx + βf: G_y = λ²G_x + β²G_f, H_x = λ²H_y + β²T_f(H_y) (the branch ends in a zero-mean weight
  matrix, so its output is uncorrelated with the skip path, pair by pair);
* a Post-LN norm whose residual's skip input is itself a norm output uses the norm's post-norm rules pairwise, with
  the skip-path share of each pair's gradient φ_jl = λ² √(H_y,jj H_y,ll / (H_x,jj H_x,ll)).

The site statistics are pooled as :mod:`sigprop.measurement` pools them: the variance is the mean diagonal entry over
the real tokens, the token covariance the mean off-diagonal entry over the real token pairs within each sequence, the
correlation their ratio (:func:`gram_moments`).

What it adds (measured in docs/results/accuracy.md, "The token-resolved forward state" and "The token-resolved backward
sweep"): attention, the only component that is not token-wise, responds to the spread of the pair correlations and
to position (a causal mask), not only to their mean; an encoder's masked-LM loss puts gradient on the labelled 15% of
positions only, and a decoder's early positions are read by every later query.
Assumes: the components' own assumptions (Gaussian given the Gram matrix, weights independent of the input), zero-mean
sites (true at every site of a transformer at initialisation: each branch ends in a zero-mean linear layer), the
gradient independent of the forward activations. Every token-mixing component needs a Gram rule; cross-attention and
shaped attention have none yet (:func:`resolved_supported`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from ..components.attention_gram import pooled_gram_means
from ..core.moments import GradMoments, Moments, Stat
from ..walk.protocol import GramLeaf, Leaf, PostNormLeaf, Rules, mixes_tokens, rules_of

if TYPE_CHECKING:
    from ..walk.state import WalkState

__all__ = ["GramState", "pairwise_forward", "pairwise_backward", "pairwise_postnorm_forward",
           "pairwise_postnorm_backward", "gram_moments", "grad_gram_moments", "resolved_supported"]


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


def _gram_from_pairs(var: Stat, corr: Stat, shape: tuple[int, ...], live: np.ndarray | None = None) -> torch.Tensor:
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


def pairwise_forward(rule: Callable[..., Moments], gram: torch.Tensor, **context: Any) -> torch.Tensor:
    """Apply a token-wise component's exchangeable forward ``rule`` (e.g. ``module.forward_moments``) to every token
    pair of ``gram`` (B, L, L) at once and return the output Gram matrix (module docstring)."""
    out = _zero_mean(rule(_pair_moments(gram), **context))
    return _gram_from_pairs(out.var, out.corr, gram.shape)


def pairwise_backward(rule: Callable[..., GradMoments], grad_gram: torch.Tensor, gram: torch.Tensor,
                      **context: Any) -> torch.Tensor:
    """Apply a token-wise component's exchangeable backward ``rule`` (e.g. ``module.backward_moments``) to every token
    pair at once: the output-gradient Gram ``grad_gram`` and the forward input Gram ``gram`` (both (B, L, L)) give
    the input-gradient Gram. Token j's gradient is J(x_j)ᵀ g_j, so the pair (j, l) depends only on the forward pair
    and the gradient pair (:mod:`sigprop.theory.resolved`)."""
    g_pairs, live = _grad_pairs(grad_gram)
    out = rule(g_pairs, _pair_moments(gram), **context)
    return _gram_from_pairs(out.var, out.corr, gram.shape, live)


def _postnorm_pairs(norm: nn.Module, skip: torch.Tensor, branch: torch.Tensor) -> tuple[Moments, Moments]:
    """The skip and branch pairs of a Post-LN norm's post-norm rule. The skip input is a LayerNorm output, whose
    hidden units are correlated −1/(d − 1) exactly (the mean is subtracted; Kedia et al. Table 19): the Gram matrix
    does not carry it, and the rule's O(1/d) terms need it: without it a DSLM Post-LN gradient drifts at every
    norm, compounding over 384 norms (docs/results/accuracy.md, "The token-resolved backward sweep")."""
    return _pair_moments(skip, corr_hidden=-1.0 / (cast(PostNormLeaf, norm).d - 1.0)), _pair_moments(branch)


def pairwise_postnorm_forward(norm: nn.Module, skip: torch.Tensor, branch: torch.Tensor, lam: Stat,
                              beta: Stat) -> torch.Tensor:
    """A Post-LN norm's post-norm rule (:meth:`LayerNorm.forward_moments_postnorm`) for every token pair."""
    out = cast(PostNormLeaf, norm).forward_moments_postnorm(*_postnorm_pairs(norm, skip, branch), lam, beta)
    return _gram_from_pairs(out.var, out.corr, skip.shape)


def pairwise_postnorm_backward(norm: nn.Module, grad_gram: torch.Tensor, skip: torch.Tensor, branch: torch.Tensor,
                               lam: Stat, beta: Stat, skip_fraction: Stat) -> torch.Tensor:
    """A Post-LN norm's post-norm backward rule (:meth:`LayerNorm.backward_moments_postnorm`) for every token pair;
    ``skip_fraction`` (B, L, L) per pair."""
    g, live = _grad_pairs(grad_gram)
    out = cast(PostNormLeaf, norm).backward_moments_postnorm(g, *_postnorm_pairs(norm, skip, branch), lam, beta,
                                                             skip_fraction=skip_fraction)
    return _gram_from_pairs(out.var, out.corr, skip.shape, live)


def gram_moments(gram: torch.Tensor, mask: torch.Tensor | None = None) -> Moments:
    """The site's :class:`Moments` as the measurement pools them: variance = mean of G_jj over the real tokens,
    token covariance = mean of G_jl over the ordered pairs j ≠ l of real tokens within each sequence, correlation =
    their ratio; mean and hidden correlation 0. ``mask`` (B, L) bool, True at real tokens."""
    keep = torch.ones(gram.shape[:2], dtype=torch.bool) if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    var, cov = (float(t[0]) for t in pooled_gram_means(gram[:, None], keep))
    return Moments(mean=0.0, var=var, corr=float(np.clip(cov / var, -1.0, 1.0)))


def grad_gram_moments(grad: torch.Tensor, mask: torch.Tensor | None = None) -> GradMoments:
    """A gradient site's :class:`GradMoments` pooled from its Gram matrix as the measurement pools a gradient
    (:func:`gram_moments`)."""
    m = gram_moments(grad, mask)
    return GradMoments(var=m.var, corr=m.corr)


def _skip_fraction(skip_part: torch.Tensor, total: torch.Tensor) -> np.ndarray:
    """φ per token pair: √ of the ratio of the diagonals of the skip path's gradient Gram and the total's, clipped to
    [0, 1]; 0 at a token without gradient."""
    a = torch.diagonal(skip_part, dim1=-2, dim2=-1).numpy()
    b = torch.diagonal(total, dim1=-2, dim2=-1).numpy()
    ratio = np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)
    return np.clip(np.sqrt(ratio[:, :, None] * ratio[:, None, :]), 0.0, 1.0)


def resolved_supported(model: nn.Module) -> str | None:
    """None if every token-mixing component of ``model`` has a token-resolved rule (declared ``gram``), else which
    one has not: the reason the token-resolved sweeps do not cover it."""
    for name, module in model.named_modules():
        rules = getattr(type(module), "rules", None)
        if rules is not None and not rules.composite and rules.mixes_tokens and not rules.gram:
            return f"{type(module).__name__} ({name}) has no token-resolved rule"
    return None


class GramState:
    """How the walker's steps act on Gram matrices (module docstring; the interface of :mod:`sigprop.walk.walker`).
    ``key_mask`` (B, L), True at real tokens, keeps padding out of every softmax and of the pooled rows;
    ``pooled=False`` records the Gram matrices themselves at the sites.

    The forward walk keeps each attention module's output Gram (:attr:`attention_out`, by module): a sweep's backward
    walk re-walks each layer's forward from its input (a Gram matrix per module and layer would be ~2·B·L² floats
    each: 0.8 GB at 768 layers, B = 4, L = 128), and its attention must not be sampled again.
    """

    name = "token-resolved"
    #: The backward sweep draws its gradient heads from a stream of its own per layer.
    fresh_backward_draws = True
    #: Tapes are not kept between the forward and backward walks: each layer is re-walked (class docstring).
    keeps_tapes = False

    def __init__(self, key_mask: torch.Tensor | None = None, pooled: bool = True) -> None:
        self.key_mask = key_mask
        self.pooled = pooled
        self.attention_out: dict[int, torch.Tensor] = {}

    @staticmethod
    def whole(module: nn.Module) -> bool:
        """A chain that mixes no tokens is applied whole, its composed exchangeable rule pair by pair (a sum of
        independent terms is walked: Gram matrices add exactly)."""
        rules = rules_of(module)
        return rules.composite and not rules.adds and not mixes_tokens(module)

    @staticmethod
    def _token_mixer(module: nn.Module) -> bool:
        rules = rules_of(module)
        if rules.composite or not rules.mixes_tokens:
            return False
        if not rules.gram:
            raise NotImplementedError(f"token-resolved theory: {type(module).__name__} has no token-resolved rule")
        return True

    def forward(self, module: nn.Module, gram: torch.Tensor, context: dict[str, Any],
                source: Rules | None) -> torch.Tensor:
        if not self._token_mixer(module):
            return pairwise_forward(cast(Leaf, module).forward_moments, gram, **context)
        if id(module) not in self.attention_out:
            fixed = source is not None and source.fixes_length
            self.attention_out[id(module)] = cast(GramLeaf, module).gram_forward(
                gram, self.key_mask, context["attention_heads"], context["attention_seed"], fixed)
        return self.attention_out[id(module)]

    def backward(self, module: nn.Module, grad: torch.Tensor, gram: torch.Tensor, context: dict[str, Any],
                 source: Rules | None) -> torch.Tensor:
        if not self._token_mixer(module):
            return pairwise_backward(cast(Leaf, module).backward_moments, grad, gram, **context)
        fixed = source is not None and source.fixes_length
        return cast(GramLeaf, module).gram_backward(grad, gram, self.key_mask, context["attention_heads"],
                                                    context["attention_seed"], fixed)

    @staticmethod
    def memory_backward(module: nn.Module, grad: torch.Tensor, gram: torch.Tensor,
                        context: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError(f"token-resolved theory: {type(module).__name__} has no token-resolved rule")

    @staticmethod
    def add(terms: Iterable[tuple[Stat, torch.Tensor]]) -> torch.Tensor:
        return cast(torch.Tensor, sum(c**2 * t for c, t in terms))

    add_grad = add

    @staticmethod
    def postnorm_forward(norm: nn.Module, skip: torch.Tensor, branch: torch.Tensor, lam: Stat,
                         beta: Stat) -> torch.Tensor:
        return pairwise_postnorm_forward(norm, skip, branch, lam, beta)

    @staticmethod
    def postnorm_backward(norm: nn.Module, grad: torch.Tensor, skip: torch.Tensor, branch: torch.Tensor, lam: Stat,
                          beta: Stat, skip_fraction: Stat | None) -> torch.Tensor:
        return pairwise_postnorm_backward(norm, grad, skip, branch, lam, beta,
                                          0.0 if skip_fraction is None else skip_fraction)

    @staticmethod
    def skip_fraction(lam: Stat, g_out: torch.Tensor, g_in: torch.Tensor) -> np.ndarray:
        return _skip_fraction(cast(torch.Tensor, lam**2 * g_out), g_in)

    @staticmethod
    def scale_grad(grad: torch.Tensor, factor: Stat) -> torch.Tensor | None:
        if isinstance(factor, float) and factor == 1.0:
            return grad
        return cast(torch.Tensor, factor * grad) if factor > 0 else None

    @staticmethod
    def check_boundary(grad: object, output: torch.Tensor) -> None:
        if not isinstance(grad, torch.Tensor) or grad.shape != output.shape:
            raise ValueError(f"the gradient Gram matrix at the last layer's output must have shape "
                             f"{tuple(output.shape)} (got {tuple(getattr(grad, 'shape', ()))})")

    def pool(self, gram: torch.Tensor) -> Moments | torch.Tensor:
        return gram_moments(gram, self.key_mask) if self.pooled else gram

    def pool_grad(self, grad: torch.Tensor) -> GradMoments | torch.Tensor:
        return grad_gram_moments(grad, self.key_mask) if self.pooled else grad


if TYPE_CHECKING:  # mypy checks here that the token-resolved state is one the walker can walk
    _CHECKED: WalkState[torch.Tensor, torch.Tensor] = GramState()
