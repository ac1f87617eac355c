"""The versions of Python, sigprop and its dependencies: what a report or a checkpoint records to be reproduced."""

from __future__ import annotations

import importlib
import platform

__all__ = ["DEPENDENCIES", "package_versions"]

DEPENDENCIES = ("torch", "numpy", "scipy", "typer", "rich", "matplotlib", "safetensors", "tokenizers")


def package_versions() -> dict[str, str]:
    """Python's, sigprop's and each dependency's version ("MISSING (…)" for one that does not import)."""
    from .. import __version__

    out = {"python": platform.python_version(), "sigprop": __version__}
    for name in DEPENDENCIES:
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "installed")
        except ImportError as err:  # pragma: no cover - reported, not raised
            out[name] = f"MISSING ({err})"
    return out
