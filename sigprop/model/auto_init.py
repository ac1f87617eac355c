"""``init="auto"``: DeepScaleLM's plan with every residual branch's output calibrated by the theory, layer by layer.

DeepScaleLM (Kedia et al. Sec. 3, App. M) chooses each branch's weights so that its output has unit variance given a
unit-variance input, by closed forms derived for ReLU/GELU feed-forward blocks, LayerNorm before or after each block
and bidirectional attention over tokens of correlation r (Fig. 15's schedule). Where a model leaves those
assumptions (SwiGLU, RMSNorm, DyT/Derf instead of a norm, causal or grouped-query attention, cross-attention) the
closed forms are off by a factor, and the factor compounds over depth through the stream. :func:`beyond_dslm` names
the components of a config that leave them by the most (the doctor recommends ``init="auto"`` for those).

``init="auto"`` keeps DSLM's plan (embedding tables of unit output variance, σ²_q = σ²_k = 1/d, the residual scales
λ² + β² = 1 with β² = k/N^α, the head scale) and replaces its closed forms for the *output* projections by the
component rules themselves. Walking the theory's model forward from the embedding's moments, at every residual add
y = λ·x + β·f(x) it evaluates the branch on its true input moments and rescales the branch's last matrix (O for
self-attention, W₂ for the feed-forward block) so that the branch's output second moment equals the skip input's,
E f² = E x². Then E y² = (λ² + β²) E x² = E x²: the stream keeps the embedding's unit second moment at every layer,
whatever the components (before a Post-LN norm the skip input is the previous norm's output, of unit second moment,
which is DSLM's own target). The branch output is linear in its last matrix, so the rescale is exact: one walk of
each branch, no iteration. Cross-attention shares its O role with self-attention in a plan (one value per layer),
so its factor goes into its β instead (the forward pass is the same; λ² + β² = 1 no longer holds for that site).

Where DSLM's assumptions hold (ReLU, LayerNorm, bidirectional attention), the calibrated plan is DSLM's up to the
difference between its closed forms and sigprop's exact rules (tested). The token correlation is held below
collapse by DSLM's residual scaling itself: each layer moves the stream by β² = 2/N of its variance, so N layers
move it by O(1) (App. E.3).

Speed: self-attention is walked with the closed-form rule (bidirectional or causal) up to s² = 1 (``approx="forward"``,
:data:`~sigprop.components.attention.FORWARD_MAX_S2`) where :func:`sigprop.predict` samples above 0.3 / 0.5 (DSLM's
σ²_q = σ²_k = 1/d put the scores near s² ≈ 1 − r at every layer): the forward variance is all the calibration
reads, and there the closed form stays close to the sampled rule at a fraction of its cost (both measured by
``bench/attention_causal.py``: the results page bench-attention-causal.txt); the sampled rule still serves larger
scores, e.g. ``qk_gain=2``. Rotary positions rotate queries and
keys without changing the scores' variance; the walk leaves them out (the closed form assumes exchangeable keys),
an approximation of the branch's output variance that the measured profile checks. Cross-attention has only the
sampled rule (``CROSS_HEADS`` heads a layer here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from torch import nn

from ..components.attention import MultiHeadAttention
from ..components.cross_attention import CrossAttention
from ..components.draws import layer_context
from ..components.embedding import Embedding, zipf_correlation
from ..components.residual import Residual
from ..core.moments import GradMoments, Moments
from ..walk.exchangeable import EXCHANGEABLE
from ..walk.walker import Flow, Walker

if TYPE_CHECKING:
    from .config import TransformerConfig
    from .transformer import Transformer

__all__ = ["branch_factors", "beyond_dslm", "CROSS_HEADS"]

#: Heads a layer the sampled cross-attention rule draws in the calibration walk (its forward variance's relative
#: standard error falls like 1/√(heads · d_head) per layer; the sampled self-attention rule's precision against the
#: number of heads: the results page bench-attention-sampled.txt).
CROSS_HEADS = 32


def beyond_dslm(config: TransformerConfig) -> str:
    """The components of ``config`` whose moments DeepScaleLM's closed forms (App. M) do not model at all, named
    ("activation=swiglu, norm=rmsnorm"); "" if none. Causal, grouped-query and cross-attention also leave DSLM's
    assumptions, by less (docs/results/auto-init.md measures both plans on a causal decoder)."""
    parts = [f"activation={config.activation}" if config.activation in ("swiglu", "geglu") else "",
             f"norm={config.norm}" if config.norm in ("rmsnorm", "dyt", "derf") else ""]
    return ", ".join(p for p in parts if p)


def _input_moments(model: Transformer, decoder: bool = False) -> Moments:
    """The moments entering a stack: the embedding's output after its dropout, for i.i.d. Zipf(1) tokens over the
    vocabulary (App. A.1); a patch model's from ``config.input_corr`` (its images' correlation, as DSLM needs)."""
    c = model.config
    if c.input != "tokens":
        if c.input_corr is None:
            raise ValueError("init='auto' with patch input needs config.input_corr, the token correlation of the "
                             "patch embedding's output on your images (as init='dslm' does)")
        return Moments(mean=0.0, var=1.0, corr=float(c.input_corr))
    drop = model.dec_embed_drop if decoder else model.embed_drop
    return drop.forward_moments(cast(Embedding, model.embed).forward_moments(zipf_correlation(c.vocab_size)))


def _second_moment(m: Moments) -> float:
    return float(np.mean(m.second_moment))


def _scaled(m: Moments, factor: float) -> Moments:
    """The moments of √factor times a variable of moments ``m``."""
    return Moments(mean=m.mean * np.sqrt(factor), var=m.var * factor, corr=m.corr, corr_hidden=m.corr_hidden)


@dataclass
class _CalibratingWalker(Walker[Moments, GradMoments]):
    """Walks one layer as every walker does, each of its residual branches' output rescaled to the skip input's
    second moment (:meth:`Walker.branch_output`); the factor recorded in ``factors[site][layer_index]``."""

    layer_index: int = 0
    site_of: dict[int,
    str] = field(default_factory=dict)  # id of the layer's Residual children → "attn", "cross", "ffn"
    factors: dict[str, np.ndarray] = field(default_factory=dict)

    def branch_output(self, residual: nn.Module, skip: Moments, value: Moments) -> Moments:
        site = self.site_of.get(id(residual))
        if site is None:
            return value
        if site == "cross":  # its O is the layer's self-attention O, already rescaled; the rest goes into β
            value = _scaled(value, self.factors["attn"][self.layer_index])
        factor = _second_moment(skip) / _second_moment(value)
        self.factors[site][self.layer_index] = factor
        return _scaled(value, factor)


def branch_factors(model: Transformer, attention_seed: int = 0) -> dict[str, np.ndarray]:
    """Site ("attn", "cross", "ffn") → array over the model's layers of the factor by which each branch's output
    second moment must be multiplied to equal its skip input's (module docstring), walking ``model`` (the theory's
    :class:`~sigprop.model.transformer.Transformer`, weights never drawn; its self-attentions are switched to the
    closed-form rule up to s² = 1) forward stack by stack; 1 where a layer has no such branch. A rule's
    ``ValueError`` names its layer."""
    c = model.config
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and not isinstance(module, CrossAttention):
            module.approx = "forward"
    factors = {site: np.ones(c.total_layers) for site in ("attn", "cross", "ffn")}
    context: dict[str, Any] = {"L": c.seq_len, "attention_heads": CROSS_HEADS, "attention_seed": attention_seed}
    memory = None
    for stack in model.stacks():
        ctx = dict(context)
        if memory is not None:
            ctx.update(memory_moments=memory, L_memory=c.seq_len)
        flow = Flow(_input_moments(model, decoder=stack.name == "decoder"))
        for layer in stack.layers:
            try:
                site_of = {id(child): name for name, child in layer.named_children() if isinstance(child, Residual)}
                walker = _CalibratingWalker(EXCHANGEABLE, layer_context(ctx, layer.index), layer_index=layer.index,
                                            site_of=site_of, factors=factors)
                flow, _ = walker.forward(layer, flow)
            except ValueError as err:
                raise ValueError(f"init='auto', layer {layer.index}: {err}") from None
        if stack.memory:
            memory = flow.value
            if stack.memory_norm is not None:
                memory = Walker(EXCHANGEABLE, ctx).forward(stack.memory_norm, flow)[0].value
    bad = {site: f for site, f in factors.items() if not np.all(np.isfinite(f) & (f > 0))}
    if bad:
        raise ValueError(f"init='auto': a branch's output has no finite positive second moment at sites {list(bad)}")
    return factors
