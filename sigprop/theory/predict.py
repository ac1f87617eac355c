"""``sigprop.predict``: the whole model's moments, layer by layer, by walking the model's own module tree with
:class:`~sigprop.moments.Moments` (DESIGN.md, "theory walks the same module tree"; Kedia et al. Sec. 2.3, App. E).

Forward sweep: the input moments (the embedding's, App. A.1) go through every layer's children in order, each
applying its component rule; a residual records its branch's output. Backward sweep: the gradient moments at the
last layer's output go back through the children in reverse, each backward rule reading the forward moments at
its own input. Boundaries:

* input: from theory (tokens i.i.d. Zipf over the vocabulary, App. A.1: r = Σp²), from the token ids of a batch
  (their exact repetition correlation), or given as measured :class:`Moments` (e.g. a patch embedding's output);
* output gradient: from theory (:func:`head_gradient_moments`: the cross-entropy gradient of the labelled positions
  through the head and the final norm) or given (e.g. measured at the top layer). The profile's ``meta`` says which;
* an encoder–decoder's encoder: its output (the memory, after the encoder-output norm) is the cross-attentions'
  key/value input on the way up, and the sum of the gradients they send it is the encoder's boundary on the way
  down (:mod:`sigprop.components.cross_attention`).

The rules read the init plan's declared standard deviations (the model is built without sampling weights).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..components.attention import MultiHeadAttention
from ..components.attention_sampled import DEFAULT_HEADS
from ..components.cross_attention import CrossAttention
from ..components.draws import layer_context
from ..components.embedding import repetition_correlation, zipf_correlation
from ..components.layernorm import LayerNorm
from ..components.residual import Residual
from ..components.sequential import call_rule
from ..core.moments import GradMoments, Moments
from ..core.profile import Profile, Row
from ..core.validate import check_range
from ..model.config import TransformerConfig
from ..model.transformer import Transformer

__all__ = ["predict", "input_moments_theory", "head_gradient_moments", "pooled_head_gradient_moments",
           "pooled_head_gradient_variance", "head_gradient_scale", "patch_input_correlation", "different_target_term",
           "sum_gradients", "prediction_steps", "DECODER_CAVEAT"]


def input_moments_theory(model: Transformer, token_ids: torch.Tensor | None = None, pad_id: int | None = None,
                         segment_ids: torch.Tensor | None = None, decoder: bool = False,
                         images: torch.Tensor | None = None) -> tuple[Moments, str]:
    """Moments of the embedding output after its dropout (App. A.1), and a description of their source; with
    ``decoder`` those of an encoder–decoder's decoder input (the same embedding, its own dropout).

    With ``token_ids`` the token correlation is the batch's exact repetition correlation; without, the expectation
    for i.i.d. Zipf(1) tokens over the vocabulary, Σp² (see :func:`~sigprop.components.embedding.zipf_correlation`).
    Segment embeddings: the exact repetition correlation of ``segment_ids``, else the embedding's default. A patch
    model: the expectation over the patch embedding's weights on ``images`` (the batch's own images, App. A.2 and H;
    :meth:`~sigprop.model.patch.PatchEmbedding.forward_moments`).
    """
    c = model.config
    if c.input != "tokens":
        if images is None:
            raise ValueError("a patch model's input moments come from its images: pass images= (a batch of "
                             "(batch, channels, height, width)) or input_moments=")
        return (model.embed_drop.forward_moments(model.embed.forward_moments(torch.as_tensor(images))),
                "the batch's images through the patch embedding, in expectation over its weights (App. A.2, H)")
    if token_ids is not None:
        r, source = repetition_correlation(token_ids, pad_id=pad_id), "token ids of the batch (App. A.1)"
    else:
        r, source = zipf_correlation(c.vocab_size), f"Zipf(1) tokens over {c.vocab_size} ids (App. A.1)"
    seg = {} if segment_ids is None else {"segment_corr": repetition_correlation(segment_ids)}
    m = model.embed.forward_moments(r, **seg)
    return (model.dec_embed_drop if decoder else model.embed_drop).forward_moments(m), source


def patch_input_correlation(config: TransformerConfig, images: torch.Tensor) -> float:
    """The token correlation a patch model of ``config`` feeds its first layer on ``images`` (after the patch and
    position embedding and the embedding dropout, in expectation over the weights: :func:`input_moments_theory`):
    the ``input_corr`` that ``init="dslm"`` starts its correlation schedule from (Kedia et al. App. H, which
    measures it as 0.46 for ViT on ImageNet). The embedding's standard deviations do not depend on ``input_corr``,
    so any placeholder builds the model that computes it. ``ValueError`` for a token model."""
    import dataclasses

    if config.input != "patches":
        raise ValueError("patch_input_correlation: the config takes tokens, not image patches")
    model = Transformer(dataclasses.replace(config, input_corr=config.input_corr or 0.5), sample=False)
    moments, _ = input_moments_theory(model, images=images)
    return float(moments.corr)


def head_gradient_scale(model: Transformer) -> tuple[float, int]:
    """(s²σ²_h, V): the output scale s squared times the head's weight variance (the token embedding's for a tied
    head), and the number of softmax outputs V, of the cross-entropy gradient at the head's input
    (:func:`head_gradient_moments`)."""
    c, plan = model.config, model.plan
    head_var = plan.std("token") ** 2 if (c.input == "tokens" and c.tie_head) else plan.std("head") ** 2
    return float(plan.head_scale) ** 2 * head_var, (c.vocab_size if c.input == "tokens" else c.n_classes)


def different_target_term(logit_cov, V):
    """(2 − exp C)/V: what E[(p_j − e_a)·(p_l − e_b)] = [a = b] − (2 − exp C)/V subtracts for two positions whose
    logits have covariance C (:func:`head_gradient_moments`)."""
    return (2.0 - np.exp(logit_cov)) / V


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
    normed = model.final_norm.forward_moments(m_top) if model.final_norm is not None else m_top
    mean_sq = np.asarray(normed.mean) ** 2 + np.asarray(normed.var) * (1.0 + (L - 1.0) * np.asarray(normed.corr)) / L
    var = pooled_head_gradient_variance(model, mean_sq, L, B)
    g = GradMoments(var=var, corr=1.0 + 0.0 * np.asarray(var))
    if model.final_norm is not None:
        g = model.final_norm.backward_moments(g, m_top)
    return g, f"cross-entropy of {B} images' classes through the mean-pooled head (theory)"


def pooled_head_gradient_variance(model: Transformer, pooled_mean_square, L: int, B: int):
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
                          seq_len: int | None = None, batch_size: int = 1) -> tuple[GradMoments, str]:
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
    different targets it lowers r_g, by ~9% at V = 300 (checked against autograd in
    ``tests/test_resolved_backward.py``). The final norm's backward rule maps this to the last layer's output.
    ``labels`` (batch, L) with −100 at unlabelled positions; without, ``config.mask_prob``·L labelled positions
    per sequence (``batch_size`` sequences) whose targets repeat like Zipf(1) tokens (Σp²).
    Assumes: the head independent of the hidden states (exact for an untied head; O(1/d) for a tied one).
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
        mask = lab != -100
        M = int(mask.sum())
        if M == 0:
            raise ValueError("labels: no labelled position (all -100)")
        same, pairs = 0.0, 0.0
        for row, keep in zip(lab, mask, strict=True):
            counts = torch.unique(row[keep], return_counts=True)[1].double()
            same += float((counts * (counts - 1)).sum())
            pairs += float(keep.sum() * (keep.sum() - 1))
        n, source = n_seq * L, "cross-entropy of the batch's labels (theory)"
    else:
        L = int(seq_len or c.seq_len)
        per_seq = c.mask_prob * L if c.arch == "encoder" else L - 1
        M, n = batch_size * per_seq, batch_size * L
        pairs = batch_size * per_seq * max(per_seq - 1, 0)
        same = zipf_correlation(c.vocab_size) * pairs
        source = f"cross-entropy of {per_seq:g} labelled positions per sequence, Zipf targets (theory)"
    normed = model.final_norm.forward_moments(m_top) if model.final_norm is not None else m_top
    var_z = scale * c.d_model * np.asarray(normed.var)
    k = 1.0 - different_target_term(var_z, V)
    corr = (same - pairs * different_target_term(np.asarray(normed.corr) * var_z, V)) / (k * max(L - 1, 1) * M)
    g = GradMoments(var=scale * k / (M * n), corr=corr)
    if model.final_norm is not None:
        g = model.final_norm.backward_moments(g, m_top)
    return g, source


def _layer_forward(layer, m: Moments, ctx: dict, normalised: bool):
    """Walk one layer's children: (input moments of each child, the Post-LN context of each child, branch output
    moments by site, output, whether the output is a LayerNorm output). A norm that follows a residual whose skip
    input is itself a LayerNorm output (the Post-LN wiring) uses the norm's ``forward_moments_postnorm`` /
    ``backward_moments_postnorm`` rules where it has them: its input is then far from Gaussian in norm, and the
    gradient reaching it has already been projected by the next norm (see
    :func:`~sigprop.components.layernorm.layernorm_forward_postnorm`)."""
    inputs, post, branches = [], [], {}
    pending = None
    for name, child in layer.named_children():
        inputs.append(m)
        if isinstance(child, Residual):
            post.append(None)
            out, branches[name] = child.forward_moments_and_branch(m, **ctx)
            pending = (m, branches[name], *child._scales()) if normalised else None
            m, normalised = out, False
            continue
        if pending is not None and hasattr(child, "forward_moments_postnorm"):
            post.append(pending)
            m = child.forward_moments_postnorm(*pending)
        else:
            post.append(None)
            m = call_rule(child.forward_moments, m, **ctx)
        pending, normalised = None, isinstance(child, LayerNorm)
    return (inputs, post), branches, m, normalised


def _layer_backward(layer, g: GradMoments, saved, ctx: dict, skip_fraction: float, memory_grads: list):
    """Walk one layer's children in reverse. ``skip_fraction`` is the share of the incoming gradient's variance
    that came through the next residual's skip path (what a Post-LN norm needs, see
    :func:`~sigprop.components.layernorm.layernorm_backward_postnorm`); returns it for the layer below. A
    cross-attention branch appends (layer index, the gradient it sends to the encoder output) to ``memory_grads``."""
    inputs, post = saved
    branch_grads = {}
    children = list(layer.named_children())
    for (name, child), m_in, pending in zip(reversed(children), reversed(inputs), reversed(post), strict=True):
        if isinstance(child, Residual):
            g_out = g
            g, branch_grads[name] = child.backward_moments_and_branch(g, m_in, **ctx)
            if hasattr(child.branch, "memory_backward_moments") and branch_grads[name] is not None:
                memory_grads.append((layer.index,
                                     child.branch.memory_backward_moments(branch_grads[name], m_in, **ctx)))
            lam = float(np.asarray(child._scales()[0]))
            skip_fraction = float(np.clip(lam**2 * np.asarray(g_out.var) / np.asarray(g.var), 0.0, 1.0))
            continue
        if pending is not None and hasattr(child, "backward_moments_postnorm"):
            g = child.backward_moments_postnorm(g, *pending, skip_fraction=skip_fraction)
        else:
            g = call_rule(child.backward_moments, g, m_in, **ctx)
        skip_fraction = 0.0
    return g, branch_grads, skip_fraction


#: What a decoder's prediction does not capture (stated in its meta and by the CLI).
DECODER_CAVEAT = ("decoder with exchangeable sweeps: the moments passed from layer to layer are averages over "
                  "positions, which a causal mask makes unequal; Pre-LN variances are verified within measurement "
                  "noise, token correlations and Post-LN gradients are approximate (the token-resolved sweeps keep "
                  "positions apart; see docs/accuracy.md, \"Decoders\")")


def _use_resolved(model: Transformer, token_ids, token_resolved: bool | None, input_given: bool) -> bool:
    """Whether the forward rows are token-resolved (``predict``'s ``token_resolved``; None = when possible)."""
    from .resolved import resolved_supported

    if token_resolved is False:
        return False
    if token_ids is None:
        reason = "no token ids given"
    elif input_given:
        reason = "input_moments override the input boundary"
    else:
        reason = resolved_supported(model.config)
    if reason is not None and token_resolved:
        raise ValueError(f"token_resolved=True: not available for this model ({reason})")
    return reason is None


_RESOLVED_CACHE: dict = {}
NO_GRADIENTS = "not computed (gradients=False: the forward sweep only)"


def _resolved_labels(config: TransformerConfig, token_ids: torch.Tensor, labels, pad_id,
                     token_resolved: bool | None) -> torch.Tensor | None:
    """The labels the token-resolved backward sweep starts from, or None where the backward sweep stays exchangeable.
    A decoder: the given labels, else its next tokens (:func:`~sigprop.data.causal_lm_labels`), unless
    ``token_resolved=False``. An encoder: the given labels with ``token_resolved=True`` only.

    Measured (docs/accuracy.md, "The token-resolved backward sweep"): for decoders it is far closer (192 layers: R²
    of the gradient variance 0.84 → 0.9994). For masked-LM encoders it is closer on the DeepScaleLM Post-LN gradient
    correlation (192 layers: 5.7% → 1.5% median error) but not across depth and width (``bench/accuracy_sweep.py
    --token-resolved``): it takes the top layer's gradient correlation from the loss, which at two layers and
    d = 512 is 6% off, outside 2 SE at every layer, and at 768 layers its gradient correlation is 8.9% off against
    the exchangeable sweep's 5.2%, which starts from the measured top layer. So encoders opt in."""
    if token_resolved is False:
        return None
    if config.arch == "decoder":
        if labels is not None:
            return torch.as_tensor(labels).reshape(token_ids.shape)
        from ..data.mlm import causal_lm_labels

        return causal_lm_labels(token_ids, pad_id)
    if token_resolved and labels is not None:
        return torch.as_tensor(labels).reshape(token_ids.shape)
    return None


def _resolved_rows(model: Transformer, token_ids, segment_ids, pad_id, labels, attention_heads: int, seed: int,
                   tick) -> tuple[dict, dict | None, str]:
    """The token-resolved sweeps (:func:`~sigprop.resolved.forward_sweep`; with ``labels``, also
    :func:`~sigprop.resolved_backward.resolved_backward` from the loss's gradient) as pooled rows: (forward rows,
    gradient rows or None, the forward state's description), with ``attention_heads`` shared out over the sequences
    and ``pad_id`` marking padding.

    Remembered for the last batch and configuration: the pooled rows of each sweep, and, until a backward sweep has
    used it, the forward sweep with the model it walked (its attention layers' sampled outputs are keyed by module,
    and the backward sweep walks the layers again). ``compare`` runs the forward sweep before measuring and the
    backward sweep after, which a measured boundary only rescales; the layers' Gram matrices are freed after it."""
    from .resolved import forward_sweep
    from .resolved_backward import gradient_rows, head_gradient_gram, pooled_head_gradient_gram, resolved_backward

    def key_of(t):
        return None if t is None else (tuple(t.shape), torch.as_tensor(t).cpu().numpy().tobytes())

    heads = max(2, -(-int(attention_heads) // int(token_ids.shape[0])))
    padding = None if pad_id is None else token_ids != pad_id
    key = (model.config.to_json(), key_of(token_ids), key_of(segment_ids), key_of(padding), heads, seed)
    bkey = None if labels is None else key_of(labels)
    if _RESOLVED_CACHE.get("key") != key:
        _RESOLVED_CACHE.clear()
        _RESOLVED_CACHE.update(key=key, sweep=None, backward={})
    cached = _RESOLVED_CACHE
    backward_pending = bkey is not None and bkey not in cached["backward"]
    if "rows" not in cached or (backward_pending and cached["sweep"] is None):
        cached.update(model=model, sweep=forward_sweep(model, token_ids, segment_ids, padding, heads, seed, tick))
        cached["rows"] = cached["sweep"].rows
    else:
        tick(len(model.layers))
    grads = None
    if bkey is not None:
        if backward_pending:
            model, sweep = cached["model"], cached["sweep"]
            top = (pooled_head_gradient_gram(model, sweep.output) if model.config.input == "patches"
                   else head_gradient_gram(model, sweep.output, labels))
            cached["backward"][bkey] = gradient_rows(resolved_backward(model, sweep, top, tick), padding)
            cached.update(model=None, sweep=None)  # 2 B·L² floats a layer: 0.8 GB at 768 layers, B = 4, L = 128
        else:
            tick(len(model.layers))
        grads = cached["backward"][bkey]
    unit = "image" if model.config.input == "patches" else "sequence"
    state = f"token-resolved: each {unit}'s token Gram matrix ({heads} attention heads per {unit}, seed {seed})"
    return cached["rows"], grads, state


def prediction_steps(config: TransformerConfig, token_ids_given: bool = False,
                     token_resolved: bool | None = None, labels_given: bool = False, gradients: bool = True) -> int:
    """The number of ``progress`` steps :func:`predict` reports: a layer per sweep. Exchangeable: forward and
    backward. Token-resolved (token ids given, model covered): forward and backward, both token-resolved for a
    decoder and a patch model (its images given as ``token_ids_given``), or for an encoder with ``labels_given``
    and ``token_resolved=True``; else the token-resolved forward on top of both exchangeable sweeps.
    ``gradients=False``: the forward sweeps only."""
    from .resolved import resolved_supported

    sweeps = 2 if gradients else 1
    resolved = token_ids_given and token_resolved is not False and resolved_supported(config) is None
    both = config.arch == "decoder" or config.input == "patches" or (labels_given and token_resolved)
    if resolved and both:
        return sweeps * config.n_layers
    return sweeps * config.total_layers + (config.n_layers if resolved else 0)


def _attention_rules(model: Transformer) -> str:
    """Which rule each layer's attention used (``MultiHeadAttention.rule_used``; cross-attention named apart), as
    one line."""
    rules: dict[str, list[int]] = {}
    names = {"exact": "closed form", "sampled": "sampled", "kedia": "the paper's form"}
    for layer in model.all_layers():
        for module in layer.modules():
            if isinstance(module, MultiHeadAttention) and module.rule_used is not None:
                kind = "cross-attention " if isinstance(module, CrossAttention) else ""
                rules.setdefault(kind + names.get(module.rule_used, module.rule_used), []).append(layer.index)
    return "; ".join(f"{k}: {_ranges(v)}" for k, v in rules.items()) or "none"


def _ranges(idx: list[int]) -> str:
    """[0, 1, 2, 5] → "layers 0-2, 5"."""
    out, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None], strict=True):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return "layers " + ", ".join(out)


def _f(x) -> float:
    return float(np.asarray(x))


def _tick(progress):
    return progress if progress is not None else (lambda k: None)


def _forward_stack(layers, m: Moments, ctx: dict, rows: dict, progress) -> tuple[Moments, list]:
    """Forward sweep through ``layers`` from input moments ``m``: records every site's moments in ``rows`` and
    returns the output moments and what the backward sweep needs."""
    saved, normalised = [], False
    for layer in layers:
        try:
            inputs, branches, m, normalised = _layer_forward(layer, m, layer_context(ctx, layer.index), normalised)
        except ValueError as err:
            raise ValueError(f"layer {layer.index}: {err}") from None
        saved.append(inputs)
        rows.update({(layer.index, name): mb for name, mb in branches.items()})
        rows[(layer.index, "layer")] = m
        progress(1)
    return m, saved


def _backward_stack(layers, saved: list, g: GradMoments, ctx: dict, rows: dict, progress):
    """Backward sweep through ``layers`` from the gradient moments ``g`` at the top: records every site's gradient
    moments in ``rows``; returns the gradient at the stack's input and the gradients its cross-attentions send to
    the encoder output (a list of (layer index, moments), top layer first; empty without cross-attention)."""
    skip_fraction = 0.0  # the gradient at the top comes from the head (or the memory), not a residual's skip path
    memory_grads: list[tuple[int, GradMoments]] = []
    for layer, inputs in zip(reversed(layers), reversed(saved), strict=True):
        rows[(layer.index, "layer")] = g
        layer_ctx = layer_context(ctx, layer.index)  # the forward's seed: the backward rule reuses its draw
        g, branch_grads, skip_fraction = _layer_backward(layer, g, inputs, layer_ctx, skip_fraction,
                                                         memory_grads)
        rows.update({(layer.index, name): gb for name, gb in branch_grads.items()})
        progress(1)
    return g, memory_grads


def sum_gradients(grads: list[GradMoments]) -> GradMoments:
    """Moments of a sum of gradients with zero cross-covariance (independent zero-mean value weights per layer):
    variances and token covariances add."""
    var = sum(np.asarray(gr.var) for gr in grads)
    cov = sum(np.asarray(gr.var) * np.asarray(gr.corr) for gr in grads)
    return GradMoments(var=var, corr=cov / var)


def predict(config: TransformerConfig, *, token_ids: torch.Tensor | None = None, input_moments: Moments | None = None,
            grad_top: GradMoments | None = None, labels: torch.Tensor | None = None, seq_len: int | None = None,
            batch_size: int = 1, pad_id: int | None = None, segment_ids: torch.Tensor | None = None,
            decoder_token_ids: torch.Tensor | None = None, attention_heads: int = DEFAULT_HEADS,
            attention_seed: int = 0, token_resolved: bool | None = None,
            progress: Callable[[int], None] | None = None, gradients: bool = True,
            images: torch.Tensor | None = None) -> Profile:
    """The predicted :class:`~sigprop.profile.Profile` of a freshly initialised model of ``config``.

    ``token_ids`` (the model's input ids) sets the input correlation, or for a patch model ``images`` (its input
    images, :func:`input_moments_theory`); ``input_moments`` overrides the input boundary. ``grad_top`` sets the
    gradient moments at the last layer's output; otherwise they follow from the loss (:func:`head_gradient_moments`)
    with ``labels`` (−100 = unlabelled; default: the config's masked-LM rate or every position for a decoder, over
    ``batch_size`` sequences; a patch model's: one class per image). ``seq_len`` (default ``config.seq_len``) is
    the L of the attention rules.

    Attention rule per layer (``meta["attention_rule"]``): the closed form where it is verified (bidirectional,
    score variance s² ≤ :data:`~sigprop.components.attention.CLOSED_FORM_MAX_S2`), else the sampled rule
    (:mod:`~sigprop.components.attention_sampled`: large scores such as Q/K at 2× Xavier, and a decoder's causal
    attention) with ``attention_heads`` heads per layer, each layer drawing from a seed of its own derived from
    ``attention_seed`` (:func:`~sigprop.components.draws.layer_seed`). ``progress(k)`` is called after every
    k layers of each sweep (:func:`prediction_steps` in all): the sampled rule takes ~0.45 s per layer at d = 256,
    L = 128.

    Token-resolved moments (``token_resolved``; default: whenever ``token_ids`` are given and the model is covered,
    :func:`~sigprop.resolved.resolved_supported`): the forward rows come from :func:`~sigprop.resolved.forward_sweep`,
    which carries each sequence's token Gram matrix instead of one correlation for all token pairs (repeated tokens,
    [MASK], and a decoder's positions kept apart), sampling ⌈``attention_heads``/B⌉ heads per sequence for each
    attention layer. For a decoder (labels: ``labels``, else its next tokens), and for an encoder with ``labels`` and
    ``token_resolved=True``, the gradient rows come from :func:`~sigprop.resolved_backward.resolved_backward` too:
    each sequence's gradient Gram matrix, from the loss's gradient at the labelled positions
    (:func:`~sigprop.resolved_backward.head_gradient_gram`); a given ``grad_top`` then sets only the gradient's
    scale (the sweep is linear in it), and the exchangeable sweeps are not run. Otherwise the backward sweep is
    exchangeable (the measured reasons: :func:`_resolved_labels`). ``meta["forward_state"]`` and
    ``meta["backward_state"]`` say which was used; ``token_resolved=True`` for a model not covered raises
    ``ValueError``.

    Encoder–decoders (``decoder_token_ids``: the decoder's input ids, default the theory's Zipf correlation): the
    encoder's forward sweep gives the memory (after the encoder-output norm), which every decoder layer's
    cross-attention reads (:mod:`~sigprop.components.cross_attention`, sampled); the decoder's backward sweep
    collects the gradient each cross-attention sends to the memory, their sum goes back through the
    encoder-output norm and down the encoder. ``grad_top`` and ``labels`` are the decoder's; the decoder input's
    row is (``n_layers``, "dec_input"). ``meta["memory_gradient"]`` lists each decoder layer's share, bottom layer
    first: ``{"layer", "var", "corr"}`` of the gradient its cross-attention sends to the memory (the shares add,
    their value weights being independent).

    Assumes: the component rules' assumptions (Gaussian pre-activations, initialisation-time independence of
    weights and inputs). A decoder's positions are not exchangeable: where the sweeps are exchangeable (an
    encoder–decoder, ``token_resolved=False``) the moments passed from layer to layer are averages over positions,
    as the measurement's are (``meta["caveat"]``).

    ``gradients=False`` runs the forward sweeps only (every gradient column 0 / NaN): ``compare`` uses it to fail
    fast on a model outside the rules' domain before measuring, and to sample the forward once.
    """
    check_range(attention_heads, "attention_heads", lo=2.0, allowed="integers >= 2 (heads the sampled attention "
                "rule draws per layer)")
    model = Transformer(config, sample=False)
    L = int(seq_len or (token_ids.shape[-1] if token_ids is not None else config.seq_len))
    ctx = {"L": L, "attention_heads": int(attention_heads), "attention_seed": int(attention_seed)}
    tick = _tick(progress)
    meta = {"seq_len": L}
    patches = config.input == "patches"
    resolved = _use_resolved(model, images if patches else token_ids, token_resolved, input_moments is not None)
    if resolved and patches:  # both sweeps token by token, from the images and the pooled head's gradient
        images = torch.as_tensor(images)
        n_images = images.shape[0]
        resolved_labels = torch.zeros(n_images, dtype=torch.long) if labels is None else torch.as_tensor(labels)
        if resolved_labels.shape != (n_images,):
            raise ValueError(f"a patch model's labels are one class per image: shape ({n_images},), got "
                             f"{tuple(resolved_labels.shape)}")
        return _predict_resolved(model, images, resolved_labels if gradients else None, None, None, grad_top,
                                 int(attention_heads), int(attention_seed), tick, meta)
    elif resolved:
        token_ids = torch.as_tensor(token_ids)
        token_ids = token_ids[None] if token_ids.dim() == 1 else token_ids
        resolved_labels = _resolved_labels(config, token_ids, labels, pad_id, token_resolved)
        if resolved_labels is not None:
            return _predict_resolved(model, token_ids, resolved_labels if gradients else None, segment_ids, pad_id,
                                     grad_top, int(attention_heads), int(attention_seed), tick, meta)
    if input_moments is None:
        input_moments, meta["input_source"] = input_moments_theory(model, token_ids, pad_id, segment_ids,
                                                                   images=images)
    else:
        meta["input_source"] = "given"

    fwd_rows = {(-1, "input"): input_moments}
    m_enc, saved_enc = _forward_stack(list(model.layers), input_moments, ctx, fwd_rows, tick)
    m, dec_ctx = m_enc, ctx
    if config.arch == "encoder_decoder":
        memory = model.enc_norm.forward_moments(m_enc) if model.enc_norm is not None else m_enc
        L_dec = int(decoder_token_ids.shape[-1]) if decoder_token_ids is not None else L
        dec_ctx = {**ctx, "L": L_dec, "memory_moments": memory, "L_memory": L}
        m_dec, src = input_moments_theory(model, decoder_token_ids, pad_id, decoder=True)
        meta["decoder_input_source"] = src.replace("token ids of the batch", "decoder token ids of the batch")
        fwd_rows[(config.n_layers, "dec_input")] = m_dec
        m, saved_dec = _forward_stack(list(model.dec_layers), m_dec, dec_ctx, fwd_rows, tick)

    grad_rows: dict = {}
    if not gradients:
        meta["grad_source"] = NO_GRADIENTS
    else:
        _backward_sweeps(model, m, m_enc, saved_enc, saved_dec if config.arch == "encoder_decoder" else None, grad_top,
                         labels, batch_size, ctx, dec_ctx, grad_rows, meta, tick)
    meta["attention_rule"] = _attention_rules(model)
    if "sampled" in meta["attention_rule"]:
        meta["attention_rule"] += f" ({attention_heads} heads per layer, seed {attention_seed}, one stream per layer)"
    if resolved:
        resolved_fwd, _, meta["forward_state"] = _resolved_rows(model, token_ids, segment_ids, pad_id, None,
                                                                attention_heads, int(attention_seed), tick)
        fwd_rows.update(resolved_fwd)
        meta["backward_state"] = ("exchangeable tokens (an encoder's default; token_resolved=True with labels "
                                  "resolves it too)")
    else:
        meta["forward_state"] = "exchangeable tokens (one correlation for every token pair)"
        meta["backward_state"] = "exchangeable tokens"
    if config.arch != "encoder":
        meta["caveat"] = DECODER_CAVEAT
    return _profile(config, fwd_rows, grad_rows, meta)


def _backward_sweeps(model: Transformer, m, m_enc, saved_enc, saved_dec, grad_top, labels, batch_size: int, ctx: dict,
                     dec_ctx: dict, grad_rows: dict, meta: dict, tick) -> None:
    """:func:`predict`'s exchangeable backward sweeps into ``grad_rows`` (the decoder's first for an
    encoder–decoder, then the encoder's from the gradient its memory receives), from ``grad_top`` or the loss."""
    config = model.config
    if grad_top is None:
        grad_top, meta["grad_source"] = head_gradient_moments(model, m, labels, dec_ctx["L"], batch_size)
    else:
        meta["grad_source"] = "given"
    g = grad_top
    if config.arch == "encoder_decoder":
        g_dec, memory_grads = _backward_stack(list(model.dec_layers), saved_dec, g, dec_ctx, grad_rows, tick)
        grad_rows[(config.n_layers, "dec_input")] = g_dec
        meta["memory_gradient"] = [{"layer": i, "var": _f(gr.var), "corr": _f(gr.corr)}
                                   for i, gr in sorted(memory_grads, key=lambda item: item[0])]
        memory_grads = [gr for _, gr in memory_grads if np.all(np.asarray(gr.var) > 0)]
        g = sum_gradients(memory_grads) if memory_grads else None
        if g is None:  # every cross-attention's β is 0: the loss does not depend on the encoder
            meta["encoder_gradient"] = "none: every cross-attention branch is scaled by beta = 0"
        elif model.enc_norm is not None:
            g = model.enc_norm.backward_moments(g, m_enc)
    if g is not None:
        g, _ = _backward_stack(list(model.layers), saved_enc, g, ctx, grad_rows, tick)
        grad_rows[(-1, "input")] = g
    else:
        tick(len(model.layers))


def _profile(config: TransformerConfig, fwd_rows: dict, grad_rows: dict, meta: dict) -> Profile:
    """The predicted :class:`Profile` from forward and gradient rows keyed by (layer, site)."""
    rows = []
    for key, mf in fwd_rows.items():
        gr = grad_rows.get(key)
        rows.append(Row(key[0], key[1], _f(mf.mean), _f(mf.var), _f(mf.corr),
                        _f(gr.var) if gr is not None else 0.0, _f(gr.corr) if gr is not None else float("nan")))
    return Profile("predicted", config.to_dict(), tuple(rows), meta)


def _predict_resolved(model: Transformer, token_ids: torch.Tensor, labels: torch.Tensor | None, segment_ids, pad_id,
                      grad_top: GradMoments | None, heads: int, seed: int, tick, meta: dict) -> Profile:
    """:func:`predict` with both sweeps token-resolved (:mod:`sigprop.resolved`, :mod:`sigprop.resolved_backward`;
    ``labels`` None: the forward sweep only). A given ``grad_top`` sets the gradient's scale (the sweep is linear in
    it); which positions and pairs carry gradient, and how correlated, comes from the labels."""
    fwd_rows, grad_rows, meta["forward_state"] = _resolved_rows(model, token_ids, segment_ids, pad_id, labels, heads,
                                                                 seed, tick)
    patches = model.config.input == "patches"
    meta["input_source"] = ("the batch's images through the patch embedding (App. A.2, H), token by token" if patches
                            else "token ids of the batch (App. A.1), token by token")
    if labels is None:
        meta["grad_source"] = NO_GRADIENTS
    elif grad_top is None:
        meta["grad_source"] = ("cross-entropy of the images' classes through the mean-pooled head (theory), token by "
                               "token" if patches else
                               "cross-entropy of the batch's labels through the head (theory), token by token")
    else:
        top = grad_rows[(model.config.n_layers - 1, "layer")]
        scale = _f(grad_top.var) / _f(top.var)
        grad_rows = {k: GradMoments(var=g.var * scale, corr=g.corr) for k, g in grad_rows.items()}
        meta["grad_source"] = ("given: it sets the gradient's scale; which positions and token pairs carry gradient, "
                               "and how correlated, comes from the batch's labels")
    meta["attention_rule"] = f"token-resolved sampled: layers 0-{model.config.n_layers - 1}"
    meta["backward_state"] = ("token-resolved: each image's gradient Gram matrix, from the mean-pooled head" if patches
                              else "token-resolved: each sequence's gradient Gram matrix, from the labelled positions")
    return _profile(model.config, fwd_rows, grad_rows or {}, meta)
