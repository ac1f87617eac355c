"""The versions of Python, sigprop and its dependencies: what a report or a checkpoint records to be reproduced."""

from __future__ import annotations

import importlib
import platform

__all__ = ["VERSION", "DEPENDENCIES", "package_versions"]

#: sigprop's version (the package exports it as ``sigprop.__version__``).
VERSION = "0.1.0"

DEPENDENCIES = ("torch", "numpy", "scipy", "typer", "rich", "matplotlib", "safetensors", "tokenizers")


def package_versions() -> dict[str, str]:
    """Python's, sigprop's and each dependency's version ("MISSING (…)" for one that does not import)."""
    out = {"python": platform.python_version(), "sigprop": VERSION}
    for name in DEPENDENCIES:
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "installed")
        except ImportError as err:  # pragma: no cover - reported, not raised
            out[name] = f"MISSING ({err})"
    return out
