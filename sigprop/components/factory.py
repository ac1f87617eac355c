"""Build a normalisation or an activation by name: the one place where names map to component classes.

``ATTENTIONS`` lists the self-attention kinds that :class:`~sigprop.components.attention_block.AttentionBlock`
builds ("standard": softmax attention; "shaped": Noci et al. 2023 Eq. 9 / App. D Eq. 33; "value_skipinit": He et al.
2023's α·I + β·A, :mod:`~sigprop.components.value_skipinit`)."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["NORMS", "ACTIVATIONS", "GATED_ACTIVATIONS", "ATTENTIONS", "make_norm", "make_activation"]

NORMS = ("layernorm", "rmsnorm", "dyt", "derf", "none")
ACTIVATIONS = ("relu", "gelu", "shaped_relu", "swiglu", "geglu")
#: The gated activations: the FFN block builds a :class:`~sigprop.components.glu.GLU` (gate and up projections)
#: for them instead of a linear layer and an activation.
GATED_ACTIVATIONS = ("swiglu", "geglu")
ATTENTIONS = ("standard", "shaped", "value_skipinit")


def make_norm(name: str, d: int, **kwargs: Any) -> nn.Module | None:
    """The normalisation ``name`` over width ``d`` (``"none"`` → None). Keyword arguments go to its constructor."""
    if name == "layernorm":
        from .layernorm import LayerNorm

        return LayerNorm(d, **kwargs)
    if name == "rmsnorm":
        from .rmsnorm import RMSNorm

        return RMSNorm(d, **kwargs)
    if name == "dyt":
        from .dyt import DyT

        return DyT(d, **kwargs)
    if name == "derf":
        from .derf import Derf

        return Derf(d, **kwargs)
    if name == "none":
        return None
    raise ValueError(f"norm must be one of {', '.join(NORMS)} (got {name!r})")


def make_activation(name: str, **kwargs: Any) -> nn.Module:
    """The activation ``name`` as a moment-aware module: "relu", "gelu" (no keywords) or "shaped_relu"
    (:class:`~sigprop.components.shaped_relu.ShapedReLU`, Noci et al. Eq. 4; keywords ``n`` (the width that sets
    the slopes s± = 1 + c±/√n, required), ``c_plus``, ``c_minus``, ``normalize``, ``mode``, ``anneal_steps`` go
    to its constructor). Raises ``ValueError`` for an unknown name, for keywords given to relu / gelu, and for a
    gated activation (swiglu, geglu: the FFN block builds a :class:`~sigprop.components.glu.GLU`, which needs the
    projections)."""
    if name in GATED_ACTIVATIONS:
        raise ValueError(f"activation {name!r} is a gated unit with its own projections: FFNBlock builds it as a GLU "
                         "(sigprop.components.glu.GLU), not as a standalone activation")
    if name in ("relu", "gelu") and kwargs:
        raise ValueError(f"activation {name!r} takes no keyword arguments (got {', '.join(sorted(kwargs))})")
    if name == "relu":
        from .relu import ReLU

        return ReLU()
    if name == "gelu":
        from .gelu import GELU

        return GELU()
    if name == "shaped_relu":
        from .shaped_relu import ShapedReLU

        if "n" not in kwargs:
            raise ValueError("activation 'shaped_relu' needs n= (the width that sets its slopes 1 + c±/√n)")
        return ShapedReLU(**kwargs)
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} (got {name!r})")
