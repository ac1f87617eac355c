"""The attention block: norm → multi-head attention → output projection → dropout (Kedia et al. App. B.1).

Its moment rules are the composition of its children's rules, with the sequence length ``L`` passed as context to
the attention rule; the paper's printed attention forms are available through the attention rules' ``approx``.
The attention is standard softmax attention (:class:`~sigprop.components.attention.MultiHeadAttention`) or shaped
attention (:class:`~sigprop.components.shaped_attention.ShapedAttention`, Noci et al. 2023 Eq. 9 / App. D Eq. 33).
"""

from __future__ import annotations

from collections import OrderedDict

from ..core.validate import check_range
from .attention import MultiHeadAttention
from .cross_attention import CrossAttention
from .dropout import Dropout
from .factory import ATTENTIONS, make_norm
from .linear import Linear
from .sequential import Sequential

__all__ = ["AttentionBlock", "CrossAttentionBlock"]


class AttentionBlock(Sequential):
    """norm → attn (H heads of width d_head) → proj (H·d_head → d) → drop. ``norm="none"`` gives the bare block.
    ``n_kv_heads`` (grouped-query attention), ``rope`` (a rotary base), ``rotary_fraction`` (the part of each head
    it rotates) and ``qk_norm_eps`` (QK-norm) are :class:`~sigprop.components.attention.MultiHeadAttention`'s, for
    standard attention.

    ``attn_dropout`` acts on the attention probabilities, ``p`` after the projection. Standard deviations default to
    Xavier-normal (``sigma_q``, ``sigma_k``, ``sigma_v`` for the projections, ``sigma_o`` for the output projection);
    the rules read the declared values. ``forward_moments(m, L=...)`` needs the sequence length. ``causal`` masks
    future keys (a decoder's self-attention).

    ``attention`` ∈ :data:`~sigprop.components.factory.ATTENTIONS`: ``"standard"`` (softmax attention),
    ``"value_skipinit"`` (each head's A replaced by α·I + β·A, α = 1 and β = 0 learnable, He et al. 2023:
    :class:`~sigprop.components.value_skipinit.ValueSkipInitAttention`) or
    ``"shaped"``: ``ShapedAttention(d, n_heads, d_head, sigma_q=…, sigma_k=…, sigma_v=…, causal=causal,
    **attention_kwargs)`` (e.g. ``tau0``, ``gamma1``, ``gamma2``, ``gamma_mode``, ``anneal_steps``; unset sigmas
    default to the paper's 1/√d, Noci et al. Eqs. 1–2). Shaped attention has no attention dropout (its moment rules
    assume none): ``attn_dropout > 0`` raises ``ValueError``. ``attention_kwargs`` are refused for ``"standard"``.
    """

    def __init__(self, d: int, n_heads: int, d_head: int | None = None, p: float = 0.0, attn_dropout: float = 0.0,
                 norm: str = "layernorm", sigma_q: float | None = None, sigma_k: float | None = None,
                 sigma_v: float | None = None, sigma_o: float | None = None,
                 norm_kwargs: dict | None = None, causal: bool = False, attention: str = "standard",
                 attention_kwargs: dict | None = None, n_kv_heads: int | None = None, rope: float | None = None,
                 rotary_fraction: float = 1.0, qk_norm_eps: float | None = None) -> None:
        check_range(d, "d", lo=1.0, allowed="integers >= 1")
        check_range(n_heads, "n_heads", lo=1.0, allowed="integers >= 1")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)} (got {attention!r})")
        if d_head is None and d % n_heads:
            raise ValueError(f"d ({d}) must be divisible by n_heads ({n_heads}), or give d_head")
        d_head = d // n_heads if d_head is None else d_head
        if d_head < 1:
            raise ValueError(f"d_head must be >= 1 (d={d}, n_heads={n_heads})")
        layers = OrderedDict()
        norm_module = make_norm(norm, d, **(norm_kwargs or {}))
        if norm_module is not None:
            layers["norm"] = norm_module
        if attention != "standard" and (rope is not None or n_kv_heads not in (None, n_heads)
                                        or qk_norm_eps is not None):
            raise ValueError(f"n_kv_heads, rope and QK-norm apply to standard attention only (got "
                             f"attention={attention!r})")
        if attention == "shaped":
            from .shaped_attention import ShapedAttention

            if attn_dropout > 0.0:
                raise ValueError(f"attention='shaped' has no attention dropout: attn_dropout must be 0 "
                                 f"(got {attn_dropout})")
            layers["attn"] = ShapedAttention(d, n_heads, d_head, sigma_q=sigma_q, sigma_k=sigma_k, sigma_v=sigma_v,
                                             causal=causal, **(attention_kwargs or {}))
        else:
            if attention_kwargs:
                raise ValueError(f"attention={attention!r} takes no attention_kwargs (got "
                                 f"{', '.join(sorted(attention_kwargs))})")
            if attention == "value_skipinit":
                from .value_skipinit import ValueSkipInitAttention

                layers["attn"] = ValueSkipInitAttention(d, n_heads, d_head, sigma_q=sigma_q, sigma_k=sigma_k,
                                                        sigma_v=sigma_v, dropout_p=attn_dropout, causal=causal)
            else:
                layers["attn"] = MultiHeadAttention(d, n_heads, d_head, sigma_q=sigma_q, sigma_k=sigma_k,
                                                    sigma_v=sigma_v, dropout_p=attn_dropout, causal=causal,
                                                    n_kv_heads=n_kv_heads, rope=rope,
                                                    rotary_fraction=rotary_fraction, qk_norm_eps=qk_norm_eps)
        layers["proj"] = Linear(n_heads * d_head, d, weight_std=sigma_o)
        layers["drop"] = Dropout(p)
        super().__init__(layers)


class CrossAttentionBlock(Sequential):
    """norm → cross-attention (queries from x, keys/values from ``memory``, the encoder output) → proj → drop.

    Standard softmax attention with Xavier-normal defaults like :class:`AttentionBlock`; its rules take the
    memory's moments as context (``memory_moments``, ``L_memory``; :class:`~sigprop.components.cross_attention.
    CrossAttention`), whose ``memory_backward_moments`` is the gradient it sends to the memory (collected by the
    walker, :mod:`sigprop.walk.walker`).
    """

    def __init__(self, d: int, n_heads: int, p: float = 0.0, attn_dropout: float = 0.0, norm: str = "layernorm",
                 norm_kw: dict | None = None) -> None:
        check_range(d, "d", lo=1.0, allowed="integers >= 1")
        check_range(n_heads, "n_heads", lo=1.0, allowed="integers >= 1")
        if d % n_heads:
            raise ValueError(f"d ({d}) must be divisible by n_heads ({n_heads})")
        layers = OrderedDict()
        norm_module = make_norm(norm, d, **(norm_kw or {}))
        if norm_module is not None:
            layers["norm"] = norm_module
        layers["attn"] = CrossAttention(d, n_heads, d // n_heads, dropout_p=attn_dropout)
        layers["proj"] = Linear(d, d)
        layers["drop"] = Dropout(p)
        super().__init__(layers)
