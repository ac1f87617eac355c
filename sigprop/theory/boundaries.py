"""The two boundaries of a sweep, for both states: the moments entering the first layer (the embedding's output,
Kedia et al. App. A.1–A.2, H) and the gradient arriving at the last layer's output (the loss through the head and
the final norm).

* Input, exchangeable (:func:`input_moments_theory`): from the batch's token ids (their exact repetition
  correlation), from theory (i.i.d. Zipf(1) tokens over the vocabulary, r = Σp²), or a patch model's images through
  the patch embedding in expectation over its weights. Token-resolved (:func:`input_gram`): each sequence's token Gram
  matrix, a repeated id ([MASK] included) sharing its embedding row, or the images' patch inner products.
* Head gradient, exchangeable (:func:`head_gradient_moments`, :func:`pooled_head_gradient_moments` for a ViT's
  mean-pooled head); token-resolved (:func:`head_gradient_gram`, :func:`pooled_head_gradient_gram`), each
  sequence's gradient Gram matrix:

    H_jl = s² σ²_h E[(p_j − e_{y_j})·(p_l − e_{y_l})] / M² = s² σ²_h ([y_j = y_l] − (2 − exp C_jl)/V) / M²

  for labelled j, l (j = l included), 0 otherwise, with E[p_{j,y}] = 1/V (the label is independent of the weights)
  and E[p_j·p_l] = exp(C_jl)/V for log-normal softmax weights over V ≫ 1 ids, C_jl = s² σ²_h d N_jl the logits'
  covariance (N the final norm's output Gram); for logits of large variance (a model without a final norm, a
  large head scale) E[p_j·p_l] = :func:`~sigprop.components.softmax.softmax_overlap` instead. The −2/V
  matters: summed over the many pairs of different targets it lowers the pooled correlation visibly at a small
  vocabulary (docs/results/accuracy.md, "The token-resolved backward sweep").
  Then the backward rules of the masked-LM head's transform where the model has one (BERT, RoBERTa:
  :mod:`~sigprop.components.head_transform`; the logits then read its output) and of the final norm. A decoder's
  last position and every padded one carry no gradient (no label,
  and nothing downstream reads them).

The rules read the init plan's declared standard deviations (the model is built without sampling weights).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from ..components.embedding import Embedding, repetition_correlation, zipf_correlation
from ..components.patch import PatchEmbedding
from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range
from ..data.mlm import IGNORE_INDEX
from ..model.config import TransformerConfig
from ..model.transformer import Transformer
from ..walk.protocol import Leaf
from .resolved import pairwise_backward, pairwise_forward

__all__ = ["input_moments_theory", "input_gram", "patch_input_correlation", "head_gradient_scale",
           "different_target_term", "head_gradient_moments", "pooled_head_gradient_moments",
           "pooled_head_gradient_variance", "head_gradient_gram", "pooled_head_gradient_gram"]


def input_moments_theory(model: Transformer, token_ids: torch.Tensor | None = None, pad_id: int | None = None,
                         segment_ids: torch.Tensor | None = None, decoder: bool = False,
                         images: torch.Tensor | None = None) -> tuple[Moments, str]:
    """Moments of the embedding output after its dropout (App. A.1), and a description of their source; with
    ``decoder`` those of an encoder–decoder's decoder input (the same embedding, its own dropout).

    With ``token_ids`` the token correlation is the batch's exact repetition correlation; without, the expectation
    for i.i.d. Zipf(1) tokens over the vocabulary, Σp² (see :func:`~sigprop.components.embedding.zipf_correlation`).
    Segment embeddings: the exact repetition correlation of ``segment_ids``, else the embedding's default. A patch
    model: the expectation over the patch embedding's weights on ``images`` (the batch's own images, App. A.2 and H;
    :meth:`~sigprop.components.patch.PatchEmbedding.forward_moments`).
    """
    c = model.config
    if c.input != "tokens":
        if images is None:
            raise ValueError("a patch model's input moments come from its images: pass images= (a batch of "
                             "(batch, channels, height, width)) or input_moments=")
        return (model.embed_drop.forward_moments(cast(PatchEmbedding,
        model.embed).forward_moments(torch.as_tensor(images))),
                "the batch's images through the patch embedding, in expectation over its weights (App. A.2, H)")
    r: Stat
    if token_ids is not None:
        r, source = repetition_correlation(token_ids, pad_id=pad_id), "token ids of the batch (App. A.1)"
    else:
        r, source = zipf_correlation(c.vocab_size), f"Zipf(1) tokens over {c.vocab_size} ids (App. A.1)"
    seg = {} if segment_ids is None else {"segment_corr": repetition_correlation(segment_ids)}
    m = cast(Embedding, model.embed).forward_moments(r, **seg)
    return (model.dec_embed_drop if decoder else model.embed_drop).forward_moments(m), source


def input_gram(model: Transformer, inputs: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The token-resolved input boundary: each sequence's per-element Gram matrix (B, L, L) of the embedding's output
    after its dropout, from the batch's token ids (:meth:`~sigprop.components.embedding.Embedding.gram`) or a patch
    model's images (:meth:`~sigprop.components.patch.PatchEmbedding.gram`)."""
    return pairwise_forward(model.embed_drop.forward_moments, model.embed.gram(torch.as_tensor(inputs), segment_ids))


def patch_input_correlation(config: TransformerConfig, images: torch.Tensor) -> float:
    """The token correlation a patch model of ``config`` feeds its first layer on ``images`` (after the patch and
    position embedding and the embedding dropout, in expectation over the weights: :func:`input_moments_theory`):
    the ``input_corr`` that ``init="dslm"`` starts its correlation schedule from (Kedia et al. App. H, which
    measures it as 0.46 for ViT on ImageNet). The embedding's standard deviations do not depend on ``input_corr``,
    so any placeholder builds the model that computes it. ``ValueError`` for a token model."""
    import dataclasses

    if config.input != "patches":
        raise ValueError("patch_input_correlation: the config takes tokens, not image patches")
    # a calibrated scheme's embedding is its plan scheme's: skip the calibration
    placeholder = dataclasses.replace(config, input_corr=config.input_corr or 0.5, init=config.scheme.plan_scheme)
    model = Transformer(placeholder, sample=False)
    moments, _ = input_moments_theory(model, images=images)
    return float(moments.corr)


def head_gradient_scale(model: Transformer) -> tuple[float, int]:
    """(s²σ²_h, V): the output scale s squared times the head's weight variance (the token embedding's for a tied
    head), and the number of softmax outputs V, of the cross-entropy gradient at the head's input
    (:func:`head_gradient_moments`)."""
    c, plan = model.config, model.plan
    head_var = plan.std("token") ** 2 if (c.input == "tokens" and c.tie_head) else plan.std("head") ** 2
    return float(plan.head_scale) ** 2 * head_var, (c.vocab_size if c.input == "tokens" else c.n_classes)


def different_target_term(logit_cov: Stat, V: int, logit_var: Stat | None = None) -> Stat:
    """2/V − E[p_j·p_l]: what E[(p_j − e_a)·(p_l − e_b)] = [a = b] − 2/V + E[p_j·p_l] subtracts for two positions
    whose logits have covariance C = ``logit_cov`` and variance ``logit_var`` (default C: one position with itself).
    E[p_j·p_l] = :func:`~sigprop.components.softmax.softmax_overlap`, e^C/V in the log-normal regime, where the term
    is (2 − e^C)/V (:func:`head_gradient_moments`). Beyond that regime the variance is one scalar (the mean of
    ``logit_var``)."""
    from ..components.softmax import LOGNORMAL_OVERLAP_LIMIT, softmax_overlap

    cov = np.asarray(logit_cov, dtype=np.float64)
    var = cov if logit_var is None else np.asarray(logit_var, dtype=np.float64)
    if np.all(var <= np.log1p(LOGNORMAL_OVERLAP_LIMIT * V)):
        return (2.0 - np.exp(cov)) / V
    s2 = float(np.mean(var))
    return 2.0 / V - softmax_overlap(s2, cov / s2, V)


def pooled_head_gradient_moments(model: Transformer, m_top: Moments, n_images: int = 1,
                                 seq_len: int | None = None) -> tuple[GradMoments, str]:
    """Gradient moments at the last layer's output for a patch model's objective: the mean cross-entropy over
    ``n_images`` images of a classifier on the tokens' mean, z = W_head·(s·mean_t Norm(h_t)) (a ViT's mean-pooled
    head, Kedia et al. App. H), at initialisation.

    Every token of an image receives the same gradient, (s/L)·W_headᵀ(p − e_y)/B, so the gradient's token
    correlation is exactly 1 and its per-element variance is s²σ²_h k/(L²B²), with B = ``n_images``, L the tokens
    per image and k = E|p − e_y|² = V·E[p_1²] − 2/V + 1 (E[p_y] = 1/V exactly, the label being independent of the
    logits). Given the pooled vector h̄ the V logits are i.i.d. N(0, Var z) with Var z = s²σ²_h d·E[h̄_i²],
    E[h̄_i²] = μ² + σ²(1 + (L − 1)r)/L for Norm(h) of mean μ, variance σ² and token correlation r, and E[p_1²] is
    the exact softmax moment (:func:`~sigprop.components.softmax.softmax_second_moment`: a ten-class head is far
    from the V ≫ 1 of a language model's). The final norm's backward rule maps this to the last layer's output.
    Assumes: the head independent of the hidden states (it is its own matrix); Var z the same for every image.
    """
    c = model.config
    L = int(seq_len or c.seq_len)
    B = int(check_range(n_images, "n_images", lo=1.0, allowed="integers >= 1"))
    normed = cast(Leaf, model.final_norm).forward_moments(m_top) if model.final_norm is not None else m_top
    if c.pool == "cls":  # one token of L carries the gradient: its variance spread over the L, no token correlation
        mean_sq = np.asarray(normed.mean) ** 2 + np.asarray(normed.var)
        var = pooled_head_gradient_variance(model, mean_sq, 1, B) / L
        g = GradMoments(var=var, corr=0.0 * np.asarray(var))
        source = f"cross-entropy of {B} images' classes through the [CLS] token's head (theory, tokens pooled)"
    else:
        spread = (1.0 + (L - 1.0) * np.asarray(normed.corr)) / L
        mean_sq = np.asarray(normed.mean) ** 2 + np.asarray(normed.var) * spread
        var = pooled_head_gradient_variance(model, mean_sq, L, B)
        g = GradMoments(var=var, corr=1.0 + 0.0 * np.asarray(var))
        source = f"cross-entropy of {B} images' classes through the mean-pooled head (theory)"
    if model.final_norm is not None:
        g = cast(Leaf, model.final_norm).backward_moments(g, m_top)
    return g, source


def pooled_head_gradient_variance(model: Transformer, pooled_mean_square: Stat, L: int, B: int) -> Stat:
    """The per-element variance s²σ²_h k/(L²B²) of the gradient every token of an image receives from the
    mean-pooled head (:func:`pooled_head_gradient_moments`), before the final norm's backward rule, for the pooled
    vector's per-element second moment E[h̄_i²] = ``pooled_mean_square`` (broadcasts: one per image in the
    token-resolved boundary). k = V·E[p_1²](Var z) − 2/V + 1 with Var z = s²σ²_h d·E[h̄_i²]."""
    from ..components.softmax import softmax_second_moment

    scale, V = head_gradient_scale(model)
    var_z = scale * model.config.d_model * np.asarray(pooled_mean_square, dtype=np.float64)
    k = V * softmax_second_moment(var_z, V) - 2.0 / V + 1.0
    return scale * k / (L * L * B * B)


def head_gradient_moments(model: Transformer, m_top: Moments, labels: torch.Tensor | None = None,
                          seq_len: int | None = None, batch_size: int = 1,
                          padding: torch.Tensor | None = None) -> tuple[GradMoments, str]:
    """Gradient moments at the last layer's output for the mean cross-entropy over the labelled positions
    (masked-LM or next-token) at initialisation, and a description of their source.

    With logits z = W_head·(s·Norm(h)), ∂L/∂z_t = (softmax(z_t) − e_{y_t})/M at each of the M labelled positions of
    the batch, zero elsewhere. For a head with i.i.d. N(0, σ²_h) entries, independent of the hidden states and of the
    labels, the per-element gradient covariance at Norm(h) of labelled positions j, l is s²σ²_h/M² times

        E[(p_j − e_{y_j})·(p_l − e_{y_l})] = [y_j = y_l] − (2 − exp C_jl)/V,

    since E[p_{j,y}] = 1/V and E[p_j·p_l] = exp(C_jl)/V for log-normal softmax weights over V ≫ 1 outputs, with C
    the logits' covariance s²σ²_h d·Cov(Norm(h)) (C_jj = Var z). Pooled over the n tokens of the batch:
    σ²_g = s²σ²_h k/(M·n), k = 1 − (2 − e^{Var z})/V; over the ordered token pairs of each sequence,
    r_g = (S − P(2 − e^{r Var z})/V)/(k(L − 1)M), with S the number of same-target pairs, P all pairs of labelled
    positions and r the token correlation of Norm(h). The −2/V is small per pair but summed over the many pairs of
    different targets it lowers r_g visibly at a small vocabulary (checked against autograd in
    ``tests/theory/test_resolved_backward.py``; how much: docs/results/accuracy.md, "The token-resolved backward
    sweep"). The final norm's backward rule maps this to the last layer's output.
    ``labels`` (batch, L) with −100 at unlabelled positions; without, ``config.mask_prob``·L labelled positions
    per sequence (``batch_size`` sequences) whose targets repeat like Zipf(1) tokens (Σp²). ``padding`` (bool,
    the shape of ``labels``, True = real token): the statistics are over the real tokens and their pairs, as the
    measurement's are (n real tokens, and L − 1 replaced by Σ n_s(n_s − 1)/n over the sequences' real lengths n_s).
    Assumes: the head independent of the hidden states (O(1/d) for a tied one) and of the softmax weights. The
    softmax depends on the head through the logits, which adds a part along each hidden state; a final norm (LayerNorm
    or RMSNorm) projects it out, so with one the rule holds for an untied head, while without one (Post-LN, or
    ``final_norm=False``) the gradient's token correlation at the top comes out too small and its variance a little
    low, more so at a larger head scale (measured: docs/results/accuracy.md, "The loss gradient without a final
    norm").
    A patch model's classifier reads the mean over tokens instead: :func:`pooled_head_gradient_moments`.
    """
    c = model.config
    if c.input == "patches":
        n_images = int(torch.as_tensor(labels).reshape(-1).shape[0]) if labels is not None else batch_size
        return pooled_head_gradient_moments(model, m_top, n_images, seq_len)
    scale, V = head_gradient_scale(model)
    if labels is not None:
        lab = torch.as_tensor(labels)
        lab = lab[None] if lab.dim() == 1 else lab
        n_seq, L = lab.shape
        mask = lab != IGNORE_INDEX
        M: float = int(mask.sum())
        if M == 0:
            raise ValueError("labels: no labelled position (all -100)")
        same: Stat
        pairs: float
        same, pairs = 0.0, 0.0
        for row, keep in zip(lab, mask, strict=True):
            counts = torch.unique(row[keep], return_counts=True)[1].double()
            same += float((counts * (counts - 1)).sum())
            pairs += float(keep.sum() * (keep.sum() - 1))
        n: float
        n, source = n_seq * L, "cross-entropy of the batch's labels (theory)"
        pair_norm: float = max(L - 1, 1)
        if padding is not None:
            real = torch.as_tensor(padding).reshape(lab.shape).to(torch.float64).sum(dim=-1)
            n = float(real.sum())
            pair_norm = max(float((real * (real - 1.0)).sum()) / n, 1.0)
    else:
        L = int(seq_len or c.seq_len)
        per_seq = c.mask_prob * L if c.arch == "encoder" else L - 1
        M, n = batch_size * per_seq, batch_size * L
        pairs = batch_size * per_seq * max(per_seq - 1, 0)
        same = zipf_correlation(c.vocab_size) * pairs
        source = f"cross-entropy of {per_seq:g} labelled positions per sequence, Zipf targets (theory)"
        pair_norm = max(L - 1, 1)
    normed = cast(Leaf, model.final_norm).forward_moments(m_top) if model.final_norm is not None else m_top
    head_in = model.head_transform.forward_moments(normed) if model.head_transform is not None else normed
    var_z = scale * c.d_model * np.asarray(head_in.var)
    k = 1.0 - different_target_term(var_z, V)
    corr = (same - pairs * different_target_term(np.asarray(head_in.corr) * var_z, V, var_z)) / \
        (k * pair_norm * M)
    g = GradMoments(var=scale * k / (M * n), corr=corr)
    if model.head_transform is not None:
        g = model.head_transform.backward_moments(g, normed)
    if model.final_norm is not None:
        g = cast(Leaf, model.final_norm).backward_moments(g, m_top)
    return g, source


def head_gradient_gram(model: Transformer, top_gram: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss gradient's Gram matrix (B, L, L) at the last layer's output (module docstring, "Boundary"): the mean
    cross-entropy over the labelled positions of ``labels`` (B, L; −100 = unlabelled), through the head and the final
    norm (pairwise, at the forward Gram ``top_gram`` of the last layer's output). Raises ``ValueError`` when no
    position is labelled. Assumes the head independent of the hidden states (O(1/d) for a tied one), of the softmax
    weights (the part this leaves out lies along each hidden state: a final norm projects it out; without one the
    correlations come out too small, :func:`head_gradient_moments`) and of the labels."""
    lab = torch.as_tensor(labels)
    lab = lab[None] if lab.dim() == 1 else lab
    if lab.shape != top_gram.shape[:2]:
        raise ValueError(f"labels must have shape {tuple(top_gram.shape[:2])}, got {tuple(lab.shape)}")
    labelled = lab != IGNORE_INDEX
    M = int(labelled.sum())
    if M == 0:
        raise ValueError("labels: no labelled position (all -100)")
    scale, V = head_gradient_scale(model)
    normed = top_gram if model.final_norm is None else pairwise_forward(cast(Leaf, model.final_norm).forward_moments,
    top_gram)
    transform = model.head_transform  # applied to each token pair whole: its activation's mean meets its LayerNorm
    head_in = normed if transform is None else pairwise_forward(transform.forward_moments, normed)
    same = (lab[:, :, None] == lab[:, None, :]).to(torch.float64)
    logits = scale * model.config.d_model * head_in.numpy()
    diagonal = np.diagonal(logits, axis1=1, axis2=2)
    pair = same - torch.from_numpy(different_target_term(logits, V, diagonal[labelled.numpy()]))
    both = (labelled[:, :, None] & labelled[:, None, :]).to(torch.float64)
    grad = scale / M**2 * pair * both
    if transform is not None:
        grad = pairwise_backward(transform.backward_moments, grad, normed)
    if model.final_norm is not None:
        grad = pairwise_backward(cast(Leaf, model.final_norm).backward_moments, grad, top_gram)
    return grad


def pooled_head_gradient_gram(model: Transformer, top_gram: torch.Tensor) -> torch.Tensor:
    """A patch model's loss gradient Gram matrix (B, L, L) at the last layer's output: the mean cross-entropy over
    the B images of a classifier on the tokens' mean (:func:`sigprop.theory.boundaries.pooled_head_gradient_moments`,
    token by token). Every token of image b receives (s/L)·W_headᵀ(p_b − e_{y_b})/B, so before the final norm the Gram
    is s²σ²_h k_b/(L²B²)·11ᵀ with k_b = V·E[p_1²](Var z_b) − 2/V + 1 and Var z_b = s²σ²_h d·Σ_ts N_ts/L² (N the final
    norm's output Gram of image b: the pooled vector's second moment); then the final norm's backward rule, pairwise, at
    the forward Gram ``top_gram``. With a [CLS] token (``pool="cls"``) only token 0 receives s·W_headᵀ(p_b − e_{y_b})/B:
    H_00 = s²σ²_h k_b/B² with Var z_b = s²σ²_h d·N_00, every other entry 0. Assumes the head independent of the hidden
    states."""
    B, L, _ = top_gram.shape
    normed = top_gram if model.final_norm is None else pairwise_forward(cast(Leaf, model.final_norm).forward_moments,
    top_gram)
    if model.config.pool == "cls":  # only the [CLS] token (position 0) feeds the classifier
        var = pooled_head_gradient_variance(model, normed[:, 0, 0].numpy(), 1, B)
        grad = torch.zeros(B, L, L, dtype=torch.float64)
        grad[:, 0, 0] = torch.from_numpy(var)
    else:
        var = pooled_head_gradient_variance(model, normed.sum(dim=(1, 2)).numpy() / L**2, L, B)  # one per image
        grad = torch.from_numpy(var)[:, None, None] * torch.ones(B, L, L, dtype=torch.float64)
    if model.final_norm is not None:
        grad = pairwise_backward(cast(Leaf, model.final_norm).backward_moments, grad, top_gram)
    return grad
