"""The components that ``sigprop verify`` knows, in display order, loaded lazily from ``specs/``."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util

from .spec import ComponentSpec

__all__ = ["COMPONENTS", "ON_REQUEST", "load_spec", "available", "default_sweep"]

#: name -> module under sigprop.verify.specs holding ``SPEC``. The attention block's spec (specs/attention_block.py)
#: is not in the default sweep: plain Monte Carlo of the whole block needs ~25x this budget to push its noise below
#: 1% (the shared part of every sequence reaches the output through two random projections); its tests run it on a
#: few configurations at a larger budget instead.
COMPONENTS = {
    "embedding": "embedding",
    "linear": "linear",
    "dropout": "dropout",
    "relu": "relu",
    "gelu": "gelu",
    "layernorm": "layernorm",
    "rmsnorm": "rmsnorm",
    "dyt": "dyt",
    "derf": "derf",
    "softmax": "softmax",
    "attention": "attention",
    "mha": "mha",
    "glu": "glu",
    "rope_gqa": "rope_gqa",
    "ffn_block": "ffn_block",
    "residual": "residual",
}


#: Components verified only when named (``sigprop verify glu rope_gqa``), each with a stored table of its own: their
#: sweeps cost several times all the others together, the rotary grouped-query attention's most (its sampled rule
#: draws 512 heads per configuration whatever the sweep's size); times: docs/results/components.md.
ON_REQUEST = ("glu", "rope_gqa")


def default_sweep() -> list[str]:
    """The components ``sigprop verify`` sweeps when none is named: every available one but :data:`ON_REQUEST`.

    Returns:
        Component names, in the order of :data:`COMPONENTS`.

    Example:
        >>> sweep = default_sweep()
        >>> sweep[:3], any(name in sweep for name in ON_REQUEST)
        (['embedding', 'linear', 'dropout'], False)
    """
    return [name for name in available() if name not in ON_REQUEST]


def available() -> list[str]:
    """Names whose spec module exists (the rest are listed but not yet importable)."""
    return [name for name, mod in COMPONENTS.items()
            if importlib.util.find_spec(f"sigprop.verify.specs.{mod}") is not None]


def load_spec(name: str, approx: str | None = None) -> ComponentSpec:
    """The spec of ``name``; with ``approx`` (e.g. "kedia"), the same sweep scored against that approximation of the
    rules, for components that offer one (see :func:`approximations`)."""
    if name not in COMPONENTS:
        raise ValueError(f"unknown component {name!r}; choose from: {', '.join(COMPONENTS)}")
    module = importlib.import_module(f"sigprop.verify.specs.{COMPONENTS[name]}")
    if approx in (None, "exact"):
        return module.SPEC
    offered = getattr(module, "APPROXIMATIONS", ("exact",))
    if approx not in offered:  # checked here, before any sweep: not when this component's turn comes
        raise ValueError(f"--approx {approx!r}: component {name!r} has no approximation of that name (it offers "
                         f"{', '.join(map(repr, offered))})")
    if hasattr(module, "make_spec"):
        return module.make_spec(approx)
    return dataclasses.replace(module.SPEC, name=f"{name}[{approx}]",
                               predict=functools.partial(module.predict, approx=approx))
