"""``sigprop.predict``: every layer's moments at initialisation, by walking the model's own module tree with
statistics instead of tensors (ARCHITECTURE.md; Kedia et al. Sec. 2.3, App. E).

What is predicted is a model: a config (built with its init scheme's plan), or a :class:`~sigprop.model.Transformer`
as it is, its per-parameter standard deviations read from its weights (:meth:`InitPlan.from_model
<sigprop.model.init.InitPlan.from_model>`) unless a plan is given. The rules read the plan's declared values; no weight
is drawn (the theory's model keeps its weight matrices on PyTorch's ``meta`` device).

Forward sweep: the input boundary (:mod:`sigprop.theory.boundaries`) goes through every layer (:mod:`sigprop.theory.
sweep`); backward sweep: the gradient at the last layer's output (from the loss through the head and the final
norm, or given, e.g. measured) goes back down. Two states (:mod:`sigprop.walk.walker`):

* exchangeable (:class:`~sigprop.walk.exchangeable.ExchangeableState`): one correlation for every token pair, as
  the paper;
* token-resolved (:class:`~sigprop.theory.resolved.GramState`): each sequence's token Gram matrix, from a batch's
  token ids or images. By default the forward sweep is token-resolved whenever a batch is given and every token
  mixer has a Gram rule; the backward sweep too for a decoder and a patch model, and for an encoder that opts in
  with its labels (``token_resolved=True``; the measured reasons: :func:`resolved_labels`).

:class:`Prediction` is the sweep object a caller holds to reuse the forward sweeps under several gradient
boundaries (``compare`` predicts before it measures, to fail fast, and again from the measured boundary).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from ..components.attention_bounded import DEFAULT_QUERIES, bounded_heads
from ..components.draws import DEFAULT_HEADS
from ..core.moments import GradMoments, Moments, Stat
from ..core.profile import Profile, Row
from ..core.validate import integer_value
from ..model.config import TransformerConfig
from ..model.init import InitPlan
from ..model.objective import check_model_inputs
from ..model.size import gram_bytes, resolved_by_default
from ..model.transformer import Transformer
from ..walk.exchangeable import EXCHANGEABLE
from ..walk.walker import Site
from . import boundaries
from .resolved import GramState, resolved_supported
from .sweep import ForwardWalk, backward_sweep, forward_sweep, gram_forward_sweep

__all__ = ["predict", "Prediction", "theory_model", "prediction_steps", "resolved_labels", "DECODER_CAVEAT",
           "NO_GRADIENTS"]

#: What a decoder's prediction does not capture (stated in its meta and by the CLI).
DECODER_CAVEAT = ("decoder with exchangeable sweeps: the moments passed from layer to layer are averages over "
                  "positions, which a causal mask makes unequal; Pre-LN variances are verified within measurement "
                  "noise, token correlations and Post-LN gradients are approximate (the token-resolved sweeps keep "
                  "positions apart; see docs/results/accuracy.md, \"Decoders\")")
NO_GRADIENTS = "not computed (gradients=False: the forward sweep only)"
_EXCHANGEABLE_FORWARD = "exchangeable tokens (one correlation for every token pair)"
#: The gradient rows of a sweep: pooled gradients (None where exactly zero), or Gram matrices.
_GradRows = dict[Site, GradMoments | torch.Tensor | None]


def theory_model(model_or_config: TransformerConfig | Transformer, plan: InitPlan | None = None) -> Transformer:
    """The model the theory walks: a :class:`Transformer` of the config's (or the model's) configuration whose
    declared standard deviations are ``plan``'s, by default the config's scheme, or for a model the one read from
    its weights (:meth:`InitPlan.from_model`; a model on the ``meta`` device has none and gives its own plan). Its
    weight matrices are never drawn."""
    if isinstance(model_or_config, TransformerConfig):
        return Transformer(model_or_config, plan=plan, sample=False)
    if isinstance(model_or_config, Transformer):
        if plan is None:  # a model on the meta device has no weights to read: its own plan
            weights_on_meta = any(p.is_meta for p in model_or_config.parameters())
            plan = model_or_config.plan if weights_on_meta else InitPlan.from_model(model_or_config)
        return Transformer(model_or_config.config, plan=plan, sample=False)
    raise ValueError("predict takes a TransformerConfig or a sigprop Transformer "
                     f"(got {type(model_or_config).__name__})")


def resolved_labels(config: TransformerConfig, token_ids: torch.Tensor, labels: torch.Tensor | None, pad_id: int | None,
                    token_resolved: bool | None) -> torch.Tensor | None:
    """The labels the token-resolved backward sweep starts from, or None where the backward sweep stays exchangeable.
    A decoder: the given labels, else its next tokens (:func:`~sigprop.data.causal_lm_labels`), unless
    ``token_resolved=False``. An encoder: the given labels with ``token_resolved=True`` only.

    Why encoders opt in: for decoders the token-resolved backward sweep is far closer to the measurement; for
    masked-LM encoders it is closer on some presets but not across depth and width, since it takes the top layer's
    gradient correlation from the loss where the exchangeable sweep starts from the measured top layer (the figures:
    the accuracy page, docs/results/accuracy.md, "The token-resolved backward sweep")."""
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


def prediction_steps(config: TransformerConfig, token_ids_given: bool = False,
                     token_resolved: bool | None = None, labels_given: bool = False, gradients: bool = True,
                     batch_size: int = 1) -> int:
    """The number of ``progress`` steps a prediction reports: a layer per sweep. Exchangeable: forward and
    backward. Token-resolved (token ids given, model covered): forward and backward, both token-resolved for a
    decoder and a patch model (its images given as ``token_ids_given``), or for an encoder with ``labels_given``
    and ``token_resolved=True``; else the token-resolved forward on top of both exchangeable sweeps.
    ``gradients=False``: the forward sweeps only. ``batch_size``: the batch's sequences (the token-resolved sweep is
    the default only where it is cheap, :func:`~sigprop.model.size.resolved_by_default`)."""
    sweeps = 2 if gradients else 1
    # which token mixers the model holds does not depend on its depth or scheme: a one-layer model of its kinds says
    kinds = config.replace(n_layers=1, n_decoder_layers=1 if config.arch == "encoder_decoder" else None,
                           init="xavier")
    covered = resolved_supported(Transformer(kinds, sample=False)) is None
    resolved = token_ids_given and token_resolved is not False and covered and (
        token_resolved or resolved_by_default(config, batch_size))
    both = config.arch == "decoder" or config.input == "patches" or (labels_given and token_resolved)
    if resolved and both:
        return sweeps * config.n_layers
    return sweeps * config.total_layers + (config.n_layers if resolved else 0)


class Prediction:
    """The theory of one model on one input, held by the caller: the forward sweeps run once (:meth:`forward`) and
    serve every gradient boundary asked of :meth:`profile`; a token-resolved backward sweep runs once too (a given
    boundary only rescales it, the sweep being linear in the gradient), after which its layers' Gram matrices are
    freed. Arguments as :func:`predict`'s; everything is validated here, before any sweep runs."""

    def __init__(self, model_or_config: TransformerConfig | Transformer, *, plan: InitPlan | None = None,
                 token_ids: torch.Tensor | None = None,
                 images: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                 input_moments: Moments | None = None, seq_len: int | None = None, batch_size: int = 1,
                 pad_id: int | None = None, segment_ids: torch.Tensor | None = None,
                 decoder_token_ids: torch.Tensor | None = None, attention_heads: int = DEFAULT_HEADS,
                 attention_seed: int = 0, token_resolved: bool | None = None) -> None:
        self.model = model = theory_model(model_or_config, plan)
        config = self.config = model.config
        self.heads = integer_value(attention_heads, "attention_heads (heads the sampled attention rule draws per "
                                   "layer)", 2)
        self.seed = integer_value(attention_seed, "attention_seed", 0)
        self.batch_size = integer_value(batch_size, "batch_size", 1)
        if input_moments is not None and not isinstance(input_moments, Moments):
            raise ValueError(f"input_moments must be a Moments (got {type(input_moments).__name__})")
        token_ids, images, labels, decoder_token_ids = check_model_inputs(
            config, token_ids=token_ids, images=images, labels=labels, decoder_token_ids=decoder_token_ids,
            segment_ids=segment_ids, pad_id=pad_id)
        self.token_ids, self.images, self.labels = token_ids, images, labels
        self.segment_ids, self.pad_id, self.decoder_token_ids = segment_ids, pad_id, decoder_token_ids
        self.input_moments = input_moments
        if seq_len is not None:
            seq_len = integer_value(seq_len, "seq_len", 2)
        batch_input = images if config.input == "patches" else token_ids
        self.L = int(seq_len or (token_ids.shape[-1] if token_ids is not None else config.seq_len))
        self.context = {"L": self.L, "attention_heads": self.heads, "attention_seed": self.seed}
        self.resolved = self._use_resolved(batch_input, token_resolved)
        # the labels of a token-resolved backward sweep, or None: exchangeable
        self.resolved_labels: torch.Tensor | None = None
        if self.resolved and config.input == "patches":
            n_images = cast(torch.Tensor, images).shape[0]  # a resolved sweep has its batch
            self.resolved_labels = torch.zeros(n_images, dtype=torch.long) if labels is None else labels
        elif self.resolved:
            self.resolved_labels = resolved_labels(config, cast(torch.Tensor, token_ids), labels, pad_id,
            token_resolved)
        self.both_resolved = self.resolved and self.resolved_labels is not None
        self._exchangeable: tuple[ForwardWalk[Moments, GradMoments], dict[str, Any]] | None = None  # once run
        self._gram: ForwardWalk[torch.Tensor, torch.Tensor] | None = None  # until a backward sweep has used it
        self._gram_rows: dict[Site, Moments | torch.Tensor] | None = None  # the token-resolved forward rows
        self._gram_grads: _GradRows | None = None  # the token-resolved backward rows (from the loss)
        self._exchangeable_rules: tuple[str, bool] | None = None  # the exchangeable forward walk's attention rules
        self._gram_rules = ""  # the token-resolved forward walk's attention rules

    def _use_resolved(self, batch_input: torch.Tensor | None, token_resolved: bool | None) -> bool:
        self.resolved_note: str | None = None  # why a batch's prediction is not token-resolved by default
        if token_resolved is False:
            return False
        reason: str | None
        if batch_input is None:
            reason = "no token ids given"
        elif self.input_moments is not None:
            reason = "input_moments override the input boundary"
        else:
            reason = resolved_supported(self.model)
        if reason is not None and token_resolved:
            raise ValueError(f"token_resolved=True: not available for this model ({reason})")
        size = 0 if batch_input is None else len(batch_input)
        if reason is None and token_resolved is None and not resolved_by_default(self.config, size, self.L):
            gb = gram_bytes(self.config, size, self.L) / 1e9
            self.resolved_note = (f"exchangeable: the token-resolved sweep's Gram matrices would take {gb:.3g} GB "
                                  "(token_resolved=True, --token-resolved, asks for them)")
            return False
        return reason is None

    # -- progress ------------------------------------------------------------------------------------------------
    def steps(self, gradients: bool = True, spread: bool = False) -> int:
        """The ``progress`` steps of :meth:`profile` from here on: a layer per sweep still to run, and with
        ``spread`` the spread's (:func:`~sigprop.theory.spread.spread_steps`)."""
        from .spread import spread_steps

        n, total = self.config.n_layers, self.config.total_layers
        extra = spread_steps(n) if spread else 0
        if self.both_resolved:
            fwd = 0 if self._gram_rows is not None else n
            return fwd + (n if gradients and self._gram_grads is None else 0) + extra
        fwd = (0 if self._exchangeable is not None else total) + (n if self.resolved and self._gram_rows is None
                                                                 else 0)
        return fwd + (total if gradients else 0) + extra

    # -- sweeps --------------------------------------------------------------------------------------------------
    def forward(self, progress: Callable[[int], None] | None = None) -> None:
        """Run the forward sweeps (once; a model outside the rules' domain fails here)."""
        if self.both_resolved:
            self._gram_forward(progress)
            return
        if self._exchangeable is None:
            self._exchangeable = self._exchangeable_forward(progress)
            self._exchangeable_rules = _attention_rules(self.model)  # before a token-resolved walk re-resolves them
        if self.resolved:
            self._gram_forward(progress)

    def _exchangeable_forward(self, progress: Callable[[int], None] | None
                              ) -> tuple[ForwardWalk[Moments, GradMoments], dict[str, Any]]:
        meta: dict[str, Any]
        model, config, meta = self.model, self.config, {}
        if self.input_moments is None:
            m0, meta["input_source"] = boundaries.input_moments_theory(
                model, self.token_ids, self.pad_id, self.segment_ids, images=self.images)
        else:
            m0, meta["input_source"] = self.input_moments, "given"
        inputs, contexts = [m0], [self.context]
        if config.arch == "encoder_decoder":
            m_dec, src = boundaries.input_moments_theory(model, self.decoder_token_ids, self.pad_id, decoder=True)
            meta["decoder_input_source"] = src.replace("token ids of the batch", "decoder token ids of the batch")
            L_dec = int(self.decoder_token_ids.shape[-1]) if self.decoder_token_ids is not None else self.L
            inputs.append(m_dec)
            contexts.append({**self.context, "L": L_dec})
        return forward_sweep(model, EXCHANGEABLE, inputs, self.context, progress, contexts), meta

    def _gram_forward(self, progress: Callable[[int], None] | None) -> None:
        if self._gram_rows is not None:
            return
        batch_input = cast(torch.Tensor, self.images if self.config.input == "patches" else self.token_ids)
        padding = None if self.pad_id is None else cast(torch.Tensor, self.token_ids) != self.pad_id
        heads = max(2, -(-self.heads // int(batch_input.shape[0])))
        walk = gram_forward_sweep(self.model, batch_input, self.segment_ids, padding, heads, self.seed, progress)
        self._gram, self._gram_rows = walk, walk.rows
        self._gram_rules = _attention_rules(self.model)[0]
        unit = "image" if self.config.input == "patches" else "sequence"
        draws = f" ({heads} attention heads per {unit}, seed {self.seed})" if "sampled" in self._gram_rules else ""
        self._gram_state = f"token-resolved: each {unit}'s token Gram matrix{draws}"

    def _gram_backward(self, progress: Callable[[int], None] | None) -> _GradRows:
        if self._gram_grads is None:
            walk, model = cast(ForwardWalk[torch.Tensor, torch.Tensor], self._gram), self.model  # the forward ran
            top = (boundaries.pooled_head_gradient_gram(model, walk.output) if self.config.input == "patches"
                   else boundaries.head_gradient_gram(model, walk.output, cast(torch.Tensor, self.resolved_labels)))
            self._gram_grads = backward_sweep(model, walk, top, progress).rows
            cast(GramState,
            walk.state).attention_out.clear()  # 2 B·L² floats a layer: 0.8 GB at 768 layers, B = 4, L = 128
            self._gram = None
        return self._gram_grads

    # -- the profile ---------------------------------------------------------------------------------------------
    def profile(self, grad_top: GradMoments | None = None, gradients: bool = True,
                progress: Callable[[int], None] | None = None, spread: bool = False) -> Profile:
        """The predicted :class:`~sigprop.core.profile.Profile`: the forward sweeps (run once), and with
        ``gradients`` the backward sweep from ``grad_top`` (the gradient at the last layer's output), or from the
        loss when it is None. ``gradients=False`` gives the forward rows only (every gradient column 0 / NaN).
        ``spread``: also each layer row's predicted seed-to-seed spread (:func:`predict`; ``ValueError`` before any
        sweep for a model it does not cover: :func:`~sigprop.theory.spread.check_spread`)."""
        from .spread import check_spread, predict_spread

        if spread:
            check_spread(self.config)
        profile = self._moments_profile(grad_top, gradients, progress)
        if not spread:
            return profile
        return predict_spread(self.model, profile, self.context, self.sequences, self.L, progress=progress,
                              gradient_correlation=not self.both_resolved).apply(profile)

    @property
    def sequences(self) -> int:
        """B, the sequences of the batch the prediction is of: the token ids' (or images') rows, else
        ``batch_size``."""
        batch_input = self.images if self.config.input == "patches" else self.token_ids
        return int(batch_input.shape[0]) if batch_input is not None and batch_input.ndim > 1 else self.batch_size

    def _moments_profile(self, grad_top: GradMoments | None, gradients: bool,
                         progress: Callable[[int], None] | None) -> Profile:
        if grad_top is not None and not isinstance(grad_top, GradMoments):
            raise ValueError(f"grad_top must be a GradMoments (got {type(grad_top).__name__})")
        self.forward(progress)
        meta: dict[str, Any] = {"seq_len": self.L}
        if self.both_resolved:
            return self._resolved_profile(grad_top, gradients, progress, meta)
        walk, fwd_meta = cast(tuple[ForwardWalk[Moments, GradMoments], dict[str, Any]], self._exchangeable)  # ran
        meta.update(fwd_meta)
        fwd_rows = dict(walk.rows)
        grad_rows = {}
        if not gradients:
            meta["grad_source"] = NO_GRADIENTS
        else:
            grad_rows = self._exchangeable_backward(walk, grad_top, progress, meta)
        # the exchangeable rules (both sweeps resolve them alike); where a token-resolved forward walk ran after the
        # exchangeable one, the module's last rule is its, so the exchangeable walk's are those kept before it
        rule, sampled = (self._exchangeable_rules if self.resolved and self._exchangeable_rules is not None
                         else _attention_rules(self.model))
        if sampled:
            rule += f" ({self.heads} heads per layer, seed {self.seed}, one stream per layer)"
        if "bounded" in rule:
            rule += (f" (bounded: {DEFAULT_QUERIES} query positions in each of "
                     f"{_bounded_heads(self.model, self.heads, self.L)} heads per layer, in the 2·d_head input "
                     f"coordinates that reach the scores; seed {self.seed}, one stream per layer)")
        meta["attention_rule"] = rule
        if self.resolved:
            meta["attention_rule"] = (f"forward: {self._gram_rules}"
                                      + (f"; backward (exchangeable): {rule}" if gradients else ""))
            fwd_rows.update(cast(dict[Site, Moments], self._gram_rows))  # pooled
            meta["forward_state"] = self._gram_state
            meta["backward_state"] = ("exchangeable tokens (an encoder's default; token_resolved=True with labels "
                                      "resolves it too)")
        else:
            meta["forward_state"] = _EXCHANGEABLE_FORWARD
            meta["backward_state"] = "exchangeable tokens"
            if self.resolved_note is not None:
                meta["token_resolved"] = self.resolved_note
        caveats = [DECODER_CAVEAT] if self.config.arch != "encoder" else []
        if self._padded() and (gradients or not self.resolved):
            swept = "backward" if self.resolved else "forward and backward"
            caveats.append(f"the batch is padded: the exchangeable {swept} sweep reads every sequence at its padded "
                           f"length (L = {self.L}, padded keys attended), so its variances are biased where lengths "
                           "differ; the token-resolved sweeps keep padding out (token_resolved=True with labels "
                           "resolves the backward too)")
        if caveats:
            meta["caveat"] = "; ".join(caveats)
        return _profile(self.config, fwd_rows, grad_rows, meta, self.model.plan)

    def _padded(self) -> bool:
        """Whether the batch's token ids hold padding (``pad_id`` given and present)."""
        ids = self.token_ids
        return ids is not None and self.pad_id is not None and bool((ids == self.pad_id).any())

    def _exchangeable_backward(self, walk: ForwardWalk[Moments, GradMoments], grad_top: GradMoments | None,
                               progress: Callable[[int], None] | None, meta: dict) -> dict:
        model = self.model
        if grad_top is None:
            L_top = walk.stacks[-1].context["L"]
            # the loss is over the decoder's tokens in an encoder–decoder, else over the input's
            targets = self.decoder_token_ids if self.config.arch == "encoder_decoder" else self.token_ids
            padding = None if self.pad_id is None or self.labels is None or targets is None else targets != self.pad_id
            grad_top, meta["grad_source"] = boundaries.head_gradient_moments(model, walk.output, self.labels, L_top,
                                                                            self.sequences, padding)
        else:
            meta["grad_source"] = "given"
        back = backward_sweep(model, walk, grad_top, progress)
        if self.config.arch == "encoder_decoder":
            meta["memory_gradient"] = [{"layer": i, "var": _f(g.var), "corr": _f(g.corr)} for i, g in back.memory]
            if not back.encoder_reached:
                meta["encoder_gradient"] = "none: every cross-attention branch is scaled by beta = 0"
        return back.rows

    def _resolved_profile(self, grad_top: GradMoments | None, gradients: bool, progress: Callable[[int], None] | None,
                          meta: dict) -> Profile:
        patches = self.config.input == "patches"
        meta["forward_state"] = self._gram_state
        meta["input_source"] = ("the batch's images through the patch embedding (App. A.2, H), token by token"
                                if patches else "token ids of the batch (App. A.1), token by token")
        grad_rows: dict[Site, GradMoments | None] = {}
        pooled = "[CLS]" if self.config.pool == "cls" else "mean-pooled"
        if not gradients:
            meta["grad_source"] = NO_GRADIENTS
        else:
            grad_rows = cast(dict[Site, GradMoments | None], self._gram_backward(progress))  # pooled
            if grad_top is None:
                meta["grad_source"] = (f"cross-entropy of the images' classes through the {pooled} head (theory), "
                                       "token by token" if patches else
                                       "cross-entropy of the batch's labels through the head (theory), token by token")
            else:
                top = cast(GradMoments, grad_rows[(self.config.n_layers - 1, "layer")])
                scale = _f(grad_top.var) / _f(top.var)
                grad_rows = {k: (None if g is None else GradMoments(var=g.var * scale, corr=g.corr))
                             for k, g in grad_rows.items()}
                meta["grad_source"] = ("given: it sets the gradient's scale; which positions and token pairs carry "
                                       "gradient, and how correlated, comes from the batch's labels")
        meta["attention_rule"] = _attention_rules(self.model)[0]
        meta["backward_state"] = (f"token-resolved: each image's gradient Gram matrix, from the {pooled} head"
                                  if patches else
                                  "token-resolved: each sequence's gradient Gram matrix, from the labelled positions")
        return _profile(self.config, cast(dict[Site, Moments], self._gram_rows), grad_rows, meta, self.model.plan)


def predict(model_or_config: TransformerConfig | Transformer, *, plan: InitPlan | None = None,
            token_ids: torch.Tensor | None = None,
            input_moments: Moments | None = None, grad_top: GradMoments | None = None,
            labels: torch.Tensor | None = None, seq_len: int | None = None, batch_size: int = 1,
            pad_id: int | None = None, segment_ids: torch.Tensor | None = None,
            decoder_token_ids: torch.Tensor | None = None, attention_heads: int = DEFAULT_HEADS,
            attention_seed: int = 0, token_resolved: bool | None = None,
            progress: Callable[[int], None] | None = None, gradients: bool = True,
            images: torch.Tensor | None = None, spread: bool = False) -> Profile:
    """The predicted profile of a freshly initialised model: every site's moments, from theory alone.

    The theory's model (weights on the meta device: nothing is drawn) is walked layer by layer with its components'
    moment rules, forward from the input boundary and backward from the loss's gradient (ARCHITECTURE.md,
    "Predicting a model"). Assumes the component rules' assumptions (Gaussian pre-activations, initialisation-time
    independence of weights and inputs). Dropout is predicted as training applies it, whatever mode a given model is
    in; :func:`sigprop.measure` measures in the mode its caller set, so compare a model in training mode, or predict
    one in eval mode from its config with the dropout at 0. A decoder's positions are not exchangeable: where the
    sweeps are exchangeable (an encoder–decoder, ``token_resolved=False``) the moments passed from layer to layer
    are averages over positions, as the measurement's are (``meta["caveat"]``).

    Attention rule per layer (``meta["attention_rule"]``): the closed form where it is verified (score variance
    s² ≤ :data:`~sigprop.components.attention.CLOSED_FORM_MAX_S2` and, bidirectional, sequences of at least
    :data:`~sigprop.components.attention.CLOSED_FORM_MIN_L` tokens; causal
    :data:`~sigprop.components.attention.CAUSAL_MAX_S2`; no rotary positions or QK-norm), else the sampled rule
    (:mod:`~sigprop.components.attention_sampled`: large scores such as Q/K at 2× Xavier, rotary positions), or where
    its draws would exceed :data:`~sigprop.components.attention.SAMPLED_MAX_NUMBERS` (production widths and
    sequences) the same expectation at bounded cost (:mod:`~sigprop.components.attention_bounded`); each layer draws
    from a seed of its own derived from ``attention_seed`` (:func:`~sigprop.components.draws.layer_seed`). Sampling
    dominates a prediction's time (the sampled rule's cost per layer against its number of heads: the results page
    bench-attention-sampled.txt; the bounded rule's: docs/results/scale.md).

    Token-resolved moments (``token_resolved``): the forward rows carry each sequence's token Gram matrix instead of
    one correlation for all token pairs (repeated tokens, [MASK], and a decoder's positions kept apart), sampling
    ⌈``attention_heads``/B⌉ heads per sequence for each attention layer whose scores are not all small (those that
    are take the uniform rule, :mod:`~sigprop.components.attention_uniform`). The sequences share those draws (common
    random numbers), so a statistic pooled over them carries the sampling error of ⌈``attention_heads``/B⌉ heads,
    not of ``attention_heads``: where it matters (short sequences, large scores), raise ``attention_heads`` B-fold.
    For a decoder (labels: ``labels``, else
    its next tokens), a patch model, and an encoder with ``labels`` and ``token_resolved=True``, the gradient rows are
    token-resolved too, from the loss's gradient at the labelled positions
    (:func:`~sigprop.theory.boundaries.head_gradient_gram`); a given ``grad_top`` then sets only the gradient's
    scale (the sweep is linear in it), and the exchangeable sweeps are not run. ``meta["forward_state"]`` and
    ``meta["backward_state"]`` say which was used.

    Encoder–decoders: the encoder's forward sweep gives the memory (after the encoder-output norm), which every
    decoder layer's cross-attention reads (:mod:`~sigprop.components.cross_attention`, sampled); the decoder's
    backward sweep collects the gradient each cross-attention sends to the memory, their sum goes back through the
    encoder-output norm and down the encoder. The decoder input's row is (``n_layers``, "dec_input").
    ``meta["memory_gradient"]`` lists each decoder layer's share, bottom layer first: ``{"layer", "var", "corr"}``
    of the gradient its cross-attention sends to the memory (the shares add, their value weights being
    independent).

    The keyword arguments come in four groups: the model (``plan``); the input boundary (``token_ids``, ``images``,
    ``input_moments``, ``segment_ids``, ``pad_id``, ``decoder_token_ids``, ``seq_len``); the gradient boundary
    (``grad_top``, ``labels``, ``batch_size``, ``gradients``); the sweep (``attention_heads``, ``attention_seed``,
    ``token_resolved``, ``progress``). Every one has a default: ``predict(config)`` is a whole prediction.

    Args:
        model_or_config: a :class:`~sigprop.model.TransformerConfig` (its init scheme's plan,
            :func:`sigprop.plan_for`), or a :class:`~sigprop.model.Transformer` predicted as it is, its standard
            deviations read from its weights (:meth:`InitPlan.from_model`; a model on the meta device: its own
            plan) unless ``plan`` is given.
        plan: the :class:`~sigprop.model.init.InitPlan` the rules read instead.
        token_ids: the model's input ids (batch, L): they set the input correlation (and the token-resolved
            state's Gram matrices).
        images: a patch model's input images (batch, channels, height, width), in place of ``token_ids``
            (:func:`~sigprop.theory.boundaries.input_moments_theory`).
        input_moments: the :class:`~sigprop.core.moments.Moments` at the first layer's input, overriding both.
        segment_ids: the token ids' segments (BERT's token types), the shape of ``token_ids``.
        pad_id: the padding id in ``token_ids`` (its positions are left out of the statistics).
        decoder_token_ids: an encoder–decoder's decoder input ids (default: the theory's Zipf correlation).
        seq_len: the L of the attention rules (default ``config.seq_len``; ``token_ids``' length when given).
        grad_top: the :class:`~sigprop.core.moments.GradMoments` at the last layer's output (an encoder–decoder's:
            the decoder's); otherwise they follow from the loss
            (:func:`~sigprop.theory.boundaries.head_gradient_moments`).
        labels: the loss's targets (−100 = unlabelled; default: the config's masked-LM rate, or every position for a
            decoder; a patch model's: one class per image).
        batch_size: sequences of the loss's batch when no ``labels`` say it.
        gradients: False runs the forward sweeps only (every gradient column 0 / NaN).
        attention_heads: heads per layer that the sampled attention rule draws.
        attention_seed: the seed each layer's draws derive from.
        token_resolved: use the token-resolved state (default: whenever ``token_ids`` are given, every token
            mixer has a Gram rule, :func:`~sigprop.theory.resolved.resolved_supported`, and its Gram matrices are
            cheap, :func:`~sigprop.model.size.resolved_by_default`, else ``meta["token_resolved"]`` says why not; for
            an encoder's backward sweep only when True; where it is more accurate, and where not:
            :func:`resolved_labels`).
        progress: ``progress(k)`` is called after every k layers of each sweep (:func:`prediction_steps` in all).
        spread: also predict, per layer row, the seed-to-seed standard deviation of the log forward variance
            (``fwd_var_log_sd``, given the embedding) and of the log gradient variance relative to the top layer
            (``grad_var_log_sd``): the finite-width departure of one weight draw from the expectation, which
            compounds with depth (:mod:`sigprop.theory.spread`: each layer's fresh fluctuation, a Monte Carlo of
            one layer, accumulated with the rules' linear response). One stack only (not an encoder–decoder).

    Returns:
        The predicted :class:`~sigprop.core.profile.Profile`: a row per site (the embedding output as layer −1,
        each layer's branches and output); its ``meta`` records the plan the rules read (``meta["plan"]``,
        :meth:`InitPlan.summary`), the boundaries, the attention rule per layer and the states used.

    Raises:
        ValueError: bad input before any sweep (token ids outside the vocabulary or of a float type, labels of
            another shape, images for a token model, ``token_resolved=True`` for a model it does not cover, …), or
            a rule's domain error, naming its layer.

    Example:
        >>> import sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> profile = sigprop.predict(config)
        >>> profile.kind, [(r.layer, r.site) for r in profile.site("layer")]
        ('predicted', [(0, 'layer'), (1, 'layer')])
        >>> variance = profile.column("fwd_var")
        >>> variance[1] > variance[0]  # Pre-LN: each layer adds its branches' variance (Kedia et al. App. E.1)
        True
        >>> profile.meta["plan"]["scheme"]
        'xavier'
    """
    prediction = Prediction(model_or_config, plan=plan, token_ids=token_ids, images=images, labels=labels,
                            input_moments=input_moments, seq_len=seq_len, batch_size=batch_size, pad_id=pad_id,
                            segment_ids=segment_ids, decoder_token_ids=decoder_token_ids,
                            attention_heads=attention_heads, attention_seed=attention_seed,
                            token_resolved=token_resolved)
    return prediction.profile(grad_top, gradients, progress, spread=spread)


def _profile(config: TransformerConfig, fwd_rows: dict, grad_rows: dict, meta: dict, plan: InitPlan) -> Profile:
    """The predicted :class:`Profile` from forward and gradient rows keyed by (layer, site); a gradient row that is
    missing or None (a branch scaled by β = 0) reads 0 / NaN."""
    rows = []
    for key, mf in fwd_rows.items():
        gr = grad_rows.get(key)
        rows.append(Row(key[0], key[1], _f(mf.mean), _f(mf.var), _f(mf.corr),
                        _f(gr.var) if gr is not None else 0.0, _f(gr.corr) if gr is not None else float("nan")))
    meta["plan"] = plan.summary()
    return Profile("predicted", config.to_dict(), tuple(rows), meta)


def _attention_rules(model: Transformer) -> tuple[str, bool]:
    """Which rule each layer's sampled-or-closed-form attention used (its ``rule_used``; one that reads an encoder's
    memory is named cross-attention), as one line, and whether any layer's rule was the sampled one."""
    rules: dict[str, list[int]] = {}
    sampled = False
    names = {"exact": "closed form", "sampled": "sampled", "bounded": "bounded Monte Carlo",
             "kedia": "the paper's form"}
    for layer in model.all_layers():
        module: Any  # one that declares sampled rules has rule_used
        for module in layer.modules():
            declared = getattr(type(module), "rules", None)
            if declared is not None and declared.sampled and module.rule_used is not None:
                kind = "cross-attention " if declared.memory else ""
                rules.setdefault(kind + names.get(module.rule_used, module.rule_used), []).append(layer.index)
                sampled = sampled or module.rule_used == "sampled"
    return "; ".join(f"{k}: {_ranges(v)}" for k, v in rules.items()) or "none", sampled


def _bounded_heads(model: Transformer, heads: int, L: int) -> str:
    """The heads the bounded rule draws per layer (:func:`~sigprop.components.attention_bounded.bounded_heads`)."""
    c = model.config
    return str(bounded_heads(heads, L, c.d_model, c.d_head))


def _ranges(idx: list[int]) -> str:
    """[0, 1, 2, 5] → "layers 0-2, 5"."""
    out: list[str] = []
    start: int | None = idx[0]
    for a, b in zip(idx, idx[1:] + [None], strict=True):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return "layers " + ", ".join(out)


def _f(x: Stat) -> float:
    return float(np.asarray(x))
