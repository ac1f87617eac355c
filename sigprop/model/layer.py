"""One transformer layer, wired once for every norm placement (Kedia et al. App. E; Fig. 14/15's add_skip):

* ``pre``:  x ← λx + β·Attn(Norm(x));  x ← λx + β·FFN(Norm(x))        (norm inside each branch)
* ``post``: x ← Norm(λx + β·Attn(x));  x ← Norm(λx + β·FFN(x))        (norm after each residual add)
* ``none``: x ← λx + β·Attn(x);        x ← λx + β·FFN(x)

with, in an encoder–decoder's decoder, a cross-attention sub-layer between the two; or, ``parallel_block`` (GPT-J,
GPT-NeoX, PaLM), one residual around both branches read from the same input:

* ``pre``, parallel: x ← λx + β·(Attn(Norm x) + FFN(Norm x))   (:class:`~sigprop.components.parallel.Parallel`)
 The self-attention is the
config's ``attention`` (standard or shaped, Noci et al. Eq. 9) and the activation its ``activation`` (shaped ReLU
included, Eq. 4); cross-attention is always standard softmax attention. The layer is a
:class:`~sigprop.components.sequential.Sequential` of :class:`~sigprop.components.residual.Residual` s and norms, so
its moment rules are the composition of theirs: the theory of each wiring exists only here.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, cast

from torch import nn

from ..components.attention_block import AttentionBlock, CrossAttentionBlock
from ..components.factory import make_norm
from ..components.ffn import FFNBlock
from ..components.parallel import Parallel
from ..components.residual import Residual
from ..components.sequential import Sequential

if TYPE_CHECKING:
    from .config import TransformerConfig

__all__ = ["TransformerLayer", "SITES", "norm_kwargs", "attention_kwargs", "activation_kwargs"]

#: The residual sites a layer may have, in order: self-attention, cross-attention (an encoder–decoder's decoder), FFN.
SITES = ("attn", "cross", "ffn")


def norm_kwargs(config: TransformerConfig, position: str = "attn") -> dict:
    """Constructor keywords of the configured norm at ``position`` ("attn", "cross", "ffn", "final"; DyT/Derf's
    α is :meth:`TransformerConfig.alpha_at`)."""
    if config.norm in ("layernorm", "rmsnorm"):
        return {"eps": config.norm_eps}
    return {"alpha": config.alpha_at(position)}


def attention_kwargs(config: TransformerConfig) -> dict:
    """Constructor keywords of the configured self-attention beyond the block's own (none for standard attention;
    for ``attention="shaped"``: τ₀, γ₁, γ₂, their mode and anneal steps, Noci et al. Eqs. 9, 33, App. D)."""
    if config.attention != "shaped":
        return {}
    return {"tau0": config.shaped_tau0, "gamma1": config.shaped_gamma1, "gamma2": config.shaped_gamma2,
            "gamma_mode": config.shaped_mode, "anneal_steps": config.shaped_anneal_steps}


def activation_kwargs(config: TransformerConfig) -> dict:
    """Constructor keywords of the configured activation (none for relu / gelu; for ``"shaped_relu"`` the width n =
    d_model that sets s± = 1 + c±/√n, as App. D's n = 768 for an FFN of width 3072, and c±, normalize, mode)."""
    if config.activation != "shaped_relu":
        return {}
    return {"n": config.d_model, "c_plus": config.shaped_c_plus, "c_minus": config.shaped_c_minus,
            "normalize": config.shaped_normalize, "mode": config.shaped_mode,
            "anneal_steps": config.shaped_anneal_steps}


class TransformerLayer(Sequential):
    """Layer ``index`` (0-based, counted over the whole model) of a transformer built from ``config``.

    Children, in order: ``attn`` [``attn_norm``] [``cross`` [``cross_norm``]] ``ffn`` [``ffn_norm``]; the
    ``*_norm`` children exist for post-norm only. A parallel block has one child, ``attn``, whose branch is a
    :class:`~sigprop.components.parallel.Parallel` of the attention and the FFN branch.
    ``forward(x, key_padding_mask=None, memory=None, memory_padding_mask=None)``.
    """

    def __init__(self, config: TransformerConfig, index: int, causal: bool = False, cross: bool = False,
                 learnable_beta: bool = False) -> None:
        self.index = int(index)
        c = config
        inner = c.norm if c.norm_position == "pre" else "none"
        layers: OrderedDict[str, nn.Module] = OrderedDict()

        def add(name: str, branch: nn.Module) -> None:
            layers[name] = Residual(branch, learnable_beta=learnable_beta)
            if c.norm_position == "post":
                layers[f"{name}_norm"] = cast(nn.Module, make_norm(c.norm, c.d_model, **norm_kwargs(c,
                name)))  # not "none"

        attn = AttentionBlock(c.d_model, c.n_heads, c.d_head, p=c.dropout, attn_dropout=c.p_attn, norm=inner,
                              norm_kwargs=norm_kwargs(c, "attn"), causal=causal, attention=c.attention,
                              attention_kwargs=attention_kwargs(c), n_kv_heads=c.n_kv_heads, rope=c.rope,
                              rotary_fraction=c.rotary_fraction, qk_norm_eps=c.qk_norm_eps)
        ffn = FFNBlock(c.d_model, c.ffn_width, activation=c.activation, p=c.dropout, norm=inner,
                       norm_kwargs=norm_kwargs(c, "ffn"), activation_kwargs=activation_kwargs(c))
        if c.parallel_block:  # one residual, its scales the "attn" site's
            add("attn", Parallel(attn=attn, ffn=ffn))
            super().__init__(layers)
            return
        add("attn", attn)
        if cross:
            add("cross", CrossAttentionBlock(c.d_model, c.n_heads, p=c.dropout, attn_dropout=c.p_attn, norm=inner,
                                             norm_kw=norm_kwargs(c, "cross")))
        add("ffn", ffn)
        super().__init__(layers)

    def branches(self) -> list[tuple[str, nn.Module]]:
        """(site name, branch module) of each residual, in order."""
        return [(name, child.branch) for name, child in self.named_children() if isinstance(child, Residual)]

    def norms(self) -> list[tuple[str, nn.Module, str, nn.Module]]:
        """(position, parent, attribute name, module) of every norm of this layer, in order: a pre-norm is the
        ``norm`` child of its branch, a post-norm the ``<site>_norm`` child of the layer; the position is the site
        ("attn", "cross", "ffn"). ``setattr(parent, name, new)`` replaces one (:mod:`sigprop.model.convert`)."""
        out = []
        for name, child in self.named_children():
            if isinstance(child, Residual):
                parts = (child.branch.named_children() if isinstance(child.branch, Parallel)
                         else [(name, child.branch)])
                for part_name, part in parts:  # a parallel block's attention and FFN branch each have a norm
                    norm = getattr(part, "norm", None)
                    if norm is not None:
                        out.append((part_name, part, "norm", norm))
            elif name.endswith("_norm") and child is not None:
                out.append((name[: -len("_norm")], self, name, child))
        return out
