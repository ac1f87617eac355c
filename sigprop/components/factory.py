"""Build a normalisation or an activation by name: the one place where names map to component classes."""

from __future__ import annotations

from torch import nn

__all__ = ["NORMS", "ACTIVATIONS", "make_norm", "make_activation"]

NORMS = ("layernorm", "rmsnorm", "dyt", "derf", "none")
ACTIVATIONS = ("relu", "gelu")


def make_norm(name: str, d: int, **kwargs) -> nn.Module | None:
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


def make_activation(name: str) -> nn.Module:
    """The activation ``name`` ("relu" or "gelu") as a moment-aware module."""
    if name == "relu":
        from .relu import ReLU

        return ReLU()
    if name == "gelu":
        from .gelu import GELU

        return GELU()
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} (got {name!r})")
