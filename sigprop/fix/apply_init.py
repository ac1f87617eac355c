"""Re-initialise a model in place under an init scheme: ``sigprop.apply_init(model, scheme)`` for a sigprop
:class:`~sigprop.model.transformer.Transformer` or a Hugging Face model of a family with a weight layout
(:data:`sigprop.hf.weights.LAYOUTS`: GPT-2, OPT with LayerNorm before each branch, Llama, Qwen2, Mistral, Qwen3,
Phi-3, Gemma, GPT-NeoX, Phi, BERT, RoBERTa, ViT).

A sigprop model is redrawn from the scheme's plan (:class:`~sigprop.model.init.InitPlan`), its λ, β and head scale
included, and records the scheme in its ``config`` and ``plan``.

A Hugging Face model has no λ and β: its Pre-LN block computes x + f(Norm x). Its configuration is mapped
(:func:`~sigprop.hf.config_map.map_hf_config`, with the residual scales the mapping reads from GPT-2's c_proj
convention removed, so the scheme's own apply), every matrix is drawn with the scheme's standard deviation for its role
(token and position tables, W_Q, W_K, W_V, W_O, the FFN's W_1 (Llama's gate_proj), W_3 (up_proj) and W_2, an untied
head), biases are zero and norms start at weight 1, and the scheme's residual scales are carried the way
:mod:`sigprop.fix.fold` folds them: each branch's output projection is multiplied by β_l/Π_{j≤l} λ_j and the final
norm's weight by the head scale. At initialisation the Hugging Face model then computes the function of sigprop's
model of the scheme (exactly up to the norms' ε, whose effective value the fold moves; BERT and RoBERTa excepted:
their embedding LayerNorm, which sigprop's model does not have, brings the embedding sum to unit variance whatever
the scheme's embedding scale, so their input differs by that factor). Its residual stream is
sigprop's divided by c_l = Π_{j≤l} λ_j (a vanilla block cannot shrink the stream; the norms do not see the scale), so
after layer l its forward variance is sigprop's / c_l² and its gradient variance sigprop's · c_l²
(``tests/hf/test_apply_init.py``: every layer's measured variances, so rescaled, within Z standard errors of the
sigprop model's).

What differs for training: the scales now live in the weights, so an optimiser sees other parameters. Under Adam,
whose step is scale-free per parameter, an output projection scaled by β/c takes steps of the unscaled size, i.e.
β/c times larger relative to its weights than sigprop's (DeepScaleLM's λ, β stay constant while W_O, W_2 learn); and
weight decay acts on the scaled matrices. Learnable β has no counterpart.
"""

from __future__ import annotations

import torch
from torch import nn

from .fold import plan_branch_scales

__all__ = ["apply_init"]


def apply_init(model: nn.Module, scheme: str, generator: torch.Generator | None = None) -> nn.Module:
    """Re-initialise a sigprop or Hugging Face model in place under an init scheme, and return it.

    A sigprop :class:`~sigprop.model.transformer.Transformer` is redrawn from the scheme's plan, its λ, β and head
    scale included (β becomes a learnable parameter or a fixed buffer as the scheme has it: build the optimiser
    after), and records the scheme in its ``config`` and ``plan``. A Hugging Face model of a family with a
    weight layout (:data:`sigprop.hf.weights.LAYOUTS`) gets every matrix drawn with the scheme's standard deviation
    for its role, zero biases, norms at weight 1, and the scheme's residual scales folded into the weights as
    :mod:`sigprop.fix.fold` folds them (each branch's output projection × β_l/Π_{j≤l} λ_j, the final norm's weight ×
    the head scale; Kedia et al. Sec. 3.5): at initialisation it then computes the function of sigprop's model of
    the scheme (module docstring, also on what differs for training).

    Args:
        model: a sigprop ``Transformer`` or a Hugging Face model of a mapped family (GPT-2, OPT with LayerNorm
            before each branch, Llama, Qwen2, Mistral, Phi-3, …).
        scheme: a name of :data:`sigprop.model.init.SCHEMES` (``"auto"``: :func:`sigprop.plan_for` calibrates it
            for the model's configuration).
        generator: the weights' random stream (default: torch's global one).

    Returns:
        ``model``, re-initialised.

    Raises:
        ValueError: an unknown scheme, a model family sigprop cannot re-initialise, or a head scale the model's
            final norm cannot carry, before any weight changes.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> model = sigprop.apply_init(sigprop.Transformer(config), "dslm", torch.Generator().manual_seed(0))
        >>> model.config.init, model.plan.scheme, float(model.head_scale)  # DSLM's head input × 1/√d (Sec. 4.1)
        ('dslm', 'dslm', 0.25)
        >>> sigprop.apply_init(model, "glorot")
        Traceback (most recent call last):
        ...
        ValueError: scheme must be one of xavier, ... (got 'glorot')
    """
    from ..components.residual import Residual
    from ..hf.weights import check_covered, hf_weights
    from ..measurement.adapters import is_hf_model
    from ..model.init_schemes import SCHEME_NAMES
    from ..model.transformer import Transformer, plan_for

    if scheme not in SCHEME_NAMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEME_NAMES)} (got {scheme!r})")
    if isinstance(model, Transformer):
        config = model.config.replace(init=scheme, lam=None, beta=None)  # the scheme's own residual scales
        plan = plan_for(config)
        for module in model.modules():  # SkipInit/ReZero/LayerScale learn β, the other schemes fix it
            if isinstance(module, Residual):
                module.set_learnable_beta(plan.learnable_beta)
        with torch.no_grad():
            plan.apply(model, generator)
        model.config, model.plan = config, plan
        return model
    if not is_hf_model(model):
        raise ValueError(f"apply_init re-initialises sigprop models and Hugging Face models (got a "
                         f"{type(model).__name__}, which is neither)")
    layout = hf_weights(model)  # a family without a layout: ValueError naming why, before any weight changes
    check_covered(model, layout)  # every weight gets the scheme's draw, or none does
    config, plan, factors = _hf_plan(model, scheme)
    if plan.head_scale != 1.0 and getattr(layout.final_norm, "weight", None) is None:
        raise ValueError(f"scheme {scheme!r} scales the head's input by {plan.head_scale:.4g}, which this model's "
                         "final norm (absent or without a weight) cannot carry")
    draw = _Drawer(generator)
    with torch.no_grad():
        for slot in layout.slots:
            draw.normal(slot.tensor, plan.std(slot.role, slot.layer))
            if slot.role in _FOLDED:  # a parallel block's one residual carries both branches' scale
                slot.tensor.mul_(factors[slot.layer]["attn" if config.parallel_block else _FOLDED[slot.role]])
        _zero(*(m for _, m in layout.biases), *(() if layout.head is None else (layout.head,)))
        for _, norm in layout.norms:
            _norm(norm, 1.0 - layout.gain_offset)
        if layout.final_norm is not None:
            _norm(layout.final_norm, plan.head_scale - layout.gain_offset)
    return model


#: The output projections that carry a branch's folded residual scale, and the branch.
_FOLDED = {"o": "attn", "w2": "ffn"}


def _hf_plan(model, scheme: str):
    """The mapped config under ``scheme`` (without the mapping's residual scales), its plan and the fold factors."""
    from ..hf.config_map import map_hf_config
    from ..model.transformer import plan_for

    config = map_hf_config(model).config.replace(init=scheme, lam=None, beta=None)
    plan = plan_for(config)
    return config, plan, plan_branch_scales(config, plan)


class _Drawer:
    def __init__(self, generator):
        self.generator = generator

    def normal(self, tensor: torch.Tensor, std: float) -> None:
        tensor.normal_(0.0, float(std), generator=self.generator)


def _zero(*modules) -> None:
    for m in modules:
        if getattr(m, "bias", None) is not None:
            m.bias.zero_()


def _norm(norm: nn.Module, weight: float = 1.0) -> None:
    if getattr(norm, "weight", None) is not None:
        norm.weight.fill_(weight)
    if getattr(norm, "bias", None) is not None:
        norm.bias.zero_()
