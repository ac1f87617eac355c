"""Folding the residual scales into the weights (Kedia et al. Sec. 3.5): a sigprop model with λ, β (DeepScaleLM or any
scheme) and an output scale computes the same function as a vanilla transformer whose branch output projections
carry the scales.

Pre-LN, x_{l+1} = λ_l x_l + β_l f_l(Norm(x_l)). With c_l = Π_{j ≤ l} λ_j and x̃_l = x_l / c_{l−1}:
x̃_{l+1} = x̃_l + (β_l / c_l) f_l(Norm(c_{l−1} x̃_l)) = x̃_l + (β_l / c_l) f_l(Norm(x̃_l)), because a norm is invariant to
the scale of its input (LayerNorm and RMSNorm exactly up to their ε: the folded norm acts as if its ε were ε·c², so
the folded model is exact for ε = 0 and each norm's output moves by at most ε|1 − c²|/(2σ²) relative otherwise).
Each branch ends in a linear map (the attention's and the FFN's output projection), so β_l/c_l multiplies that
matrix; the final norm removes the remaining c_N, and the head's output scale s multiplies the final norm's affine
weight and bias. Post-LN, x_{l+1} = Norm(λ_l x_l + β_l f_l(x_l)) = Norm(x_l + (β_l/λ_l) f_l(x_l)): the factor is
β_l/λ_l, and s multiplies the last norm's affine parameters.

:func:`branch_scales` gives the factor of every branch of a model, in the order the layers apply them;
:func:`plan_branch_scales` the same from an init plan.
"""

from __future__ import annotations

from ..components.residual import Residual

__all__ = ["branch_scales", "fold_factors", "plan_branch_scales"]


def fold_factors(config, layer_scales) -> list[dict[str, float]]:
    """Per layer, {site: factor}: the number that multiplies each branch's output projection in the folded model
    (module docstring), from ``layer_scales``, per layer {site: (λ, β)} in the order the layer applies its branches.
    ``ValueError`` for a model without norms (nothing absorbs the scales), an encoder–decoder (not folded here) or a
    branch without a skip (λ = 0)."""
    c = config
    if c.norm_position not in ("pre", "post") or c.norm == "none":
        raise ValueError("folding needs a norm after (Post-LN) or before every branch and a final norm (Pre-LN): "
                         f"this model has norm_position={c.norm_position!r}, norm={c.norm!r}")
    if c.norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"folding needs norms that ignore their input's scale (LayerNorm, RMSNorm): norm={c.norm!r} "
                         "is an elementwise squashing whose output changes with that scale")
    if c.arch == "encoder_decoder":
        raise ValueError("folding an encoder–decoder is not supported")
    if c.norm_position == "pre" and not c.has_final_norm:
        raise ValueError("a Pre-LN model folds into a vanilla one only with its final norm (final_norm=True)")
    running, out = 1.0, []
    for index, scales in enumerate(layer_scales):
        factors = {}
        for name, (lam, beta) in scales.items():
            if lam == 0.0:
                raise ValueError(f"layer {index}, {name}: λ = 0 (no skip connection, e.g. DeepScaleLM at N = 2) has "
                                 "no fold: the branch replaces the stream")
            if c.norm_position == "pre":
                running *= lam
                factors[name] = beta / running
            else:
                factors[name] = beta / lam
        out.append(factors)
    return out


def branch_scales(model) -> list[dict[str, float]]:
    """:func:`fold_factors` of a sigprop model's own λ and β (a learnt β included), layer by layer."""
    return fold_factors(model.config, [{name: tuple(float(v) for v in child.scales())
                                        for name, child in layer.named_children() if isinstance(child, Residual)}
                                       for layer in model.all_layers()])


def plan_branch_scales(config, plan) -> list[dict[str, float]]:
    """:func:`fold_factors` of the λ and β an init plan gives a model of ``config`` (no model built); an encoder or
    decoder's layers each apply "attn" then "ffn", a parallel block (``parallel_block``) one residual, "attn"."""
    sites = ("attn",) if config.parallel_block else ("attn", "ffn")
    return fold_factors(config, [{site: plan.scales(site, i) for site in sites} for i in range(config.total_layers)])
