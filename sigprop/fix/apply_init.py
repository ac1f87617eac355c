"""Re-initialise a model in place under an init scheme: ``sigprop.apply_init(model, scheme)`` for a sigprop
:class:`~sigprop.model.transformer.Transformer` or a Hugging Face GPT-2 or Llama-family (Llama, Qwen2, Mistral) model.

A sigprop model is redrawn from the scheme's plan (:class:`~sigprop.model.init.InitPlan`), its λ, β and head scale
included, and records the scheme in its ``config`` and ``plan``.

A Hugging Face model has no λ and β: its Pre-LN block computes x + f(Norm x). Its configuration is mapped
(:func:`~sigprop.hf.config_map.map_hf_config`, with the residual scales the mapping reads from GPT-2's c_proj
convention removed, so the scheme's own apply), every matrix is drawn with the scheme's standard deviation for its role
(token and position tables, W_Q, W_K, W_V, W_O, the FFN's W_1 (Llama's gate_proj), W_3 (up_proj) and W_2, an untied
head), biases are zero and norms start at weight 1, and the scheme's residual scales are carried the way
:mod:`sigprop.fix.fold` folds them: each branch's output projection is multiplied by β_l/Π_{j≤l} λ_j and the final
norm's weight by the head scale. At initialisation the Hugging Face model then computes the function of sigprop's
model of the scheme (exactly up to the norms' ε, whose effective value the fold moves). Its residual stream is
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
    """Re-initialise ``model`` in place under init scheme ``scheme`` (a name of :data:`sigprop.model.init.SCHEMES`;
    module docstring; ``"auto"``: :func:`sigprop.model.transformer.plan_for` calibrates it for the model's
    configuration) and return it. ``generator``: the weights' random stream (default: torch's global one).
    ``ValueError`` for an unknown scheme or a model family sigprop cannot re-initialise, before any weight changes."""
    from ..hf.config_map import FAMILIES
    from ..measurement.adapters import is_hf_model
    from ..model.init import SCHEMES
    from ..model.transformer import Transformer, plan_for

    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)} (got {scheme!r})")
    if isinstance(model, Transformer):
        plan = plan_for(model.config.replace(init=scheme))
        with torch.no_grad():
            plan.apply(model, generator)
        model.config, model.plan = model.config.replace(init=scheme), plan
        return model
    if not is_hf_model(model):
        raise ValueError(f"apply_init re-initialises sigprop models and Hugging Face models (got a "
                         f"{type(model).__name__}, which is neither)")
    family = FAMILIES.get(model.config.model_type)
    if family not in _FILLERS:
        raise ValueError(f"apply_init cannot re-initialise a Hugging Face {model.config.model_type!r} model: "
                         + (_NOT_FILLED[family] if family in _NOT_FILLED else
                            f"its configuration is not mapped to sigprop's (mapped: {', '.join(sorted(FAMILIES))})"))
    config, plan, factors = _hf_plan(model, scheme)
    with torch.no_grad():
        _FILLERS[FAMILIES[model.config.model_type]](model, config, plan, factors, _Drawer(generator))
    return model


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
    norm.weight.fill_(weight)
    if getattr(norm, "bias", None) is not None:
        norm.bias.zero_()


def _head(model, config, plan, draw: _Drawer) -> None:
    head = model.get_output_embeddings()
    if not config.tie_head and head is not None and head.weight is not model.get_input_embeddings().weight:
        draw.normal(head.weight, plan.std("head"))
        _zero(head)


def _fill_gpt2(model, config, plan, factors, draw: _Drawer) -> None:
    """GPT-2 (Conv1D weights stored (in, out)): c_attn = [W_Q | W_K | W_V], c_proj, mlp.c_fc, mlp.c_proj."""
    base = getattr(model, "transformer", model)
    d = config.d_model
    draw.normal(base.wte.weight, plan.std("token"))
    draw.normal(base.wpe.weight, plan.std("position"))
    for i, block in enumerate(base.h):
        qkv = block.attn.c_attn.weight
        for j, role in enumerate(("q", "k", "v")):
            draw.normal(qkv[:, j * d:(j + 1) * d], plan.std(role, i))
        draw.normal(block.attn.c_proj.weight, plan.std("o", i))
        block.attn.c_proj.weight.mul_(factors[i]["attn"])
        draw.normal(block.mlp.c_fc.weight, plan.std("w1", i))
        draw.normal(block.mlp.c_proj.weight, plan.std("w2", i))
        block.mlp.c_proj.weight.mul_(factors[i]["ffn"])
        _zero(block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj)
        _norm(block.ln_1)
        _norm(block.ln_2)
    _norm(base.ln_f, plan.head_scale)
    _head(model, config, plan, draw)


def _fill_llama(model, config, plan, factors, draw: _Drawer) -> None:
    """Llama / Qwen2 / Mistral (nn.Linear weights stored (out, in)): q/k/v/o_proj, gate_proj = W_1, up_proj = W_3,
    down_proj = W_2."""
    base = getattr(model, "model", model)
    draw.normal(base.embed_tokens.weight, plan.std("token"))
    for i, block in enumerate(base.layers):
        attn, mlp = block.self_attn, block.mlp
        for proj, role in ((attn.q_proj, "q"), (attn.k_proj, "k"), (attn.v_proj, "v"), (attn.o_proj, "o"),
                           (mlp.gate_proj, "w1"), (mlp.up_proj, "w3"), (mlp.down_proj, "w2")):
            draw.normal(proj.weight, plan.std(role, i))
            _zero(proj)
        attn.o_proj.weight.mul_(factors[i]["attn"])
        mlp.down_proj.weight.mul_(factors[i]["ffn"])
        _norm(block.input_layernorm)
        _norm(block.post_attention_layernorm)
    _norm(base.norm, plan.head_scale)
    _head(model, config, plan, draw)


_FILLERS = {"gpt2": _fill_gpt2, "llama": _fill_llama}
#: Mapped families apply_init does not re-initialise, and why.
_NOT_FILLED = {"bert": "BERT's embedding LayerNorm and Post-LN blocks are not mapped to a scheme's weights yet"}
