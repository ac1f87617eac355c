"""Token-resolved backward theory: each sequence's gradient Gram matrix carried down the module tree, the companion of
:mod:`sigprop.resolved` (Kedia et al. Sec. 2.3 and App. E for the backward sweep it refines).

The state at a site is, per sequence of the batch, the per-element Gram matrix of the loss gradient g = ∂Loss/∂x,
H_jl = E[g_j^a g_l^a] (B × L × L). The exchangeable backward sweep passes one variance and one correlation for all
positions. That loses what makes a decoder's gradient grow toward its first layers: under a causal mask the early
positions are read by every later query, so attention sends them more gradient than the late ones, and the next
layer down weighs positions unequally again; the pooled mean of a product is not the product of pooled means. An
encoder's masked-LM loss likewise puts gradient on the labelled 15% of positions only.

Boundary (:func:`head_gradient_gram`): at the labelled positions the cross-entropy gradient through the head is
g_t = s W_headᵀ (p_t − e_{y_t})/M (M labelled positions in the batch), so with an i.i.d. N(0, σ²_h) head,
independent of the hidden states and of the labels,

    H_jl = s² σ²_h E[(p_j − e_{y_j})·(p_l − e_{y_l})] / M²
         = s² σ²_h ([y_j = y_l] − (2 − exp C_jl)/V) / M²        for labelled j, l (j = l included), 0 otherwise,

with E[p_{j,y}] = 1/V (the label is independent of the weights) and E[p_j·p_l] = exp(C_jl)/V for log-normal
softmax weights over V ≫ 1 ids, C_jl = s² σ²_h d N_jl the logits' covariance (N the final norm's output Gram). The
−2/V matters: summed over the many pairs of different targets it lowers the pooled correlation, by ~9% at V = 300.
Then the final norm's backward rule, pairwise. A decoder's last
position and every padded one carry no gradient (no label, and nothing downstream reads them); they stay at zero
through every layer, as they do in the model.

A measured boundary (``compare``'s) sets only the scale of this Gram matrix; its correlations stay the loss's.
Setting the top layer's pooled correlation to the measured one as well (a convex mix of H toward s sᵀ or diag(H),
s_j = √H_jj, which keeps H positive semi-definite) was tried and measured worse on the 192-layer DeepScaleLM
Post-LN preset: gradient correlation 4.3% off, 82% of layers within 2 SE, against 1.5% and 100% with the scale
only (the Pre-LN preset: 1.4% gradient variance either way). The measured top correlation was within 1–1.5 SE of
the loss's in the cases checked; setting it carries the measurement's noise there (7% at 16 seeds) into every
layer's prediction.

Rules, each the backward form of the forward rule :mod:`sigprop.resolved` uses:

* a token-wise component: g_in,j = J(x_j)ᵀ g_j, so the pair (j, l) of H_in depends only on the forward pair
  (G_jj, G_ll, G_jl) and the gradient pair (H_jj, H_ll, H_jl): the component's exchangeable backward rule applied to
  every pair at once (:func:`~sigprop.resolved.pairwise_backward`; the diagonal from the variance, as going forward);
* attention: :meth:`MultiHeadAttention.gram_backward` (autograd on the sampled heads, values, keys and queries),
  with heads drawn from a seed of each layer's own (:func:`~sigprop.components.draws.layer_seed`). The gradient reaching
  layer l is a product of the per-layer factors above it, so a sampling error common to every layer would add up
  linearly over depth; independent draws make the errors add like √depth. The key and query paths need it (the
  value path's draws are exact, see :func:`~sigprop.components.attention_gram.gram_attention_backward`): on the
  192-layer
  ``qk-2x-xavier`` preset, scores of variance ~14, the gradient correlation was 3.7% off (68% of layers within
  2 SE) with one seed for all layers and is 1.5% off (99%) with a seed per layer;
* the residual y = λx + βf(x): H_x = λ² H_y + β² T_f(H_y), the two paths uncorrelated (the branch ends in a
  zero-mean weight matrix); the gradient at the branch output is β² H_y (the site the measurement records);
* a Post-LN norm under the post-norm rule: its backward companion pairwise, with the skip-path share of each pair's
  gradient φ_jl = λ² √(H_y,jj H_y,ll / (H_x,jj H_x,ll)) (the exchangeable sweep's skip fraction, per pair).

Assumes: the backward rules' assumptions (the gradient independent of the forward activations and zero-mean), and
the forward sweep's. The cost is one autograd pass through the sampled heads per attention layer, on top of the
forward sweep's sampling.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..components.attention import MultiHeadAttention
from ..components.draws import layer_context
from ..components.residual import Residual
from ..core.moments import GradMoments
from .predict import different_target_term, head_gradient_scale, pooled_head_gradient_variance
from .resolved import (
    ForwardSweep,
    fixes_length,
    gram_moments,
    layer_forward,
    mixes_tokens,
    pairwise_backward,
    pairwise_forward,
    pairwise_postnorm_backward,
    walk_forward,
)

__all__ = ["head_gradient_gram", "pooled_head_gradient_gram", "resolved_backward", "gradient_rows"]


def head_gradient_gram(model, top_gram: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss gradient's Gram matrix (B, L, L) at the last layer's output (module docstring, "Boundary"): the mean
    cross-entropy over the labelled positions of ``labels`` (B, L; −100 = unlabelled), through the head and the final
    norm (pairwise, at the forward Gram ``top_gram`` of the last layer's output). Raises ``ValueError`` when no
    position is labelled. Assumes the head independent of the hidden states (exact for an untied head, O(1/d) for a
    tied one) and of the labels."""
    lab = torch.as_tensor(labels)
    lab = lab[None] if lab.dim() == 1 else lab
    if lab.shape != top_gram.shape[:2]:
        raise ValueError(f"labels must have shape {tuple(top_gram.shape[:2])}, got {tuple(lab.shape)}")
    labelled = lab != -100
    M = int(labelled.sum())
    if M == 0:
        raise ValueError("labels: no labelled position (all -100)")
    scale, V = head_gradient_scale(model)
    normed = top_gram if model.final_norm is None else pairwise_forward(model.final_norm.forward_moments, top_gram)
    same = (lab[:, :, None] == lab[:, None, :]).to(torch.float64)
    pair = same - torch.from_numpy(different_target_term(scale * model.config.d_model * normed.numpy(), V))
    both = (labelled[:, :, None] & labelled[:, None, :]).to(torch.float64)
    grad = scale / M**2 * pair * both
    if model.final_norm is not None:
        grad = pairwise_backward(model.final_norm.backward_moments, grad, top_gram)
    return grad


def pooled_head_gradient_gram(model, top_gram: torch.Tensor) -> torch.Tensor:
    """A patch model's loss gradient Gram matrix (B, L, L) at the last layer's output: the mean cross-entropy over
    the B images of a classifier on the tokens' mean (:func:`sigprop.theory.pooled_head_gradient_moments`, token by
    token). Every token of image b receives (s/L)·W_headᵀ(p_b − e_{y_b})/B, so before the final norm the Gram is
    s²σ²_h k_b/(L²B²)·11ᵀ with k_b = V·E[p_1²](Var z_b) − 2/V + 1 and Var z_b = s²σ²_h d·Σ_ts N_ts/L² (N the
    final norm's output Gram of image b: the pooled vector's second moment); then the final norm's backward rule,
    pairwise, at the forward Gram ``top_gram``. Assumes the head independent of the hidden states."""
    B, L, _ = top_gram.shape
    normed = top_gram if model.final_norm is None else pairwise_forward(model.final_norm.forward_moments, top_gram)
    var = pooled_head_gradient_variance(model, normed.sum(dim=(1, 2)).numpy() / L**2, L, B)  # one per image
    grad = torch.from_numpy(var)[:, None, None] * torch.ones(B, L, L, dtype=torch.float64)
    if model.final_norm is not None:
        grad = pairwise_backward(model.final_norm.backward_moments, grad, top_gram)
    return grad


def _skip_fraction(skip_part: torch.Tensor, total: torch.Tensor) -> np.ndarray:
    """φ per token pair: √ of the ratio of the diagonals of the skip path's gradient Gram and the total's, clipped to
    [0, 1]; 0 at a token without gradient."""
    a = torch.diagonal(skip_part, dim1=-2, dim2=-1).numpy()
    b = torch.diagonal(total, dim1=-2, dim2=-1).numpy()
    ratio = np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)
    return np.clip(np.sqrt(ratio[:, :, None] * ratio[:, None, :]), 0.0, 1.0)


def walk_backward(module, grad: torch.Tensor, gram: torch.Tensor, ctx: dict, fixed: bool) -> torch.Tensor:
    """Input-gradient Gram of ``module`` (not a transformer layer) for its output-gradient Gram ``grad`` and forward
    input Gram ``gram``; ``fixed``: the forward input rows have a fixed length (as in
    :func:`sigprop.resolved.walk_forward`)."""
    if isinstance(module, Residual):
        lam, beta = (float(np.asarray(v)) for v in module._scales())
        return lam**2 * grad + beta**2 * walk_backward(module.branch, grad, gram, ctx, fixed)
    if isinstance(module, MultiHeadAttention):
        return module.gram_backward(grad, gram, ctx.get("key_mask"), ctx["attention_heads"],
                                    ctx["attention_seed"], fixed)
    if mixes_tokens(module):
        inputs = []
        for child in module.children():
            inputs.append((child, gram, fixed))
            gram = walk_forward(child, gram, ctx, fixed)
            fixed = fixes_length(child)
        for child, g_in, f in reversed(inputs):
            grad = walk_backward(child, grad, g_in, ctx, f)
        return grad
    return pairwise_backward(module.backward_moments, grad, gram, L=ctx["L"])


def layer_backward(children: list, grad: torch.Tensor, ctx: dict, skip: np.ndarray | None):
    """One layer's children (from :func:`sigprop.resolved.layer_forward`) in reverse, mirroring
    :func:`sigprop.theory._layer_backward`: (gradient Gram at the layer input, the gradient Gram at each branch
    output, the skip fraction for the norm below: the first child's if it is a residual, else None)."""
    branches = {}
    for name, child, gram, fixed, post in reversed(children):
        if isinstance(child, Residual):
            lam, beta = (float(np.asarray(v)) for v in child._scales())
            grad_out = grad
            grad = lam**2 * grad_out + beta**2 * walk_backward(child.branch, grad_out, gram, ctx, fixed)
            if beta > 0:
                branches[name] = beta**2 * grad_out
            skip = _skip_fraction(lam**2 * grad_out, grad)
            continue
        if post is not None:
            grad = pairwise_postnorm_backward(child, grad, *post, skip_fraction=0.0 if skip is None else skip)
        else:
            grad = walk_backward(child, grad, gram, ctx, fixed)
        skip = None
    return grad, branches, skip


def resolved_backward(model, sweep: ForwardSweep, grad_top: torch.Tensor,
                      progress: Callable[[int], None] | None = None) -> dict:
    """Token-resolved backward sweep of ``model`` after its forward ``sweep`` (:func:`sigprop.resolved.forward_sweep`)
    from the gradient Gram ``grad_top`` (B, L, L) at the last layer's output (e.g. :func:`head_gradient_gram`):
    {(layer, site): Gram matrix} of the gradient at every layer output, branch output and the input (−1, "input")
    (pool them with :func:`gradient_rows`). ``progress(1)`` after each layer."""
    if grad_top.shape != sweep.output.shape:
        raise ValueError(f"grad_top must have shape {tuple(sweep.output.shape)}, got {tuple(grad_top.shape)}")
    grams, grad, skip = {}, grad_top.to(torch.float64), None
    for layer, (gram_in, previous) in zip(reversed(list(model.layers)), reversed(sweep.layer_inputs), strict=True):
        grams[(layer.index, "layer")] = grad
        *_, children = layer_forward(layer, gram_in, sweep.ctx, previous)
        try:
            grad, branches, skip = layer_backward(children, grad, layer_context(sweep.ctx, layer.index, backward=True),
                                                  skip)
        except ValueError as err:
            raise ValueError(f"layer {layer.index}: {err}") from None
        grams.update({(layer.index, name): g for name, g in branches.items()})
        if progress is not None:
            progress(1)
    grams[(-1, "input")] = grad
    return grams


def gradient_rows(grams: dict, mask: torch.Tensor | None = None) -> dict:
    """{(layer, site): GradMoments} pooled from gradient Gram matrices as the measurement pools a gradient's variance
    and token correlation (:func:`sigprop.resolved.gram_moments`; ``mask`` (B, L), True at real tokens)."""
    out = {}
    for key, g in grams.items():
        m = gram_moments(g, mask)
        out[key] = GradMoments(var=m.var, corr=m.corr)
    return out
