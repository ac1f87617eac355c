"""Closed-form model-level laws of Kedia et al. (2024), "Transformers Get Stable", as pure float64 functions.

==========================  ==========================================================================
module                      content (paper section)
==========================  ==========================================================================
:mod:`.rank_collapse`       C1, C2 (App. E.1, F), stable correlations r_max, r_g_max (App. F)
:mod:`.preln`               vanilla Pre-LN: linear forward growth, (N/n)^C gradient growth (App. E.1)
:mod:`.postln`              vanilla Post-LN: C5^(N−n) gradient (App. E.2)
:mod:`.dslm`                DeepScaleLM scales, init variances, correlation schedule, bounds (Sec. 3.5,
                            App. E.3–E.6, App. M)
:mod:`.growth`              Table 3 as data and order functions
==========================  ==========================================================================

These are the paper's whole-model summaries (a layer reduced to the two gains C1, C2); the per-component moment
rules that :func:`sigprop.predict` composes live in :mod:`sigprop.components`. No torch import.
"""

from .dslm import (
    dslm_attention_var,
    dslm_correlation_schedule,
    dslm_embedding_var,
    dslm_ffn_var,
    dslm_forward_variance,
    dslm_postln_gradient_factor,
    dslm_preln_gradient_factor,
    dslm_preln_gradient_limit,
    dslm_qk_var,
    dslm_scales,
    dslm_simple_postln_gradient_factor,
    dslm_simple_preln_bounds,
    dslm_simple_preln_eq45,
    dslm_simple_preln_forward,
    dslm_simple_preln_gradient_bounds,
)
from .growth import COLUMNS, GROWTH_TABLE, METHODS, gradient_fall_order, growth_law, render_growth_table, sensitivity
from .postln import postln_gradient_factor, postln_gradient_profile, postln_layers_for_change
from .preln import (
    hyperbolic_gradient,
    preln_forward_bounds,
    preln_forward_variance,
    preln_gradient_bounds,
    preln_gradient_constant,
    preln_gradient_growth,
)
from .rank_collapse import block_constants, ffn_corr_exact, ffn_corr_kedia, r_g_max, r_max, xavier_block_constants

__all__ = [
    "block_constants", "xavier_block_constants", "ffn_corr_kedia", "ffn_corr_exact", "r_max", "r_g_max",
    "preln_forward_variance", "preln_forward_bounds", "preln_gradient_constant", "preln_gradient_growth",
    "preln_gradient_bounds", "hyperbolic_gradient",
    "postln_gradient_factor", "postln_gradient_profile", "postln_layers_for_change",
    "dslm_scales", "dslm_embedding_var", "dslm_ffn_var", "dslm_attention_var", "dslm_qk_var",
    "dslm_correlation_schedule", "dslm_forward_variance", "dslm_simple_preln_forward", "dslm_simple_preln_eq45",
    "dslm_simple_preln_bounds", "dslm_preln_gradient_factor", "dslm_preln_gradient_limit",
    "dslm_postln_gradient_factor", "dslm_simple_preln_gradient_bounds", "dslm_simple_postln_gradient_factor",
    "GROWTH_TABLE", "METHODS", "COLUMNS", "growth_law", "render_growth_table", "sensitivity", "gradient_fall_order",
]
